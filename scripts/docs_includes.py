"""Write the generated blocks of the docs from the files they show.

A page in ``docs/`` (or the README) may hold a block between two comment lines::

    <!-- BEGIN GENERATED headlines -->
    ...
    <!-- END GENERATED headlines -->

This script rewrites what lies between them from the repository's files:

- ``headlines``: stage 09's headline numbers (``reports/09_tables/metrics.json``, the
  names and sources that ``headlines`` in ``configs/paper_tables.yaml`` gives), each with
  the file it came from and that stage's commit;
- ``file:PATH``: the file ``PATH`` of the repository, verbatim, in a fenced block;
- ``md:PATH``: the Markdown file ``PATH`` (a generated table such as
  ``benchmarks/repro_timings.md``), verbatim, as Markdown;
- ``cold-run``: what the last cold run cost (``benchmarks/repro_timings.json``): its
  commit, date, cores, wall and CPU time, load, and the disk it left.

A number in the docs outside a code span or such a block is refused by
``tests/test_docs.py``, which also checks that every block equals what this script writes,
so a rerun of the pipeline that changes a report makes that test name the stale block.

    python scripts/docs_includes.py           # rewrite the blocks in README.md and docs/
    python scripts/docs_includes.py --check   # exit 1 naming each stale block
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^<!-- BEGIN GENERATED (?P<name>\S+) -->\n(?P<body>.*?)"
                   r"^<!-- END GENERATED (?P=name) -->$", re.MULTILINE | re.DOTALL)
FENCE = {".yaml": "yaml", ".yml": "yaml", ".py": "python", ".toml": "toml", ".json": "json"}


def doc_files(root: Path = ROOT) -> list[Path]:
    """The README and every Markdown page under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def blocks(text: str) -> Iterator[re.Match]:
    return BLOCK.finditer(text)


def _link(target: Path, doc: Path) -> str:
    return Path(os.path.relpath(target, doc.parent)).as_posix()


def render_file(rel: str, root: Path) -> str:
    path = root / rel
    if not path.is_file():
        raise FileNotFoundError(f"generated block file:{rel}: no such file in the repository")
    body = path.read_text(encoding="utf-8")
    return f"```{FENCE.get(path.suffix, '')}\n{body.rstrip()}\n```\n"


def render_headlines(root: Path, doc: Path) -> str:
    """Stage 09's headline numbers as a table: name, value, source file, key, commit."""
    values = json.loads((root / "reports/09_tables/metrics.json").read_text(encoding="utf-8"))
    registry = yaml.safe_load((root / "configs/paper_tables.yaml").read_text(encoding="utf-8"))
    rows = ["| headline | value | read from | key | stage's commit |", "|---|---|---|---|---|"]
    for spec in registry["headlines"]:
        name, source = spec["name"], root / spec["source"]
        if name not in values:
            raise KeyError(f"reports/09_tables/metrics.json has no headline '{name}'")
        prov = source.parent / "provenance.json"
        commit = json.loads(prov.read_text(encoding="utf-8"))["git_commit"][:7] \
            if prov.exists() else "?"
        key = " → ".join(f"`{k}`" for k in spec["key"])
        rows.append(f"| `{name}` | {values[name]} | [{spec['source']}]({_link(source, doc)}) "
                    f"| {key} | `{commit}` |")
    return "\n".join(rows) + "\n"


def render_cold_run(root: Path, doc: Path) -> str:
    """The last cold run's cost as one table row (``benchmarks/repro_timings.json``)."""
    path = root / "benchmarks/repro_timings.json"
    r = json.loads(path.read_text(encoding="utf-8"))
    disk = r.get("disk_gib") or {}
    rows = ["| commit | date | cores | wall | CPU | load before → after | disk after the run "
            "(GiB) | record |", "|---|---|---:|---:|---:|---|---|---|",
            f"| `{r['commit']}` | {r['date']} | {r['cores']} | {r['total_wall_min']} min | "
            + (f"{r['cpu_s'] / 60:.1f} min" if r.get("cpu_s") is not None else "–")
            + f" | {r['load_before']} → {r['load_after']} | "
            + (f"checkout {disk['checkout']} (data {disk.get('data', 0)}, models "
               f"{disk.get('models', 0)}), venv {disk['venv']}" if disk else "not measured")
            + f" | [{path.relative_to(root).as_posix()}]({_link(path, doc)}) |"]
    return "\n".join(rows) + "\n"


def render(name: str, root: Path, doc: Path) -> str:
    """The body of block ``name`` in page ``doc``."""
    if name == "headlines":
        return render_headlines(root, doc)
    if name == "cold-run":
        return render_cold_run(root, doc)
    if name.startswith("file:"):
        return render_file(name.removeprefix("file:"), root)
    if name.startswith("md:"):
        path = root / name.removeprefix("md:")
        if not path.is_file():
            raise FileNotFoundError(f"generated block {name}: no such file in the repository")
        return path.read_text(encoding="utf-8").rstrip() + "\n"
    raise ValueError(f"{doc}: unknown generated block '{name}' "
                     "(known: headlines, cold-run, file:PATH, md:PATH)")


def refresh(text: str, root: Path, doc: Path) -> str:
    """``text`` with every generated block's body rewritten."""
    def body(m: re.Match) -> str:
        name = m["name"]
        return (f"<!-- BEGIN GENERATED {name} -->\n{render(name, root, doc)}"
                f"<!-- END GENERATED {name} -->")
    return BLOCK.sub(body, text)


def stale(root: Path = ROOT) -> list[str]:
    """``path: block`` of every block whose body differs from what this script writes."""
    out = []
    for doc in doc_files(root):
        text = doc.read_text(encoding="utf-8")
        for m in blocks(text):
            if m["body"] != render(m["name"], root, doc):
                out.append(f"{doc.relative_to(root)}: {m['name']}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale blocks")
    args = parser.parse_args(argv)
    if args.check:
        found = stale()
        for line in found:
            print(f"stale generated block: {line}")
        return 1 if found else 0
    for doc in doc_files():
        text = doc.read_text(encoding="utf-8")
        new = refresh(text, ROOT, doc)
        if new != text:
            doc.write_text(new, encoding="utf-8")
            print(f"rewrote {doc.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
