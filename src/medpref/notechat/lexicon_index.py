"""Build a QuickUMLS index from UMLS-format RRF files (stage ``notechat_index``).

NoteChat extracts the note's concepts with medspacy + QuickUMLS. medspacy ships an index
of 5 concepts only, and QuickUMLS's own ``install`` entry point wants to download a
spaCy model and asks questions on stdin, so the index is built here through QuickUMLS's
Python functions, from the project's embedded lexicon
(``data/embedded/lexicon/{MRCONSO,MRSTY}.RRF``) or from a licensed UMLS ``META/``
folder, which has the same layout::

    python -m medpref.notechat.lexicon_index data/embedded/lexicon data/02_notechat/quickumls_index

The index is written into a temporary folder and renamed into place, so a failed build
leaves no half-written index behind.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import tempfile
from pathlib import Path

REQUIRED = ("MRCONSO.RRF", "MRSTY.RRF")


def check_lexicon(lexicon_dir: Path) -> None:
    """The lexicon folder holds MRCONSO and MRSTY; every concept has a semantic type."""
    missing = [f for f in REQUIRED if not (lexicon_dir / f).is_file()]
    if missing:
        raise FileNotFoundError(f"{lexicon_dir}: missing {', '.join(missing)}")
    typed = {line.split("|", 1)[0] for line in
             (lexicon_dir / "MRSTY.RRF").read_text(encoding="utf-8").splitlines() if line}
    with open(lexicon_dir / "MRCONSO.RRF", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            fields = line.rstrip("\n").split("|")
            if len(fields) < 15:
                raise ValueError(f"{lexicon_dir / 'MRCONSO.RRF'}:{lineno}: expected 18 "
                                 f"'|'-separated fields, got {len(fields)}")
            if fields[0] not in typed:
                raise ValueError(f"{lexicon_dir / 'MRCONSO.RRF'}:{lineno}: CUI {fields[0]} "
                                 "has no row in MRSTY.RRF")


def _write_index(lexicon_dir: Path, dest: Path, language: str) -> None:
    from quickumls import install

    opts = argparse.Namespace(lowercase=True, normalize_unicode=False, language=language)
    with contextlib.redirect_stdout(io.StringIO()):  # QuickUMLS prints progress lines
        terms = install.extract_from_mrconso(str(lexicon_dir / "MRCONSO.RRF"),
                                             str(lexicon_dir / "MRSTY.RRF"), opts)
        install.parse_and_encode_ngrams(terms, str(dest / "umls-simstring.db"),
                                        str(dest / "cui-semtypes.db"), "unqlite")
    # The flags QuickUMLS reads at load time (what its installer writes).
    (dest / "lowercase.flag").write_text("")
    (dest / "language.flag").write_text(language)
    (dest / "database_backend.flag").write_text("unqlite")


def count_concepts(lexicon_dir: Path, language: str = "ENG") -> dict[str, int]:
    cuis, strings = set(), 0
    with open(lexicon_dir / "MRCONSO.RRF", encoding="utf-8") as fh:
        for line in fh:
            fields = line.split("|")
            if len(fields) > 14 and fields[1] == language:
                cuis.add(fields[0])
                strings += 1
    return {"concepts": len(cuis), "strings": strings}


def build_index(lexicon_dir: str | Path, dest: str | Path, language: str = "ENG") -> dict:
    """Build the QuickUMLS index of ``lexicon_dir`` at ``dest`` (replaced atomically)."""
    lexicon_dir, dest = Path(lexicon_dir), Path(dest)
    check_lexicon(lexicon_dir)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}."))
    try:
        _write_index(lexicon_dir, tmp, language)
        info = {"lexicon": str(lexicon_dir), "language": language,
                **count_concepts(lexicon_dir, language)}
        (tmp / "medpref_index.json").write_text(json.dumps(info, indent=2) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return info


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("lexicon", help="folder with MRCONSO.RRF and MRSTY.RRF")
    ap.add_argument("dest", help="index folder to (re)create")
    ap.add_argument("--language", default="ENG")
    args = ap.parse_args(argv)
    info = build_index(args.lexicon, args.dest, args.language)
    print(f"QuickUMLS index at {args.dest}: {info['concepts']} concepts, "
          f"{info['strings']} strings")


if __name__ == "__main__":
    main()
