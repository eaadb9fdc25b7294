"""Stage 01's outputs, declared once: its per-candidate records and the tables built from
them.

The unlabeled items themselves are the stage's data product
(``data/01_sampling/unlabeled.jsonl``, DVC's cache), which stage 04 reads; the records
(``reports/01_sampling/records/``) are what the reports' tables need, without the text:

* ``candidates`` — one row per item × candidate: the item, its source dialogue and split
  turn, the candidate's source, the history's turns, the response's words, the future's
  turns and complete rounds, and for a generated candidate the rounds its one-shot
  continuation gave and why round-by-round completion stopped short (keyed by a hash of
  the item's history and the candidate);
* ``rejected`` — every malformed continuation: the split, its dialogue and turn, the
  attempt, the style exemplar, the generator and prompt, the reason and the raw answer
  (a model's raw answer may echo the history it continued: records of a run on a licensed
  set, ``sampling.source`` ``mts_dialog`` or ``aci_bench``, carry such fragments).

``summary``, ``future_rounds`` and ``short_futures`` are pure functions of the candidate
records and ``sampling.future_rounds``, so ``medpref tables`` rebuilds them with no model
call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from medpref.outputs import Data, Records, StageOutputs, Table
from medpref.sampling.tables import future_rounds_table, short_table, summary_table

Rows = Mapping[str, list[dict[str, Any]]]


def summary(records: Rows, params) -> pd.DataFrame:
    return summary_table(records["candidates"])


def future_rounds(records: Rows, params) -> pd.DataFrame:
    return future_rounds_table(records["candidates"], params.sampling.future_rounds)


def short_futures(records: Rows, params) -> pd.DataFrame:
    return short_table(records["candidates"], params.sampling.future_rounds)


OUTPUTS = StageOutputs("01_sampling", (
    Records("candidates", "every item's candidates: source, lengths, complete future "
            "rounds, one-shot rounds and round-by-round failure (no text)"),
    Records("rejected", "every malformed continuation: split, attempt, exemplar, "
            "generator, prompt, reason and raw answer",
            key=("dialogue_id", "turn_index", "attempt", "exemplar_id", "generator",
                 "prompt_sha", "reason", "raw")),
    Table("summary", summary, floatfmt=".3f"),
    Table("future_rounds", future_rounds),
    Table("short_futures", short_futures),
    Data("data/01_sampling/unlabeled.jsonl", doc="the unlabeled preference items "
         "(stage 04 reads them)"),
    Data("data/01_sampling/round_answers.jsonl", doc="every round-by-round answer, raw and "
         "parsed"),
))
