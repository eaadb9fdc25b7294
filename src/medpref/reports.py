"""Writing what a stage shows: tables as CSV + Markdown, figures as PNG, metrics as JSON.

Every figure has one look: :func:`figure` (used instead of ``plt.subplots``) applies the
project's seaborn style first, and :func:`save_figure` writes it with fixed metadata.
Numbers never print as ``-0``: tables and annotations pass through :func:`no_negative_zero`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from medpref.contracts import atomic_write_text

#: The one style: seaborn's whitegrid at paper scale, a colour-blind-safe palette.
STYLE: dict[str, Any] = {
    "context": "paper", "style": "whitegrid", "palette": "colorblind", "font_scale": 1.1,
    "rc": {"figure.dpi": 120, "savefig.dpi": 120, "axes.titlesize": 11,
           "axes.titleweight": "bold", "axes.titlepad": 10, "legend.frameon": False,
           "axes.spines.top": False, "axes.spines.right": False, "image.cmap": "viridis"},
}


def apply_style() -> None:
    """Set the project's seaborn/matplotlib style (idempotent; the backend is left alone,
    so figures still show inline in JupyterLab)."""
    import seaborn as sns

    sns.set_theme(context=STYLE["context"], style=STYLE["style"], palette=STYLE["palette"],
                  font_scale=STYLE["font_scale"], rc=STYLE["rc"])


def figure(*args: Any, **kwargs: Any):
    """``plt.subplots`` in the project's style: returns ``(fig, ax)`` or ``(fig, axes)``."""
    apply_style()
    import matplotlib.pyplot as plt

    return plt.subplots(*args, **kwargs)


def decimals_of(floatfmt: str) -> int | None:
    """``".3f"`` → 3; None for a format without a fixed number of decimals."""
    match = re.fullmatch(r"\.?(\d+)f", floatfmt)
    return int(match.group(1)) if match else None


def format_number(value: float, fmt: str = ".0f") -> str:
    """``format(value, fmt)`` that never writes a negative zero ("-0", "-0.00"); NaN → ""."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return ""
    text = format(value, fmt)
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def no_negative_zero(df: pd.DataFrame, decimals: int | None = None) -> pd.DataFrame:
    """A copy whose float cells that are zero — or round to zero at ``decimals`` — are +0.0."""
    out = df.copy()
    for col in out.columns:
        if pd.api.types.is_float_dtype(out[col]):
            values = out[col].to_numpy(dtype=float)
            shown = np.round(values, decimals) if decimals is not None else values
            out[col] = np.where(shown == 0, 0.0, values)
    return out


def write_table(df: pd.DataFrame, stem: str | Path, floatfmt: str = ".3f") -> dict[str, Path]:
    """``<stem>.csv`` and ``<stem>.md`` side by side; returns both paths."""
    stem = Path(stem)
    csv, md = stem.with_suffix(".csv"), stem.with_suffix(".md")
    atomic_write_text(csv, no_negative_zero(df).to_csv(index=False))
    shown = no_negative_zero(df, decimals_of(floatfmt))
    atomic_write_text(md, shown.to_markdown(index=False, floatfmt=floatfmt) + "\n")
    return {"csv": csv, "md": md}


def write_metrics(metrics: dict[str, Any], path: str | Path) -> None:
    atomic_write_text(path, json.dumps(metrics, indent=2, sort_keys=True) + "\n")


def save_figure(fig, path: str | Path, dpi: int = 120) -> Path:
    """Save a matplotlib figure (PNG, fixed metadata so reruns give the same bytes)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, bbox_inches="tight", metadata={"Software": None})
    apply_style()  # figures drawn after this one, even without figure(), share the style
    return path
