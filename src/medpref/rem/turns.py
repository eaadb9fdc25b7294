"""Labelled doctor turns as REM rows (``rem.turns``; issue 40, docs/rem.md "Labelled turns").

The constructed rows teach the REM the rubric's shapes, but on the turns the trained
policies write (fluent questions that ignore what the patient said, word salad) a REM
trained on them alone reads any question as information gathering. These rows are turns
no construction made, labelled per rule by people working from the rubric (labeller
``l1``'s score is the row's):

* the files of ``rem.turns.files``, turns on states of the split's training dialogues
  (``real_turns.jsonl``: human turns and stage 01's generated ones; ``train_turns.jsonl``:
  the policies' next turns, ``scripts/rem_train_turns.py``), each row's ``part`` (train or
  dev) set by dialogue;
* the independent test's SP turns (model doctors in the SP consultations) of the cases
  outside ``rem.turns.sp_test_cases``: the cases of ``sp_dev_cases`` as development rows,
  the others as training rows. They leave the independent test; the held-out turns (their
  states are eval-split dialogues), the human eval turns and the test cases' SP turns stay.

Each turn gives one :class:`~medpref.contracts.RemAnnotation` per rule, split ``train``
or :data:`~medpref.rem.config.TURNS_DEV`, id ``<turn id>:<rule>``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from medpref.contracts import RemAnnotation, Turn
from medpref.rem.config import TURNS_DEV, RemTurnsParams
from medpref.rem.independent import GOLD, IndependentRow, LabelledTurn, load_labelled

#: the row's part → the annotations' split
SPLIT_OF = {"train": "train", "dev": TURNS_DEV}


class TurnRow(LabelledTurn):
    part: Literal["train", "dev"]
    source: dict[str, Any]
    notes: dict[str, str] = {}


def load_turn_rows(path: str | Path, rule_ids: Sequence[str]) -> list[TurnRow]:
    """The rows of one labelled-turn file, validated
    (:func:`~medpref.rem.independent.load_labelled`)."""
    return load_labelled(path, TurnRow, rule_ids)


def _rows(turn_id: str, history: Sequence[Turn], turn: str, labels: dict[str, int],
          split: str, rule_ids: Sequence[str]) -> list[RemAnnotation]:
    state = [*history, Turn(role="doctor", text=turn)]
    return [RemAnnotation(id=f"{turn_id}:{rule}", rule=rule, history=state,
                          score=int(labels[rule]), comment="", split=split)
            for rule in rule_ids]


def sp_part(row: IndependentRow, p: RemTurnsParams) -> str | None:
    """``train`` or ``dev`` for an independent SP turn the REM learns from; None for a
    row that stays a test item. An SP case in neither list is an error."""
    if row.source.kind != "model_sp":
        return None
    case = (row.source.model_extra or {}).get("case")
    if case in p.sp_test_cases:
        return None
    if case is None or not (p.sp_test_cases or p.sp_dev_cases):
        raise ValueError(f"independent row {row.id}: SP case {case!r} is in neither "
                         "rem.turns.sp_test_cases nor rem.turns.sp_dev_cases")
    return "dev" if case in p.sp_dev_cases else "train"


def turn_annotations(p: RemTurnsParams, independent: Sequence[IndependentRow],
                     rule_ids: Sequence[str], root: Path | None = None
                     ) -> tuple[list[RemAnnotation], frozenset[str]]:
    """The REM rows of every labelled turn, and the ids of the independent rows that
    became rows (they leave the independent test)."""
    out: list[RemAnnotation] = []
    for f in p.files:
        path = root / f if root is not None else Path(f)
        for row in load_turn_rows(path, rule_ids):
            out += _rows(row.id, row.history, row.turn, row.labels[GOLD], SPLIT_OF[row.part],
                         rule_ids)
    used = []
    for row in independent:
        part = sp_part(row, p)
        if part is not None:
            used.append(row.id)
            out += _rows(row.id, row.history, row.turn, row.labels[GOLD], SPLIT_OF[part],
                         rule_ids)
    ids = [a.id for a in out]
    if len(set(ids)) != len(ids):
        twice = sorted({i for i in ids if ids.count(i) > 1})[:3]
        raise ValueError(f"rem.turns: a turn id appears in two sources: {twice}")
    return out, frozenset(used)
