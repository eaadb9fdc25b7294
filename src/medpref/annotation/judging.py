"""GPT-4 ranking (the follow-up's baseline): a judge picks response 1, response 2 or equal.

Each item is judged twice, with the candidates in both orders. Both answers must name
the same candidate for a preference; any disagreement (position bias, one "equal") is a
tie, and ties are dropped. An answer the parser cannot read is recorded and the item is
skipped — never guessed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from medpref.annotation.pairs import Decision, decision_for, pair_from_winner
from medpref.contracts import PreferencePair, UnlabeledItem
from medpref.llm.client import LLMClient
from medpref.prompts import PromptTemplate, format_dialogue

Choice = Literal["1", "2", "equal"]
Order = Literal["ab", "ba"]
ORDERS: tuple[Order, Order] = ("ab", "ba")

# -- reading a judge's answer (pure) ---------------------------------------------------------
_NUMBERED = re.compile(r"\b(?:response|reply|candidate|option|answer)\s*#?\s*([12])\b")
_BARE_DIGIT = re.compile(r"^\W*([12])\W*$")  # the whole first line is "1", "(2)", "2." ...
_ORDINAL = re.compile(r"\b(first|second)\s+(?:response|reply|candidate|one|option)\b")
_EQUAL = re.compile(r"\b(equal(?:ly)?|equivalent|tie|the same|both|neither)\b")
_FIRST_SENTENCE = re.compile(r"(?<=[.!?])\s|\n")


def parse_choice(text: str) -> Choice | None:
    """Response "1", "2" or "equal" from a judge's raw answer; None when unreadable.

    Only the first sentence counts (small models go on to argue both ways). A word of
    equality there (equal, equivalent, tie, both, neither, the same) means "equal";
    otherwise the earliest mention of response 1/2 (or first/second response) decides.
    A bare 1 or 2 counts only when it is the whole first line: "1. I will ask..." is the
    start of a list, not a choice.
    """
    body = text.replace("*", "").replace("`", "").replace('"', "").strip().lower()
    if not body:
        return None
    bare = _BARE_DIGIT.match(body.splitlines()[0])
    if bare:
        return bare.group(1)  # type: ignore[return-value]
    sentence = _FIRST_SENTENCE.split(body, maxsplit=1)[0]
    if _EQUAL.search(sentence):
        return "equal"
    hits = [(m.start(), m.group(1)) for m in _NUMBERED.finditer(sentence)]
    hits += [(m.start(), "1" if m.group(1) == "first" else "2")
             for m in _ORDINAL.finditer(sentence)]
    if not hits:
        return None
    return min(hits)[1]  # type: ignore[return-value]


def to_item_frame(choice: Choice | None, order: Order) -> Choice | None:
    """A choice about the shown order, as a choice about the item's candidates."""
    if choice is None or choice == "equal" or order == "ab":
        return choice
    return "2" if choice == "1" else "1"


def combine_orders(ab: Choice | None, ba: Choice | None) -> str:
    """Both orders' choices (item frame) → "1" / "2" / "tie" / "unparsable"."""
    if ab is None or ba is None:
        return "unparsable"
    if ab == ba and ab != "equal":
        return ab
    return "tie"


# -- asking the judge ------------------------------------------------------------------------
def shown_pair(item: UnlabeledItem, order: Order) -> tuple[str, str]:
    a, b = item.candidates[0].response, item.candidates[1].response
    return (a, b) if order == "ab" else (b, a)


def judge_messages(template: PromptTemplate, item: UnlabeledItem, order: Order,
                   history_max_turns: int) -> list[dict[str, str]]:
    first, second = shown_pair(item, order)
    return template.render(history=format_dialogue(item.history[-history_max_turns:]),
                           response_1=first, response_2=second)


@dataclass
class JudgedItems:
    """Decisions plus every raw answer (kept so parsing can be redone for free)."""

    decisions: list[Decision]
    records: list[dict] = field(default_factory=list)


def judge_both_orders(items: Sequence[UnlabeledItem], client: LLMClient,
                      template: PromptTemplate, history_max_turns: int, strategy: str,
                      prefix: str = "", step: str = "judge") -> JudgedItems:
    """Judge every item in both orders (one batch) and combine the two answers."""
    jobs = [(item, order) for item in items for order in ORDERS]
    answers = client.chat_many([judge_messages(template, i, o, history_max_turns)
                                for i, o in jobs], prefix=prefix)
    records, frame = [], {}
    for (item, order), comp in zip(jobs, answers):
        shown = parse_choice(comp.text) if comp.ok else None
        frame[item.id, order] = to_item_frame(shown, order)
        records.append({"strategy": strategy, "step": step, "item_id": item.id,
                        "order": order, "raw": comp.text, "error": comp.error,
                        "parsed": shown, "model": client.model_id,
                        "prompt_sha": template.sha})
    decisions = [decision_for(item, strategy, combine_orders(frame[item.id, "ab"],
                                                              frame[item.id, "ba"]),
                              ab=frame[item.id, "ab"], ba=frame[item.id, "ba"])
                 for item in items]
    return JudgedItems(decisions, records)


def gpt4_rank_pairs(items: Sequence[UnlabeledItem],
                    decisions: Sequence[Decision]) -> list[PreferencePair]:
    """One pair per decisive item; ties and unparsable items give none."""
    by_id = {i.id: i for i in items}
    return [pair_from_winner(by_id[d.item_id], d, judge_orders="ab+ba")
            for d in decisions if d.outcome in ("1", "2")]
