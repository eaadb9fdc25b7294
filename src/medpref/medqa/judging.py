"""Pairwise battles of the configurations' answers, judged by the ``judge`` role.

Every unordered pair of configurations meets on every read item, in both orders: in
order ``ab`` the judge sees model_a's answer as "Answer 1", in ``ba`` model_b's (the shared
two-order judge, :mod:`medpref.llm.pairwise`, asks). Each verdict becomes a
:class:`~medpref.contracts.PairwiseJudgement` whose ``winner`` names the model (not the
position), so the two orders of a battle can be compared and averaged. The judge's raw
text is kept; :func:`parse_verdict` is pure and an unparsable verdict is recorded and
left out of the ratings (never guessed).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from medpref.contracts import MedicineQAItem, PairwiseJudgement
from medpref.llm import pairwise
from medpref.llm.client import LLMClient
from medpref.llm.pairwise import (
    ORDERS,
    Order,
    judge_pairs,
    position_shares,
    shown,
    to_candidate_frame,
)
from medpref.llm.types import CallSpec
from medpref.medqa.config import MedQAParams
from medpref.medqa.read import Answer
from medpref.prompts import PromptTemplate, format_dialogue, load_prompt

#: The judge's answer starts after this prefix (local models continue it).

Verdict = Literal["1", "2", "tie"]
_VERDICT = re.compile(r"^[\s\"'*(\[]*(?:answer\s*)?(?P<v>1|2|tie)(?![\w])", re.IGNORECASE)


class VerdictError(ValueError):
    """The judge's answer names neither answer nor a tie."""


def parse_verdict(text: str) -> Verdict:
    """``1``, ``2`` or ``tie`` from the judge's first word (``Answer 2.``, ``Tie`` too)."""
    match = _VERDICT.match(text or "")
    if not match:
        raise VerdictError(f"unparsable verdict {(text or '')[:60]!r}: expected 1, 2 or tie")
    return match.group("v").lower()  # type: ignore[return-value]


@dataclass(frozen=True)
class BattleSlot:
    """One judge call: an item, a canonical pair (model_a before model_b) and an order."""

    item_id: str
    model_a: str
    model_b: str
    order: Order

    @property
    def id(self) -> str:
        return f"b-{self.item_id}-{self.model_a}-{self.model_b}-{self.order}"

    @property
    def shown(self) -> tuple[str, str]:
        """(first shown, second shown) model names."""
        return shown(self.model_a, self.model_b, self.order)


def battle_plan(models: Sequence[str], item_ids: Sequence[str]) -> list[BattleSlot]:
    """Every pair of models (in params order) on every item, in both orders."""
    return [BattleSlot(item, a, b, order) for item in item_ids
            for a, b in itertools.combinations(models, 2) for order in ORDERS]


def winner_of(slot: BattleSlot, verdict: Verdict) -> Literal["model_a", "model_b", "tie"]:
    """Map a positional verdict back to the model that won."""
    return {"1": "model_a", "2": "model_b"}.get(to_candidate_frame(verdict, slot.order), "tie")


def judge_messages(template: PromptTemplate, item: MedicineQAItem, first: str, second: str,
                   max_turns: int) -> list[dict[str, str]]:
    values = {"history": format_dialogue(item.history[-max_turns:]), "question": item.question,
              "answer_1": first, "answer_2": second}
    if "reference" in template.variables:
        if not item.reference:
            raise ValueError(f"judge prompt '{template.name}' needs a reference answer; "
                             f"item {item.id} has none")
        values["reference"] = item.reference
    return template.render(**values)


@dataclass
class JudgedBattles:
    judgements: list[PairwiseJudgement]
    unparsable: list[dict]
    raw: list[dict]


def judge_battles(slots: Sequence[BattleSlot], items: Mapping[str, MedicineQAItem],
                  answers: Mapping[tuple[str, str], str], judge: LLMClient,
                  template: PromptTemplate, max_turns: int, call: CallSpec) -> JudgedBattles:
    """One batched judge call per slot; ``answers`` maps (config, item id) → text."""
    def messages(slot: BattleSlot, _order: Order) -> list[dict[str, str]]:
        first, second = slot.shown
        return judge_messages(template, items[slot.item_id], answers[(first, slot.item_id)],
                              answers[(second, slot.item_id)], max_turns)

    judged = judge_pairs(judge, [(s, s.order) for s in slots], messages, parse_verdict, call)
    out = JudgedBattles([], [], [])
    for a in judged:
        slot, comp = a.key, a.completion
        row = {"id": slot.id, "item": slot.item_id, "model_a": slot.model_a,
               "model_b": slot.model_b, "order": slot.order, "raw": comp.text,
               "error": comp.error}
        out.raw.append(row)
        if a.shown_verdict is None:
            out.unparsable.append({**row, "reason": a.reason})
            continue
        out.judgements.append(PairwiseJudgement(
            id=slot.id, item=slot.item_id, model_a=slot.model_a, model_b=slot.model_b,
            winner=winner_of(slot, a.shown_verdict), judge=judge.model_id, order=slot.order,
            verdict=a.shown_verdict, raw=comp.text))
    return out


def position_bias(raw_rows: Sequence[dict]) -> dict[str, float]:
    """Shares of verdicts "1", "2", "tie" and unparsable over all judge calls."""
    return position_shares([None if row.get("error") else _readable(row["raw"])
                            for row in raw_rows])


def _readable(text: str) -> Verdict | None:
    try:
        return parse_verdict(text)
    except VerdictError:
        return None


@dataclass
class BattleRun:
    slots: list[BattleSlot]
    judged: JudgedBattles
    skipped: list[dict] = field(default_factory=list)


def run_battles(p: MedQAParams, judge: LLMClient, subset: Sequence[MedicineQAItem],
                answers: Sequence[Answer]) -> BattleRun:
    """Judge every pair on every read item in both orders (failed answers skip the slot)."""
    texts = {(a.config, a.item_id): a.text for a in answers if a.error is None}
    slots = battle_plan([m.name for m in p.models], [it.id for it in subset])
    ready = [s for s in slots
             if (s.model_a, s.item_id) in texts and (s.model_b, s.item_id) in texts]
    skipped = [{"id": s.id, "reason": "an answer of this pair failed"} for s in slots
               if s not in ready]
    call = p.judge_call
    judged = judge_battles(ready, {it.id: it for it in subset}, texts, judge,
                           load_prompt(call.prompt), p.history_max_turns, call)
    return BattleRun(slots, judged, skipped)


def order_agreement(judgements: Sequence[PairwiseJudgement]) -> float:
    """Share of battles judged in both orders whose two verdicts name the same winner."""
    return pairwise.order_agreement(((j.item, j.model_a, j.model_b), j.order, j.winner)
                                    for j in judgements if j.order)
