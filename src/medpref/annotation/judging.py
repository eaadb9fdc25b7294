"""GPT-4 ranking (the follow-up's baseline): a judge picks response 1, response 2 or equal.

Two readings (``annotation.judge.orders``):

* ``one`` — the follow-up's: one single-choice question per item, "equal" answers dropped.
  The candidates are shown in a seeded order per item (:func:`shown_order`): the first
  candidate of every item is the sampled one, so a fixed order would turn the judge's
  position bias into a bias for one candidate source.
* ``both`` — this project's addition: the item is asked in both orders and only a choice
  that survives the swap counts; any disagreement (position bias, one "equal") is a tie
  (the two-order judge is shared: :mod:`medpref.llm.pairwise`).

Both readings are computed from the same answers (the seeded order's answer is one of
the two), so reporting both costs one extra call per item. An answer the parser cannot
read is recorded and the item is skipped — never guessed.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from medpref.annotation.pairs import Decision, decision_for, pair_from_winner
from medpref.contracts import PreferencePair, UnlabeledItem
from medpref.llm.client import LLMClient
from medpref.llm.pairwise import ORDERS, Order, combine_orders, judge_pairs, shown
from medpref.llm.types import CallSpec
from medpref.prompts import PromptTemplate, format_dialogue
from medpref.sentences import first_sentence

Choice = Literal["1", "2", "equal"]
Reading = Literal["one", "both"]
READINGS: tuple[Reading, Reading] = ("one", "both")


def shown_order(item_id: str, seed: int, tag: str = "judge") -> Order:
    """"ab" or "ba": the seeded order one question shows the candidates in."""
    return "ab" if random.Random(f"{seed}:{item_id}:{tag}").random() < 0.5 else "ba"

# -- reading a judge's answer (pure) ---------------------------------------------------------
_NUMBERED = re.compile(r"\b(?:response|reply|candidate|option|answer)\s*#?\s*([12])\b")
_BARE_DIGIT = re.compile(r"^\W*([12])\W*$")  # the whole first line is "1", "(2)", "2." ...
_ORDINAL = re.compile(r"\b(first|second)\s+(?:response|reply|candidate|one|option)\b")
_EQUAL = re.compile(r"\b(equal(?:ly)?|equivalent|tie|the same|both|neither)\b")


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
    sentence = first_sentence(body, lines=True)
    if _EQUAL.search(sentence):
        return "equal"
    hits = [(m.start(), m.group(1)) for m in _NUMBERED.finditer(sentence)]
    hits += [(m.start(), "1" if m.group(1) == "first" else "2")
             for m in _ORDINAL.finditer(sentence)]
    if not hits:
        return None
    return min(hits)[1]  # type: ignore[return-value]


def one_order(choice: Choice | None) -> str:
    """One question's choice (item frame) → "1" / "2" / "tie" ("equal", dropped) /
    "unparsable"."""
    if choice is None:
        return "unparsable"
    return "tie" if choice == "equal" else choice


# -- asking the judge ------------------------------------------------------------------------
def shown_pair(item: UnlabeledItem, order: Order) -> tuple[str, str]:
    return shown(item.candidates[0].response, item.candidates[1].response, order)


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


def ask_judge(items: Sequence[UnlabeledItem], client: LLMClient, template: PromptTemplate,
              history_max_turns: int, strategy: str, orders: dict[str, list[Order]],
              call: CallSpec, step: str = "judge"):
    """Ask the judge every (item, order) listed (one batch); → the choices in the item's
    frame by (item id, order), and one record per raw answer."""
    jobs = [(item, order) for item in items for order in orders[item.id]]
    answers = judge_pairs(client, jobs, lambda i, o: judge_messages(template, i, o,
                                                                    history_max_turns),
                          parse_choice, call)
    frame = {(a.key.id, a.order): a.verdict for a in answers}
    records = [{"strategy": strategy, "step": step, "item_id": a.key.id, "order": a.order,
                "raw": a.completion.text, "error": a.completion.error,
                "parsed": a.shown_verdict, "model": client.model_id,
                "prompt_sha": template.sha} for a in answers]
    return frame, records


def decide(items: Sequence[UnlabeledItem], frame: dict, reading: Reading, seed: int,
           strategy: str) -> list[Decision]:
    """Each item's decision under one reading, from the judge's answers in ``frame``."""
    out = []
    for item in items:
        if reading == "one":
            order = shown_order(item.id, seed)
            choice = frame[item.id, order]
            out.append(decision_for(item, strategy, one_order(choice), order=order,
                                    choice=choice, reading="one"))
        else:
            ab, ba = frame[item.id, "ab"], frame[item.id, "ba"]
            out.append(decision_for(item, strategy, combine_orders(ab, ba), ab=ab, ba=ba,
                                    reading="both"))
    return out


def judge_items(items: Sequence[UnlabeledItem], client: LLMClient, template: PromptTemplate,
                history_max_turns: int, strategy: str, *, reading: Reading, seed: int,
                call: CallSpec, also: Sequence[Reading] = (),
                step: str = "judge") -> dict[str, JudgedItems]:
    """Judge every item under ``reading`` (and the readings in ``also``) from one batch of
    answers: the orders any of them needs are asked once each."""
    readings = list(dict.fromkeys([reading, *also]))
    orders = {i.id: (list(ORDERS) if "both" in readings else [shown_order(i.id, seed)])
              for i in items}
    frame, records = ask_judge(items, client, template, history_max_turns, strategy,
                               orders, call, step)
    return {r: JudgedItems(decide(items, frame, r, seed, strategy),
                           records if r == reading else []) for r in readings}


def judge_both_orders(items: Sequence[UnlabeledItem], client: LLMClient,
                      template: PromptTemplate, history_max_turns: int, strategy: str,
                      call: CallSpec, step: str = "judge") -> JudgedItems:
    """Judge every item in both orders (one batch) and combine the two answers."""
    return judge_items(items, client, template, history_max_turns, strategy, reading="both",
                       seed=0, call=call, step=step)["both"]


def gpt4_rank_pairs(items: Sequence[UnlabeledItem],
                    decisions: Sequence[Decision]) -> list[PreferencePair]:
    """One pair per decisive item; ties ("equal") and unparsable items give none."""
    by_id = {i.id: i for i in items}
    return [pair_from_winner(by_id[d.item_id], d, judge_reading=d.detail.get("reading"))
            for d in decisions if d.outcome in ("1", "2")]
