"""The weighting × trajectory-length ablation grid (the axes of PLPF Table 3 and the
follow-up's Fig. 10).

Each cell (``avg``/``dep`` × length 1/2/3) is its own DVC stage (a ``matrix:`` stage in
dvc.yaml) that writes its pairs and decisions; a last stage gathers the cells into one
table and figure. These are **annotation statistics** per cell (pairs, ties, margins,
which source wins) — the papers' Table 3 / Fig. 10 report the SP-test scores of a policy
trained on each cell's pairs, which a later stage produces; hence the report names
``grid_annotation_stats``. Cells score their states through stage 04's REM scorer and the
shared LLM cache folder, so a state scored by the main stage (or another cell) is a cache
hit — the cell's ledger shows it.

A cell is a :class:`medpref.stagekit.Stage` whose params section is ``annotation`` and whose
folders are the cell's own (``annotation.grid.output_dir``/``reports`` + ``<w>_<n>``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from medpref.annotation import cai, grid_outputs
from medpref.annotation.analysis import strategy_row
from medpref.annotation.config import AnnotationParams
from medpref.annotation.grid_outputs import OUTPUTS, TABLE_STEM
from medpref.contracts import atomic_write_text, write_jsonl
from medpref.handoffs import GRID_CELL
from medpref.outputs import read_rows
from medpref.params import repo_path
from medpref.registry import register_piece
from medpref.rules import load_rules
from medpref.stagekit import Stage

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


@dataclass
class GridStage(Stage):
    """A grid stage (a cell, or the table): params section ``annotation``, own folders."""

    folder: str = ""          # a cell: <w>_<n> under the grid's folders
    table: bool = False       # the table: reports/04_annotation/grid_table

    @property
    def key(self) -> str:
        return "annotation"

    @property
    def data_dir(self) -> Path:
        return repo_path(self.p.grid.output_dir) / self.folder

    @property
    def reports_dir(self) -> Path:
        if self.table:
            return repo_path(self.p.reports) / "grid_table"
        return repo_path(self.p.grid.reports) / self.folder


@register_piece("04_annotation_grid")
def open_cell(stage: Stage, weighting: str, trajectory: int) -> GridStage:
    """One grid cell (``open_stage("04_annotation_grid", ..., weighting=, trajectory=)``):
    its LLM cache file is ``04_annotation_grid_<w>_<n>``, its folders ``<w>_<n>``."""
    cell = GridStage(name=cell_stage(weighting, trajectory), params=stage.params,
                     started=stage.started, folder=cell_name(weighting, trajectory))
    check_cell(cell.p, weighting, trajectory)
    return cell


@register_piece("04_annotation_grid_table")
def open_table(stage: Stage) -> GridStage:
    """The stage that gathers the cells (``open_stage("04_annotation_grid_table", ...)``;
    it writes to ``reports/04_annotation/grid_table``)."""
    return GridStage(name=f"{STAGE_PREFIX}_table", params=stage.params, started=stage.started,
                     table=True)


@dataclass
class CellOutputs:
    weighting: str
    trajectory: int
    row: dict[str, Any]
    coverage: dict[str, Any]
    metrics: dict[str, Any] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)
    prompts: dict[str, str] = field(default_factory=dict)


def run_cell(stage: GridStage, weighting: str, trajectory: int) -> CellOutputs:
    """CAI ranking of every item with one weighting over one trajectory length."""
    from medpref.annotation import stage as s04

    p: AnnotationParams = stage.p
    s04.resolve_scoring(stage)
    items = s04.load_stage_items(stage)
    flowchart = load_rules(repo_path(p.rules))
    with stage.step("cai_states"):
        scorer = s04.rem_scorer(stage, flowchart)
        scored = s04.score_states(items, scorer, flowchart, trajectory)
    result = s04.run_cai(items, scored, flowchart, p, weighting)
    stage.check_yield(sum(d.outcome in ("1", "2", "tie") for d in result.decisions),
                      len(items), what="items scored")
    coverage = cai.length_coverage(scored.item_states)
    row = {"weighting": weighting, "trajectory": trajectory,
           **strategy_row(result.name, result.decisions, len(result.pairs)),
           "states_scored": len(scored.judgements),
           "full_length_share": coverage["full_length_share"]}
    write_jsonl(stage.data("pairs.jsonl"), result.pairs)
    write_jsonl(stage.data("decisions.jsonl"), [d.to_record() for d in result.decisions])
    # the cell says which it is beside its pairs: a run trained on them is this cell's
    atomic_write_text(stage.data(GRID_CELL), json.dumps(
        {"weighting": weighting, "trajectory": trajectory}, sort_keys=True) + "\n")
    out = CellOutputs(weighting, trajectory, row, coverage, metrics=dict(row),
                      models={"rem": scorer.model_id},
                      prompts={scorer.prompt.name: scorer.prompt.sha} if scorer.prompt else {})
    stage.note_provenance(models=out.models, prompts=out.prompts)
    return out


def cell_reports(p: AnnotationParams, weighting: str, trajectory: int) -> Path:
    return repo_path(p.grid.reports) / cell_name(weighting, trajectory)


def cell_records(p: AnnotationParams) -> dict[str, list[dict[str, Any]]]:
    """The grid table's records from every cell's outputs, in grid order: its metrics and
    ledger (reports) and its decisions (``annotation.grid.output_dir``), and the main
    stage's reference rows (its summary); a missing cell is an error naming its file."""
    cells, decisions = [], []
    for w in p.grid.weightings:
        for n in p.grid.trajectories:
            folder = cell_reports(p, w, n)
            path = folder / "metrics.json"
            if not path.exists():
                raise FileNotFoundError(f"{path}: grid cell {cell_name(w, n)} has not run "
                                        f"(stage annotation_grid@{w}-{n})")
            row = json.loads(path.read_text(encoding="utf-8"))
            ledger = folder / "ledger.json"
            total = (json.loads(ledger.read_text(encoding="utf-8")).get("total", {})
                     if ledger.exists() else {})
            cells.append({**{k: row[k] for k in ("weighting", "trajectory", "pairs",
                                                 "states_scored", "full_length_share")},
                          "model_calls": total.get("calls"),
                          "cache_hits": total.get("cache_hits")})
            data = repo_path(p.grid.output_dir) / cell_name(w, n) / "decisions.jsonl"
            decisions += [{"weighting": w, "trajectory": n, **d} for d in read_rows(data)]
    summary = pd.read_csv(repo_path(p.reports) / "summary.csv")
    return {"cells": cells, "decisions": decisions,
            "references": grid_outputs.reference_records(summary)}


@dataclass
class TableOutputs:
    table: pd.DataFrame
    figure: Path
    metrics: dict[str, Any] = field(default_factory=dict)


def run_table(stage: GridStage) -> TableOutputs:
    """Gather the cells into records, then the table and figure built from the records
    as written (the path ``medpref tables`` takes; no model call)."""
    OUTPUTS.write_records(stage.reports_dir, cell_records(stage.p))
    built = OUTPUTS.build(OUTPUTS.load_records(stage.reports_dir), stage.params)
    OUTPUTS.write_built(stage.reports_dir, built)
    table = built[TABLE_STEM]
    metrics = {f"{r['weighting']}_{r['trajectory']}": {"pairs": int(r["pairs"]),
                                                       "ties": int(r["ties"])}
               for r in table.to_dict("records")}
    return TableOutputs(table, stage.report(f"{TABLE_STEM}.png"), metrics)
