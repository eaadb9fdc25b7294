"""Writing what a stage shows: tables as CSV + Markdown, figures as PNG, metrics as JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from medpref.contracts import atomic_write_text


def write_table(df: pd.DataFrame, stem: str | Path, floatfmt: str = ".3f") -> dict[str, Path]:
    """``<stem>.csv`` and ``<stem>.md`` side by side; returns both paths."""
    stem = Path(stem)
    csv, md = stem.with_suffix(".csv"), stem.with_suffix(".md")
    atomic_write_text(csv, df.to_csv(index=False))
    atomic_write_text(md, df.to_markdown(index=False, floatfmt=floatfmt) + "\n")
    return {"csv": csv, "md": md}


def write_metrics(metrics: dict[str, Any], path: str | Path) -> None:
    atomic_write_text(path, json.dumps(metrics, indent=2, sort_keys=True) + "\n")


def save_figure(fig, path: str | Path, dpi: int = 120) -> Path:
    """Save a matplotlib figure (PNG, fixed metadata so reruns give the same bytes)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, bbox_inches="tight", metadata={"Software": None})
    return path
