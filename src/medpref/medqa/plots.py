"""Stage 06's figures: HR@k curves per query source, and ratings with their CIs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from medpref.medqa.retrieval import RetrievalResult, chance_hit_rate


def _curve(results: Sequence[RetrievalResult], level: str, n: int) -> np.ndarray:
    ranks = np.array([getattr(r, f"{level}_rank") or n + 1 for r in results])
    return np.array([(ranks <= k).mean() for k in range(1, n + 1)])


def hr_curves(results: Mapping[str, Sequence[RetrievalResult]], labels: Mapping[str, str],
              n_docs: int, n_items: int, marks: Sequence[int]):
    """HR@k against k (log scale) at document and attribute level, chance dashed."""
    from medpref.reports import figure

    fig, axes = figure(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, level, n, title in ((axes[0], "doc", n_docs, f"document level ({n_docs} medicines)"),
                                (axes[1], "attr", n_items, f"attribute level ({n_items} items)")):
        ks = np.arange(1, n + 1)
        for source, res in results.items():
            ax.plot(ks, _curve(res, level, n), label=labels.get(source, source))
        ax.plot(ks, [chance_hit_rate(n, 1, int(k)) for k in ks], "k--", lw=0.8,
                label="random ranking (1 gold)")
        for k in marks:
            ax.axvline(k, color="0.85", lw=0.6, zorder=0)
        ax.set_xscale("log")
        ax.set_xlabel("k")
        ax.set_title(title)
    axes[0].set_ylabel("HR@k")
    axes[1].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def rating_intervals(table: pd.DataFrame,
                     title: str = "Model ratings: Elo and Bradley–Terry (bootstrap CI)"):
    """Elo (mean over shuffles) and Bradley–Terry with bootstrap CIs, one row per model."""
    from medpref.reports import figure

    fig, ax = figure(figsize=(7, 0.6 + 0.55 * max(1, len(table))))
    if table.empty:  # every verdict unparsable: say so rather than draw nothing
        ax.text(0.5, 0.5, "no parsable verdicts: nothing to rate", ha="center", va="center")
        ax.set_axis_off()
        ax.set_title(title)
        return fig
    labels = [f"{v}: {m}" if v != "stage" else m for v, m in zip(table["verdicts"], table["model"])]
    y = np.arange(len(table))
    for offset, col, colour in ((-0.12, "elo", "tab:blue"), (0.12, "bt", "tab:orange")):
        ax.errorbar(table[col], y + offset, fmt="o", color=colour,
                    xerr=[table[col] - table[f"{col}_low"], table[f"{col}_high"] - table[col]],
                    capsize=3, label={"elo": "Elo", "bt": "Bradley–Terry"}[col])
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlabel("rating (bootstrap CI)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
