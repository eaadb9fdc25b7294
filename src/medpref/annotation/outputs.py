"""Stage 04's outputs, declared once: its per-item records and the tables built from them.

Every verdict and score the stage's tables read is a record
(``reports/04_annotation/records/``), one row per item with its content ``key``:

* ``strategies`` — each strategy shown, in run order: written (its pairs are stage 05's
  input) or only shown (gpt4_rank's other reading), and how many pairs it gave;
* ``decisions`` — each strategy's decision on each item: the outcome (``1``, ``2``,
  ``tie``, or why none), the CAI margin, the winning candidate's source, the details (the
  judge's order and choice, the agent's step);
* ``pairs`` — each written pair: the patient's last turn, the chosen and rejected turns,
  their sources and the margin (the history is left out: it is stage 01's item);
* ``state_scores`` — the REM's score of every state of every candidate's trajectory, per
  rule, with the avg and dep weightings (the scores the CAI margins are made of);
* ``answers`` — every raw model answer of the written strategies (the judge's verdicts,
  the agent's plans and ranks) with what was parsed from it.

The tables, the figures and ``unparsable.jsonl`` are pure functions of those records and
the params (no model call), so ``medpref tables 04_annotation`` rebuilds them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from medpref.annotation import analysis
from medpref.annotation.pairs import Decision
from medpref.outputs import Data, Figure, Page, Records, StageOutputs, Table

Rows = Mapping[str, list[dict[str, Any]]]
DECISION_FIELDS = ("item_id", "outcome", "margin", "winner_source", "detail")


# -- the stage's objects → records ---------------------------------------------------------

def strategy_rows(shown, written: Sequence[str]) -> list[dict[str, Any]]:
    """One row per strategy shown (``StrategyResult``), in run order."""
    return [{"strategy": r.name, "written": r.name in written, "pairs": len(r.pairs)}
            for r in shown]


def decision_rows(shown) -> list[dict[str, Any]]:
    """Each shown strategy's decisions, named by the strategy as shown (gpt4_rank's other
    reading under its own name)."""
    rows = []
    for r in shown:
        for d in r.decisions:
            rec = d.to_record()
            rows.append({"strategy": r.name, **{k: rec[k] for k in DECISION_FIELDS}})
    return rows


def pair_rows(results) -> list[dict[str, Any]]:
    """Each written pair without its history: the patient's last turn stands for it."""
    rows = []
    for r in results:
        for p in r.pairs:
            meta = dict(p.meta or {})
            rows.append({"id": p.id, "strategy": r.name, "item_id": meta.pop("item_id", None),
                         "prompt_turns": len(p.prompt), "patient": p.prompt[-1].text,
                         "chosen": p.chosen, "rejected": p.rejected,
                         "chosen_source": p.chosen_source,
                         "rejected_source": p.rejected_source, "margin": p.margin,
                         "meta": meta})
    return rows


def answer_rows(results) -> list[dict[str, Any]]:
    """Every raw model answer of the written strategies, as the strategies kept it."""
    return [dict(rec) for r in results for rec in r.records]


def records_of(shown, results: Mapping[str, Any], state_rows: list[dict]
               ) -> dict[str, list[dict[str, Any]]]:
    """The stage's records from its run: ``shown`` every strategy result shown,
    ``results`` the written ones by name, ``state_rows`` ``cai.state_score_rows``."""
    return {"strategies": strategy_rows(shown, list(results)),
            "decisions": decision_rows(shown),
            "pairs": pair_rows(results.values()),
            "state_scores": [dict(r) for r in state_rows],
            "answers": answer_rows(results.values())}


# -- records → the stage's objects ---------------------------------------------------------

@dataclass
class ShownStrategy:
    """What the analysis reads of one strategy: its name, its decisions, its pairs (the
    pair records of a written strategy; of a shown-only one, as many placeholders as it
    gave)."""

    name: str
    decisions: list[Decision]
    pairs: Sequence[Any]


def shown_of(records: Rows) -> list[ShownStrategy]:
    """The strategies as shown, in run order; a written strategy whose pair records do not
    number what its row says is an error."""
    decisions: dict[str, list[Decision]] = {}
    for row in records["decisions"]:
        decisions.setdefault(row["strategy"], []).append(Decision(
            row["item_id"], row["strategy"], row["outcome"], row["margin"],
            row["winner_source"], dict(row.get("detail") or {})))
    pairs: dict[str, list[dict]] = {}
    for row in records["pairs"]:
        pairs.setdefault(row["strategy"], []).append(row)
    out = []
    for row in records["strategies"]:
        name = row["strategy"]
        kept: Sequence[Any] = pairs.get(name, []) if row["written"] else range(row["pairs"])
        if len(kept) != row["pairs"]:
            raise ValueError(f"04_annotation records: strategy '{name}' gave {row['pairs']} "
                             f"pairs but {len(kept)} pair records name it")
        out.append(ShownStrategy(name, decisions.get(name, []), kept))
    return out


def unparsable_rows(records: Rows) -> list[dict[str, Any]]:
    """The model answers that could not be read (the item was skipped at that step)."""
    return [{k: v for k, v in r.items() if k != "key"} for r in records["answers"]
            if r.get("parsed") is None]


# -- builders -------------------------------------------------------------------------------

def summary_table(records: Rows, params) -> pd.DataFrame:
    return analysis.summary_table(shown_of(records))


def preferences_table(records: Rows, params) -> pd.DataFrame:
    return analysis.source_preferences(shown_of(records))


def preferences_figure(records: Rows, params):
    return analysis.plot_source_preferences(preferences_table(records, params))


def margins_table(records: Rows, params) -> pd.DataFrame:
    return analysis.margin_table(shown_of(records), params.annotation.scoring.tie_threshold)


def margins_figure(records: Rows, params):
    return analysis.plot_margins(shown_of(records), params.annotation.scoring.tie_threshold)


def sweep_table(records: Rows, params) -> pd.DataFrame:
    return analysis.threshold_sweep(shown_of(records))


def unparsable_page(records: Rows, params) -> str:
    """``unparsable.jsonl``: one answer a line, as ``contracts.write_jsonl`` writes it."""
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in unparsable_rows(records))


OUTPUTS = StageOutputs("04_annotation", (
    Records("strategies", "each strategy shown: written or only shown, pairs given",
            key=("strategy",)),
    Records("decisions", "each strategy's decision on each item (outcome, margin, winner)",
            key=("strategy", "item_id", "outcome", "margin", "detail")),
    Records("pairs", "each written pair: the patient's last turn, chosen, rejected, sources",
            key=("id", "patient", "chosen", "rejected", "margin")),
    Records("state_scores", "the REM's per-rule score of every state of every candidate",
            key=("item_id", "candidate", "state", "state_key", "rule_scores")),
    Records("answers", "every raw model answer of the written strategies, parsed or not"),
    Page("unparsable", unparsable_page, suffix=".jsonl"),
    Table("summary", summary_table),
    Table("source_preferences", preferences_table),
    Figure("source_preferences_figure", preferences_figure, file="source_preferences"),
    Table("margins", margins_table),
    Figure("margins_figure", margins_figure, file="margins"),
    Table("threshold_sweep", sweep_table),
    Data("data/04_annotation/pairs", doc="pairs/<name>.jsonl per annotation.strategies entry "
         "(templating cannot splice a list into outs; tests/test_annotation_strategies.py "
         "checks dvc expands the folder to exactly those)"),
    Data("data/04_annotation/decisions.jsonl"),
    Data("data/04_annotation/raw_answers.jsonl"),
    Data("data/04_annotation/state_scores.jsonl"),
))
