"""Stage 02's outputs, declared once: its per-item records and the tables built from them.

Every score the stage's tables read is a record (``reports/02_notechat/records/``), one
row per item with its content ``key``:

* ``dialogues`` — each generated dialogue (NoteChat's and every baseline's, per note):
  its turns (the human reference dialogues are the stage's input and stay out);
* ``scores`` — each system's scores on each note (Table 2's statistics, Table 3's
  similarity, factuality and extractiveness), as the concept extractor gave them;
* ``diversity`` — each system's self-BLEU across its dialogues (Table 3's Diversity);
* ``turn_flags`` — each dialogue's turns flagged by each turn-quality check;
* ``coverage_curves`` — each NoteChat note's checklist size, SOAP parts and coverage by round;
* ``events`` — every repaired or dropped model answer and every polish decision;
* ``call_steps`` — model calls per method and step (batches, requests, cache hits, tokens,
  model and wall time), and ``method_times`` each method's wall time;
* ``table3_notes`` — what Table 3's rows are where they differ from the paper's (the
  models each baseline ran on), as the run wrote them.

The tables, the figure and ``malformed.jsonl`` are pure functions of those records and
the params (no model call, no concept extractor), so ``medpref tables 02_notechat``
rebuilds them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from medpref.notechat import evaluate, tables
from medpref.notechat.turn_quality_validation import validation_markdown, validation_report
from medpref.outputs import Data, Figure, Page, Records, StageOutputs, Table
from medpref.params import repo_path
from medpref.reports import no_negative_zero
from medpref.turns.turn_quality import CHECKS, TABLE3_NOTE, quality_per_system, table3_block

Rows = Mapping[str, list[dict[str, Any]]]
QUALITY_COLUMNS = ["system", "note_id", "turns", *CHECKS, "passing"]


def _plain(rows) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "key"} for r in rows]


def _nan(value: Any) -> Any:
    """NaN as None in a record (JSON has no NaN), and back."""
    return None if isinstance(value, float) and math.isnan(value) else value


# -- the stage's objects → records ---------------------------------------------------------

def records_of(run, ev: evaluate.Evaluation, quality: pd.DataFrame,
               events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The stage's records from its run (``StageRun``), its evaluation, the turn-quality
    flags per dialogue and the parser events."""
    dialogues = [{"system": system, "note_id": note_id,
                  "turns": [t.model_dump(mode="json") for t in turns]}
                 for system, by_note in evaluate.systems(run).items()
                 if system != evaluate.HUMAN for note_id, turns in by_note.items()]
    coverage = [{"note_id": r.note.id, "checklist_size": r.checklist_size,
                 "segments": len(r.plays), "curve": list(r.coverage_curve())}
                for r in run.notechat]
    return {"dialogues": dialogues,
            "scores": [{k: _nan(v) for k, v in row.items()}
                       for row in ev.per_dialogue.to_dict("records")],
            "diversity": [{"system": s, **{k: _nan(v) for k, v in d.items()}}
                          for s, d in ev.diversity.items()],
            "turn_flags": quality.to_dict("records"),
            "coverage_curves": coverage,
            "events": [dict(e) for e in events],
            "call_steps": run.log.rows(),
            "method_times": [{"method": m, "wall_s": _nan(w)}
                             for m, w in tables.method_wall_s(run).items()],
            "table3_notes": [{"note": n} for n in ev.notes]}


# -- records → the stage's objects ---------------------------------------------------------

def per_dialogue(records: Rows) -> pd.DataFrame:
    return pd.DataFrame(_plain(records["scores"]))


def system_order(records: Rows) -> list[str]:
    """Table 3's row order: the systems as the scores list them (baselines, NoteChat,
    Human)."""
    return list(dict.fromkeys(r["system"] for r in records["scores"]))


def quality_frame(records: Rows) -> pd.DataFrame:
    return pd.DataFrame(_plain(records["turn_flags"]), columns=QUALITY_COLUMNS)


def blocks_of(records: Rows) -> dict[str, pd.DataFrame]:
    """Table 3's blocks and the turn-quality block beside them."""
    diversity = {r["system"]: {k: v for k, v in r.items() if k not in ("key", "system")}
                 for r in records["diversity"]}
    blocks = evaluate.table3_blocks(per_dialogue(records), system_order(records), diversity)
    blocks["Turn quality"] = table3_block(quality_per_system(quality_frame(records)))
    return blocks


def coverage_table(records: Rows, params=None) -> pd.DataFrame:
    return evaluate.coverage_frame({r["note_id"]: r["curve"] for r in records["coverage_curves"]
                                    if r["checklist_size"]})


# -- builders -------------------------------------------------------------------------------

def table3_csv(records: Rows, params) -> str:
    """``table3.csv``: the blocks side by side, as ``reports.write_table`` writes a CSV."""
    return no_negative_zero(tables.table3_wide(blocks_of(records))).to_csv(index=False)


def table3_md(records: Rows, params) -> str:
    """``table3.md``: the paper's layout, blocks one under the other, then the notes."""
    notes = [r["note"] for r in records["table3_notes"]]
    return tables.table3_markdown(blocks_of(records), [*notes, TABLE3_NOTE])


def table2(records: Rows, params) -> pd.DataFrame:
    return evaluate.table2(per_dialogue(records), system_order(records))


def per_dialogue_table(records: Rows, params) -> pd.DataFrame:
    return per_dialogue(records)


def turn_quality_table(records: Rows, params) -> pd.DataFrame:
    return quality_per_system(quality_frame(records))


def turn_quality_per_dialogue(records: Rows, params) -> pd.DataFrame:
    return quality_frame(records)


def calls(records: Rows, params) -> pd.DataFrame:
    wall = {r["method"]: float("nan") if r["wall_s"] is None else r["wall_s"]
            for r in records["method_times"]}
    return tables.calls_table_of(_plain(records["call_steps"]), wall)


def malformed_summary(records: Rows, params) -> pd.DataFrame:
    return tables.events_summary(_plain(records["events"]))


def malformed_page(records: Rows, params) -> str:
    """``malformed.jsonl``: one event a line, as ``contracts.write_jsonl`` writes it."""
    return "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in _plain(records["events"]))


def coverage_figure(records: Rows, params):
    return evaluate.coverage_figure(coverage_table(records), params.notechat.max_rounds)


def _validation(params):
    """``(scores, label counts, file name)`` of the checks on the hand-labelled turns that
    ``notechat.turn_quality_labels`` names (a committed data file: these pages' records),
    or None when it is null."""
    labels = getattr(params.notechat, "turn_quality_labels", None)
    if not labels:
        return None
    path = repo_path(labels)
    scores, counts = validation_report(path)
    return scores, counts, path.name


def validation_csv(records: Rows, params) -> str:
    """``turn_quality_validation.csv``: each check's recall and precision per half."""
    v = _validation(params)
    return "" if v is None else no_negative_zero(v[0]).to_csv(index=False)


def validation_md(records: Rows, params) -> str:
    """``turn_quality_validation.md``: the label counts, the checks' scores, the note."""
    v = _validation(params)
    if v is None:
        return "No `notechat.turn_quality_labels`: the checks were not measured.\n"
    return validation_markdown(*v)


OUTPUTS = StageOutputs("02_notechat", (
    Records("dialogues", "each generated dialogue (NoteChat's, each baseline's) per note",
            key=("system", "note_id", "turns")),
    Records("scores", "each system's per-dialogue scores (Tables 2 and 3)",
            key=("system", "note_id")),
    Records("diversity", "each system's self-BLEU across its dialogues", key=("system",)),
    Records("turn_flags", "each dialogue's turns flagged by each turn-quality check",
            key=("system", "note_id")),
    Records("coverage_curves", "each NoteChat note's checklist coverage by round",
            key=("note_id", "checklist_size", "curve")),
    Records("events", "every repaired or dropped answer and every polish decision"),
    Records("call_steps", "model calls per method and step", key=("method", "step")),
    Records("method_times", "each method's wall time of generation", key=("method",)),
    Records("table3_notes", "Table 3's notes on its rows, as the run wrote them"),
    Page("table3_csv", table3_csv, suffix=".csv", file="table3"),
    Page("table3", table3_md, suffix=".md"),
    Table("table2", table2, floatfmt=".2f"),
    Table("per_dialogue", per_dialogue_table),
    Table("turn_quality", turn_quality_table, floatfmt=".1f"),
    Table("turn_quality_per_dialogue", turn_quality_per_dialogue),
    Table("calls", calls, floatfmt=".2f"),
    Table("malformed_summary", malformed_summary),
    Page("malformed", malformed_page, suffix=".jsonl"),
    Table("coverage", coverage_table),
    Figure("coverage_by_round", coverage_figure),
    Page("turn_quality_validation_csv", validation_csv, suffix=".csv",
         file="turn_quality_validation"),
    Page("turn_quality_validation", validation_md, suffix=".md"),
    Data("data/02_notechat/dialogues.jsonl", doc="NoteChat's dialogues (stage 05's SFT "
         "reads them)"),
    Data("data/02_notechat/baseline_dialogues.jsonl", doc="the baselines' dialogues"),
    Data("data/02_notechat/trace.jsonl", doc="the run's generation trace"),
))
