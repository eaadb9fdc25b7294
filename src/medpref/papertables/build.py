"""One paper artefact: our rows (read from a stage's CSV) beside the paper's published rows.

Every number of ours keeps a trace (file, row, column, value as read), so a test can show
that nothing in a paper table was typed by hand.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from medpref.contracts import atomic_write_text
from medpref.papertables.spec import ArtefactSpec

OURS, PAPER = "ours", "paper (published)"


@dataclass
class Cell:
    """Where one of our numbers came from."""

    file: str
    row: str
    column: str
    value: float


@dataclass
class BuiltTable:
    spec: ArtefactSpec
    table: pd.DataFrame
    trace: list[Cell] = field(default_factory=list)
    note: str = ""      # what the source's own ``note`` column says of our rows


#: A stage table's column that explains its rows (how they were made, or why they are
#: empty): shown under the paper table as "Our rows: ...", never as a number.
NOTE_COLUMN = "note"


class MissingSource(FileNotFoundError):
    """The stage that makes this artefact has not written its source file."""


def _our_rows(spec: ArtefactSpec, root: Path) -> tuple[list[dict], list[Cell]]:
    path = root / spec.source
    if not path.exists():
        raise MissingSource(f"{spec.source} not found (stage '{spec.stage}' has not made it)")
    df = pd.read_csv(path)
    if df.empty:  # the stage ran and had nothing to report (e.g. no policy per grid cell)
        return [], []
    for col, want in spec.filter.items():
        df = df[df[col].astype(str) == want]
    row_cols = spec.row.split("+")
    missing = [c for c in [*row_cols, *spec.columns.values()] if c not in df.columns]
    if missing:
        raise ValueError(f"{spec.source}: no column(s) {missing} for artefact '{spec.id}'")
    if spec.rows is not None:
        df = df[df[row_cols[0]].astype(str).isin(spec.rows)]
    rows, trace = [], []
    for _, rec in df.iterrows():
        label = " ".join(str(rec[c]) for c in row_cols)
        out = {"source": OURS, "row": label}
        for header, col in spec.columns.items():
            value = rec[col]
            if isinstance(value, (int, float)) and not pd.isna(value):
                trace.append(Cell(spec.source, label, col, float(value)))
                value = float(value) * spec.scale.get(header, 1.0)
            out[header] = value
        rows.append(out)
    return rows, trace


def _published_rows(spec: ArtefactSpec) -> list[dict]:
    if not spec.published:
        return []
    return [{"source": PAPER, "row": label, **dict(zip(spec.columns, values))}
            for label, values in spec.published.rows.items()]


def _our_note(spec: ArtefactSpec, root: Path) -> str:
    """The distinct texts of the source's ``note`` column over the rows the artefact
    reads (after its filter), joined; empty when it has none."""
    df = pd.read_csv(root / spec.source, keep_default_na=False, dtype=str)
    if NOTE_COLUMN not in df.columns:
        return ""
    for col, want in spec.filter.items():
        df = df[df[col] == want]
    return "; ".join(n for n in dict.fromkeys(df[NOTE_COLUMN]) if n.strip())


def build_table(spec: ArtefactSpec, root: Path) -> BuiltTable:
    """Our rows first, then the paper's, under the paper's headers; what the source's
    ``note`` column says of our rows beside them."""
    ours, trace = _our_rows(spec, root)
    table = pd.DataFrame(ours + _published_rows(spec),
                         columns=["source", "row", *spec.columns])
    return BuiltTable(spec, table, trace, _our_note(spec, root))


def _fmt(value: object, digits: int) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        text = f"{value:.{digits}f}"
        return text[1:] if text.startswith("-") and float(text) == 0 else text  # no "-0.0"
    return "–" if value is None else str(value)


def to_latex(table: pd.DataFrame, caption: str, digits: int = 1) -> str:
    """A booktabs tabular fragment (no jinja2 templates: plain, reviewable text)."""
    esc = str.maketrans({"&": r"\&", "%": r"\%", "_": r"\_", "#": r"\#"})
    cols = list(table.columns)
    lines = [r"\begin{tabular}{ll" + "r" * (len(cols) - 2) + "}", r"\toprule",
             " & ".join(str(c).translate(esc) for c in cols) + r" \\", r"\midrule"]
    for _, rec in table.iterrows():
        lines.append(" & ".join(_fmt(rec[c], digits).translate(esc) for c in cols) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", f"% {caption}".translate(esc)]
    return "\n".join(lines) + "\n"


def render_built(built: BuiltTable, digits: int = 1) -> dict[str, str]:
    """``<id>.csv``, ``<id>.md`` (with the label, what the stage notes of our rows and the
    paper's note) and ``<id>.tex``: file name → text."""
    stem = built.spec.id
    shown = built.table.map(lambda v: _fmt(v, digits) if isinstance(v, float) else v)
    note = built.spec.published.note if built.spec.published else ""
    md = (f"**{built.spec.paper} — {built.spec.label}**\n\n"
          + shown.to_markdown(index=False) + "\n"
          + (f"\nOur rows: {built.note}.\n" if built.note else "")
          + (f"\nPaper rows: {note}.\n" if note else ""))
    return {f"{stem}.csv": built.table.to_csv(index=False), f"{stem}.md": md,
            f"{stem}.tex": to_latex(built.table, built.spec.label, digits)}


def write_built(built: BuiltTable, out_dir: Path, digits: int = 1) -> list[Path]:
    """:func:`render_built`'s files written under ``out_dir``; returns their paths."""
    paths = []
    for name, text in render_built(built, digits).items():
        atomic_write_text(out_dir / name, text)
        paths.append(out_dir / name)
    return paths
