"""The shared two-order judge (medpref.llm.pairwise) on a scripted backend."""

from __future__ import annotations

import math

from medpref.llm.client import LLMClient
from medpref.llm.pairwise import (
    ORDERS,
    combine_orders,
    judge_pairs,
    order_agreement,
    position_shares,
    shown,
)
from medpref.llm.scripted import ScriptedBackend
from medpref.llm.types import CallSpec, GenerationParams

PAIRS = {"k1": ("good answer", "poor answer"), "k2": ("poor reply", "good reply")}


def messages(key, order):
    first, second = shown(*PAIRS[key], order)
    return [{"role": "user", "content": f"Answer 1: {first}\nAnswer 2: {second}"}]


def first_shown(req) -> str:
    return req.messages[-1]["content"].split("Answer 1: ")[1].split("\n")[0]


def parse(text: str) -> str | None:
    return text if text in ("1", "2", "tie") else None


def judge(responder):
    backend = ScriptedBackend(responder)
    return backend, LLMClient("judge", backend, GenerationParams())


def run(responder):
    backend, client = judge(responder)
    jobs = [(k, o) for k in PAIRS for o in ORDERS]
    return backend, judge_pairs(client, jobs, messages, parse,
                                CallSpec("judge", "", 4, answer_prefix="Verdict:"))


def test_both_orders_are_asked_with_the_candidates_swapped():
    backend, answers = run(lambda r: "1")
    assert [(a.key, a.order) for a in answers] == [("k1", "ab"), ("k1", "ba"),
                                                    ("k2", "ab"), ("k2", "ba")]
    assert [first_shown(r) for r in backend.requests] == [
        "good answer", "poor answer", "poor reply", "good reply"]
    assert {r.prefix for r in backend.requests} == {"Verdict:"}
    assert {r.params.max_new_tokens for r in backend.requests} == {4}


def test_a_consistent_judge_names_the_same_candidate_in_both_orders():
    _, answers = run(lambda r: "1" if first_shown(r).startswith("good") else "2")
    verdicts = {(a.key, a.order): a.verdict for a in answers}
    assert [a.shown_verdict for a in answers] == ["1", "2", "2", "1"]
    assert combine_orders(verdicts["k1", "ab"], verdicts["k1", "ba"]) == "1"  # a = good
    assert combine_orders(verdicts["k2", "ab"], verdicts["k2", "ba"]) == "2"  # b = good
    assert order_agreement((a.key, a.order, a.verdict) for a in answers) == 1.0


def test_a_verdict_that_follows_the_position_is_a_tie():
    _, answers = run(lambda r: "1")  # always the first shown
    verdicts = {(a.key, a.order): a.verdict for a in answers}
    assert [verdicts[k, o] for k in PAIRS for o in ORDERS] == ["1", "2", "1", "2"]
    assert {combine_orders(verdicts[k, "ab"], verdicts[k, "ba"]) for k in PAIRS} == {"tie"}
    assert order_agreement((a.key, a.order, a.verdict) for a in answers) == 0.0
    assert position_shares([a.shown_verdict for a in answers]) == {
        "share_1": 1.0, "share_2": 0.0, "share_tie": 0.0, "share_unparsable": 0.0}


def test_an_unparsable_answer_is_counted_not_scored():
    texts = iter(["1", "I cannot tell.", "2", "1"])
    _, answers = run(lambda r: next(texts))
    bad = answers[1]
    assert bad.shown_verdict is None and bad.verdict is None
    assert bad.reason == "unparsable verdict" and bad.completion.text == "I cannot tell."
    assert combine_orders(answers[0].verdict, bad.verdict) == "unparsable"
    # k1 has one readable order only: agreement is over k2 (ab "2" = b, ba "1" = b)
    readable = [(a.key, a.order, a.verdict) for a in answers if a.verdict is not None]
    assert order_agreement(readable) == 1.0
    assert position_shares([a.shown_verdict for a in answers])["share_unparsable"] == 0.25


def test_a_parser_that_raises_gives_its_reason():
    def strict(text):
        raise ValueError(f"unparsable verdict {text!r}")
    _, client = judge(lambda r: "maybe")
    [answer] = judge_pairs(client, [("k1", "ab")], messages, strict,
                           CallSpec("judge", "", 256))
    assert answer.shown_verdict is None and answer.reason == "unparsable verdict 'maybe'"


def test_no_comparison_in_both_orders_has_no_agreement():
    assert math.isnan(order_agreement([("k1", "ab", "1")]))
