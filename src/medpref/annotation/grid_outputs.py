"""The grid table's outputs (stage ``annotation_grid_table``), declared once: its records
and the table and figure built from them.

The records (``reports/04_annotation/grid_table/records/``), one row per item with its
content ``key``:

* ``cells`` — each weighting × trajectory-length cell, in grid order: the pairs it kept,
  the states its REM scored, the full-length share of its trajectories, its model calls
  and cache hits (from the cell's ledger);
* ``decisions`` — each cell's CAI decision on each item: outcome, margin, winning source,
  and the details (each candidate's weighted score, per state);
* ``references`` — the main stage's length-free strategies (gpt4_rank, agent) as its
  summary table gives them, drawn as flat lines in the figure.

``grid_annotation_stats`` and its figure are pure functions of those records (no model
call), so ``medpref tables 04_annotation_grid_table`` rebuilds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from medpref.annotation.analysis import strategy_row
from medpref.annotation.pairs import Decision
from medpref.outputs import Figure, Records, StageOutputs, Table

Rows = Mapping[str, list[dict[str, Any]]]
TABLE_STEM = "grid_annotation_stats"
COLUMNS = ["weighting", "trajectory", "items", "full_length_share", "decisive", "ties",
           "unusable", "tie_ratio", "pairs", "sampled_wins", "generated_wins",
           "win_ratio_sampled_generated", "margin_mean", "margin_median", "states_scored",
           "model_calls", "cache_hits"]
#: the summary columns the figure's reference lines read
REFERENCE_COLUMNS = ["strategy", "decisive", "ties", "tie_ratio", "pairs", "sampled_wins",
                     "generated_wins", "margin_mean"]
CELL_FIELDS = ("weighting", "trajectory", "pairs", "states_scored", "full_length_share",
               "model_calls", "cache_hits")


def cell_of(row: Mapping[str, Any]) -> tuple[str, int]:
    return row["weighting"], row["trajectory"]


def decisions_by_cell(records: Rows) -> dict[tuple[str, int], list[Decision]]:
    out: dict[tuple[str, int], list[Decision]] = {}
    for row in records["decisions"]:
        out.setdefault(cell_of(row), []).append(Decision(
            row["item_id"], row["strategy"], row["outcome"], row["margin"],
            row["winner_source"], dict(row.get("detail") or {})))
    return out


def grid_table(records: Rows, params=None) -> pd.DataFrame:
    """One row per cell, in the cells' record order: its decisions counted
    (``analysis.strategy_row``) with the cell's own numbers."""
    decisions = decisions_by_cell(records)
    rows = []
    for cell in records["cells"]:
        w, n = cell_of(cell)
        if (w, n) not in decisions:
            raise ValueError(f"grid table records: cell {w}_{n} has no decision records")
        rows.append({**{k: cell[k] for k in CELL_FIELDS},
                     **strategy_row(f"cai_{w}", decisions[(w, n)], cell["pairs"])})
    return pd.DataFrame(rows, columns=COLUMNS)


def references_table(records: Rows) -> pd.DataFrame:
    return pd.DataFrame([{k: r.get(k) for k in REFERENCE_COLUMNS}
                         for r in records["references"]], columns=REFERENCE_COLUMNS)


def grid_figure(records: Rows, params=None):
    return plot_grid(grid_table(records), references_table(records))


def reference_rows(summary: pd.DataFrame, strategies=("gpt4_rank", "agent")) -> pd.DataFrame:
    """The main stage's length-free strategies, drawn as flat lines (as in Fig. 10)."""
    return summary[summary["strategy"].isin(strategies)].reset_index(drop=True)


def reference_records(summary: pd.DataFrame) -> list[dict[str, Any]]:
    """The summary's reference strategies as records (blank cells as None)."""
    rows = reference_rows(summary)[REFERENCE_COLUMNS].astype(object)
    return [{k: _count(v) if k in COUNT_COLUMNS else v for k, v in r.items()}
            for r in rows.where(rows.notna(), None).to_dict("records")]


COUNT_COLUMNS = ("decisive", "ties", "pairs", "sampled_wins", "generated_wins")


def _count(value: Any) -> Any:
    """A count read back from a CSV column with blanks (a float) as an int."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def plot_grid(table: pd.DataFrame, references: pd.DataFrame | None = None):
    """Pairs kept, tie ratio, mean margin and sampled-win share against trajectory length;
    ``references`` (gpt4_rank, agent: they use no trajectory) as dashed lines."""
    from medpref.reports import figure

    panels = [("pairs", "pairs kept"), ("tie_ratio", "tie ratio"),
              ("margin_mean", "mean |s(c1) − s(c2)|"),
              ("sampled_share", "sampled (real doctor) wins / decisive")]
    data = table.assign(sampled_share=table["sampled_wins"]
                        / table["decisive"].where(table["decisive"] > 0))
    fig, axes = figure(1, len(panels), figsize=(14, 3.2))
    for w, rows in data.groupby("weighting", sort=False):
        rows = rows.sort_values("trajectory")
        for ax, (col, _) in zip(axes, panels):
            ax.plot(rows["trajectory"], rows[col], marker="o", label=w)
    if references is not None:
        refs = references.assign(
            sampled_share=pd.to_numeric(references["sampled_wins"], errors="coerce")
            / pd.to_numeric(references["decisive"], errors="coerce").where(
                lambda d: d > 0))
        for _, ref in refs.iterrows():
            for ax, (col, _) in zip(axes, panels):
                value = pd.to_numeric(ref[col], errors="coerce")
                if col != "margin_mean" and pd.notna(value):
                    ax.axhline(value, linestyle="--", linewidth=1, color="grey" if
                               ref["strategy"] == "gpt4_rank" else "green",
                               label=ref["strategy"])
    for ax, (_col, title) in zip(axes, panels):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("trajectory length (states scored)")
        ax.set_xticks(sorted(table["trajectory"].unique()))
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    axes[1].set_ylim(0, 1.05)
    axes[3].set_ylim(0, 1.05)
    fig.suptitle("Annotation statistics per weighting × trajectory length (the axes of "
                 "PLPF Table 3 / follow-up Fig. 10; not its SP scores)", fontsize=10)
    fig.tight_layout()
    return fig


OUTPUTS = StageOutputs("04_annotation_grid_table", (
    Records("cells", "each weighting × length cell: pairs kept, states scored, model use",
            key=("weighting", "trajectory", "pairs", "states_scored", "model_calls")),
    Records("decisions", "each cell's CAI decision on each item, with the candidates' scores",
            key=("weighting", "trajectory", "item_id", "outcome", "margin", "detail")),
    Records("references", "the main stage's gpt4_rank and agent summary rows",
            key=("strategy",)),
    Table(TABLE_STEM, grid_table),
    Figure(f"{TABLE_STEM}_figure", grid_figure, file=TABLE_STEM),
), folder="04_annotation/grid_table")
