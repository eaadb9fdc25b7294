"""Pairwise battles of the configurations' answers, judged by the ``judge`` role.

Every unordered pair of configurations meets on every read item, in both orders: in
order ``ab`` the judge sees model_a's answer as "Answer 1", in ``ba`` model_b's. Each
verdict becomes a :class:`~medpref.contracts.PairwiseJudgement` whose ``winner`` names
the model (not the position), so the two orders of a battle can be compared and
averaged. The judge's raw text is kept; :func:`parse_verdict` is pure and an
unparsable verdict is recorded and left out of the ratings (never guessed).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from medpref.contracts import MedicineQAItem, PairwiseJudgement
from medpref.llm.client import LLMClient
from medpref.medqa.config import MedQAParams
from medpref.medqa.read import Answer
from medpref.prompts import PromptTemplate, format_dialogue, load_prompt

#: The judge's answer starts after this prefix (local models continue it).
VERDICT_PREFIX = "Verdict:"

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
    order: Literal["ab", "ba"]

    @property
    def id(self) -> str:
        return f"b-{self.item_id}-{self.model_a}-{self.model_b}-{self.order}"

    @property
    def shown(self) -> tuple[str, str]:
        """(first shown, second shown) model names."""
        return (self.model_a, self.model_b) if self.order == "ab" else (self.model_b,
                                                                      self.model_a)


def battle_plan(models: Sequence[str], item_ids: Sequence[str]) -> list[BattleSlot]:
    """Every pair of models (in params order) on every item, in both orders."""
    return [BattleSlot(item, a, b, order) for item in item_ids
            for a, b in itertools.combinations(models, 2) for order in ("ab", "ba")]


def winner_of(slot: BattleSlot, verdict: Verdict) -> Literal["model_a", "model_b", "tie"]:
    """Map a positional verdict back to the model that won."""
    if verdict == "tie":
        return "tie"
    first_won = verdict == "1"
    a_first = slot.order == "ab"
    return "model_a" if first_won == a_first else "model_b"


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
                  template: PromptTemplate, max_turns: int, max_new_tokens: int
                  ) -> JudgedBattles:
    """One batched judge call per slot; ``answers`` maps (config, item id) → text."""
    messages = [judge_messages(template, items[s.item_id], answers[(s.shown[0], s.item_id)],
                               answers[(s.shown[1], s.item_id)], max_turns) for s in slots]
    completions = judge.chat_many(messages, prefix=VERDICT_PREFIX, max_new_tokens=max_new_tokens)
    out = JudgedBattles([], [], [])
    for slot, comp in zip(slots, completions):
        row = {"id": slot.id, "item": slot.item_id, "model_a": slot.model_a,
               "model_b": slot.model_b, "order": slot.order, "raw": comp.text,
               "error": comp.error}
        out.raw.append(row)
        try:
            if not comp.ok:
                raise VerdictError(f"judge call failed: {comp.error}")
            verdict = parse_verdict(comp.text)
        except VerdictError as exc:
            out.unparsable.append({**row, "reason": str(exc)})
            continue
        out.judgements.append(PairwiseJudgement(
            id=slot.id, item=slot.item_id, model_a=slot.model_a, model_b=slot.model_b,
            winner=winner_of(slot, verdict), judge=judge.model_id, order=slot.order,
            verdict=verdict, raw=comp.text))
    return out


def position_bias(raw_rows: Sequence[dict]) -> dict[str, float]:
    """Shares of verdicts "1", "2", "tie" and unparsable over all judge calls."""
    counts = {"1": 0, "2": 0, "tie": 0, "unparsable": 0}
    for row in raw_rows:
        try:
            counts[parse_verdict(row["raw"]) if not row.get("error") else "unparsable"] += 1
        except VerdictError:
            counts["unparsable"] += 1
    n = max(1, len(raw_rows))
    return {f"share_{k}": v / n for k, v in counts.items()}


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
    judged = judge_battles(ready, {it.id: it for it in subset}, texts, judge,
                           load_prompt(p.judge_prompt), p.history_max_turns,
                           p.judge_max_new_tokens)
    return BattleRun(slots, judged, skipped)


def order_agreement(judgements: Sequence[PairwiseJudgement]) -> float:
    """Share of battles judged in both orders whose two verdicts name the same winner."""
    pairs: dict[tuple, dict[str, str]] = {}
    for j in judgements:
        if j.order:
            pairs.setdefault((j.item, j.model_a, j.model_b), {})[j.order] = j.winner
    both = [v for v in pairs.values() if len(v) == 2]
    return sum(v["ab"] == v["ba"] for v in both) / len(both) if both else float("nan")
