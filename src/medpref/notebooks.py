"""Jupytext pairs of the pipeline notebooks: ``notebooks/X.ipynb`` ↔ ``notebooks/py/X.py``.

The ``.py`` twin (py:percent, cells and their tags only) is what a reviewer reads in a
diff; the ``.ipynb`` is what papermill runs and dvc depends on. The settings below are
the ones in ``notebooks/jupytext.toml`` (a test keeps them equal), so JupyterLab's
jupytext pairing and this module write the same bytes.

    python -m medpref.notebooks sync             # .ipynb → .py for every notebook
    python -m medpref.notebooks sync --from-py   # .py → .ipynb (after editing the .py)
    python -m medpref.notebooks check            # exit 1 when a pair is missing or differs
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Iterable
from pathlib import Path

import nbformat

from medpref import REPO_ROOT

FORMAT = "py:percent"
PAIR_DIR = "py"
NOTEBOOK_METADATA_FILTER = "-all"
CELL_METADATA_FILTER = "tags,-all"
DEFAULT_METADATA = {"kernelspec": {"name": "medpref", "display_name": "MedPref (.venv)",
                                   "language": "python"},
                    "language_info": {"name": "python"}}


def notebooks_in(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.ipynb"))


def pair_path(notebook: Path) -> Path:
    return notebook.parent / PAIR_DIR / f"{notebook.stem}.py"


def notebook_path(pair: Path) -> Path:
    return pair.parent.parent / f"{pair.stem}.ipynb"


def render_pair(nb: nbformat.NotebookNode) -> str:
    """The py:percent text of a notebook: cells and tags, no outputs, no notebook metadata."""
    import jupytext

    nb = copy.deepcopy(nb)
    nb.metadata["jupytext"] = {"notebook_metadata_filter": NOTEBOOK_METADATA_FILTER,
                               "cell_metadata_filter": CELL_METADATA_FILTER}
    return jupytext.writes(nb, fmt=FORMAT)


def notebook_from_pair(text: str, metadata: dict | None = None) -> nbformat.NotebookNode:
    """A notebook without outputs from py:percent text, with the given notebook metadata
    (the existing notebook's, else the ``medpref`` kernel) and stable cell ids."""
    import jupytext

    parsed = jupytext.reads(text, fmt=FORMAT)
    nb = nbformat.v4.new_notebook()
    nb.metadata = copy.deepcopy(metadata or DEFAULT_METADATA)
    for i, cell in enumerate(parsed.cells):
        tags = list(cell.metadata.get("tags", []))
        new = (nbformat.v4.new_markdown_cell(cell.source) if cell.cell_type == "markdown"
               else nbformat.v4.new_code_cell(cell.source))
        if tags:
            new.metadata["tags"] = tags
        new["id"] = f"cell-{i:02d}"
        nb.cells.append(new)
    nbformat.validate(nb)
    return nb


def sync_to_py(notebooks: Iterable[Path]) -> list[Path]:
    """Write each notebook's pair; returns the pairs that changed."""
    changed = []
    for path in notebooks:
        text = render_pair(nbformat.read(path, as_version=4))
        target = pair_path(path)
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            changed.append(target)
    return changed


def sync_from_py(pairs: Iterable[Path]) -> list[Path]:
    """Rewrite each pair's notebook from the .py (keeping its notebook metadata)."""
    changed = []
    for pair in pairs:
        target = notebook_path(pair)
        metadata = nbformat.read(target, as_version=4).metadata if target.exists() else None
        if metadata is not None:
            metadata = {k: v for k, v in metadata.items() if k != "jupytext"}
        nb = notebook_from_pair(pair.read_text(encoding="utf-8"), metadata)
        text = nbformat.writes(nb) + "\n"
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
            changed.append(target)
    return changed


def check_pairs(folder: Path) -> list[str]:
    """One line per notebook whose pair is missing or differs, and per orphan pair."""
    problems = []
    notebooks = notebooks_in(folder)
    for path in notebooks:
        pair = pair_path(path)
        rel = pair.relative_to(folder.parent) if folder.parent in pair.parents else pair
        if not pair.exists():
            problems.append(f"{rel}: missing (pair of {path.name})")
        elif pair.read_text(encoding="utf-8") != render_pair(nbformat.read(path, as_version=4)):
            problems.append(f"{rel}: differs from {path.name}")
    names = {p.stem for p in notebooks}
    for orphan in sorted((folder / PAIR_DIR).glob("*.py")):
        if orphan.stem not in names:
            problems.append(f"{orphan.name}: a pair without a notebook")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["sync", "check"])
    parser.add_argument("--from-py", action="store_true",
                        help="sync: rewrite the notebooks from their .py pairs")
    parser.add_argument("--folder", type=Path, default=REPO_ROOT / "notebooks")
    args = parser.parse_args(argv)
    if args.command == "sync":
        changed = (sync_from_py(sorted((args.folder / PAIR_DIR).glob("*.py"))) if args.from_py
                   else sync_to_py(notebooks_in(args.folder)))
        print(f"{len(changed)} file(s) written" + "".join(f"\n  {p}" for p in changed))
        return 0
    problems = check_pairs(args.folder)
    for line in problems:
        print(line)
    if problems:
        print("notebooks and their py:percent pairs differ: run `make notebooks-sync` "
              "(or `... DIRECTION=from-py` after editing a .py)")
        return 1
    print(f"{len(notebooks_in(args.folder))} notebook(s) in step with their pairs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
