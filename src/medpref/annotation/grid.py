"""The weighting × trajectory-length ablation (PLPF Table 3, the follow-up's Fig. 10).

Each cell (``avg``/``dep`` × length 1/2/3) is its own DVC stage (a ``matrix:`` stage in
dvc.yaml) that writes its pairs and a summary; a last stage gathers the summaries into
one table and figure. Cells score their states through the same REM scorer and the
shared LLM cache folder, so a state scored by the main stage (or another cell) is a
cache hit — the cell's ledger shows it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from medpref.annotation.analysis import strategy_row
from medpref.annotation.config import AnnotationParams
from medpref.contracts import atomic_write_text
from medpref.params import repo_path

STAGE_PREFIX = "04_annotation_grid"


def cell_name(weighting: str, trajectory: int) -> str:
    return f"{weighting}_{trajectory}"


def cell_stage(weighting: str, trajectory: int) -> str:
    """The cell's stage name for the LLM session (its cache file and ledger)."""
    return f"{STAGE_PREFIX}_{cell_name(weighting, trajectory)}"


def check_cell(p: AnnotationParams, weighting: str, trajectory: int) -> None:
    """A cell must be one the grid in params lists (dvc.yaml's matrix reads the same)."""
    if weighting not in p.grid.weightings or trajectory not in p.grid.trajectories:
        raise ValueError(f"grid cell ({weighting!r}, {trajectory!r}) is not in "
                         f"annotation.grid: weightings {p.grid.weightings}, "
                         f"trajectories {p.grid.trajectories}")


def cell_paths(p: AnnotationParams, weighting: str, trajectory: int) -> dict[str, Path]:
    name = cell_name(weighting, trajectory)
    data, rep = repo_path(p.grid.output_dir) / name, repo_path(p.grid.reports) / name
    return {"pairs": data / "pairs.jsonl", "decisions": data / "decisions.jsonl",
            "summary": rep / "summary.json", "ledger": rep / "ledger.json",
            "provenance": rep / "provenance.json"}


def cell_summary(weighting: str, trajectory: int, result, ledger: dict,
                 states_scored: int) -> dict:
    """The cell's row of the grid table, with its model use."""
    row = strategy_row(result.name, result.decisions, len(result.pairs))
    rem = ledger.get("total", {})
    return {"weighting": weighting, "trajectory": trajectory, **row,
            "states_scored": states_scored, "model_calls": rem.get("calls", 0),
            "cache_hits": rem.get("cache_hits", 0)}


def write_cell_summary(path: Path, summary: dict) -> None:
    atomic_write_text(path, json.dumps(summary, indent=2, sort_keys=True) + "\n")


def grid_table(p: AnnotationParams) -> pd.DataFrame:
    """Every cell's summary, in grid order; a missing cell is an error naming its file."""
    rows = []
    for w in p.grid.weightings:
        for n in p.grid.trajectories:
            path = cell_paths(p, w, n)["summary"]
            if not path.exists():
                raise FileNotFoundError(f"{path}: grid cell {cell_name(w, n)} has not run "
                                        f"(stage annotation_grid@{w}-{n})")
            rows.append(json.loads(path.read_text(encoding="utf-8")))
    cols = ["weighting", "trajectory", "items", "decisive", "ties", "unusable", "tie_ratio",
            "pairs", "sampled_wins", "generated_wins", "win_ratio_sampled_generated",
            "margin_mean", "margin_median", "states_scored", "model_calls", "cache_hits"]
    return pd.DataFrame(rows)[cols]


def reference_rows(summary: pd.DataFrame, strategies=("gpt4_rank", "agent")) -> pd.DataFrame:
    """The main stage's length-free strategies, drawn as flat lines (as in Fig. 10)."""
    return summary[summary["strategy"].isin(strategies)].reset_index(drop=True)


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
        refs = references.assign(sampled_share=references["sampled_wins"]
                                 / references["decisive"].where(references["decisive"] > 0))
        for _, ref in refs.iterrows():
            for ax, (col, _) in zip(axes, panels):
                if col != "margin_mean" and pd.notna(ref[col]):
                    ax.axhline(ref[col], linestyle="--", linewidth=1, color="grey" if
                               ref["strategy"] == "gpt4_rank" else "green",
                               label=ref["strategy"])
    for ax, (col, title) in zip(axes, panels):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("trajectory length (states scored)")
        ax.set_xticks(sorted(table["trajectory"].unique()))
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    axes[1].set_ylim(0, 1.05)
    axes[3].set_ylim(0, 1.05)
    fig.suptitle("Weighting × trajectory length (cf. PLPF Table 3, follow-up Fig. 10)",
                 fontsize=11)
    fig.tight_layout()
    return fig
