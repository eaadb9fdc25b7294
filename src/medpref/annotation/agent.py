"""Multiple Agent Ranking (the follow-up paper): Planner, Ranker, Rethinker.

1. **Planner** — a long-term plan from the patient's self-report (their first message),
   then short-term objectives from that plan and the history so far.
2. **Ranker** — which candidate carries out the objectives: 1, 2 or equal. Candidates are
   shown in a seeded order per item, so a judge's position bias does not turn into a
   bias for one candidate source.
3. **Rethinker** — for "equal": first the follow-up's Yes/No, asked here as "is a better
   reply needed?"; "Yes" → a better reply c3, giving c3 ≻ c1 and c3 ≻ c2; "No" (one of the
   drafts already does it) → no c3. Then (the ``rerank`` switch) GPT-4 Ranking of c1 vs c2,
   in the reading ``annotation.judge.orders`` names, as a further pair. With ``rerank``
   off only the c3 pairs are made (the follow-up's Table 6 "Rethinker").

Each step is one batched call over all items still in play. Answers that cannot be read
are recorded and the item is skipped at that step.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from medpref.annotation.config import AgentCalls
from medpref.annotation.judging import Choice, Reading, judge_items, parse_choice, shown_pair
from medpref.annotation.judging import shown_order as _judge_order
from medpref.annotation.pairs import (
    Decision,
    decision_for,
    pair_from_candidates,
    pair_from_winner,
    pair_over_candidate,
)
from medpref.contracts import PreferencePair, UnlabeledItem
from medpref.llm.client import LLMClient
from medpref.llm.pairwise import to_candidate_frame
from medpref.llm.types import CallSpec
from medpref.prompts import PromptTemplate, format_dialogue

STRATEGY = "agent"
RETHINKER_SOURCE = "rethinker"

# -- reading agents' answers (pure) ----------------------------------------------------------
_TAG = re.compile(r"^\s*(?:\*\*)?\s*(doctor|physician|dr\.?)\s*(?:\*\*)?\s*:\s*(?:\*\*)?\s*",
                  re.IGNORECASE)
_NEXT_SPEAKER = re.compile(r"\n\s*(?:\*\*)?\s*(?:patient|doctor|physician)\s*(?:\*\*)?\s*:|"
                           r"(?<=\S)\s+(?:patient|doctor)\s*:", re.IGNORECASE)


def parse_plan(text: str, min_words: int = 4) -> str | None:
    """A plan or objectives: the text, whitespace-normalised; None when too short to use."""
    body = " ".join(text.split())
    return body if len(body.split()) >= min_words else None


def parse_reply(text: str, min_words: int = 3) -> str | None:
    """The Rethinker's doctor reply: one turn, speaker tag and quotes removed; None if
    empty, too short, or only a patient line."""
    body = text.strip()
    if re.match(r"^\s*(?:\*\*)?\s*patient\s*(?:\*\*)?\s*:", body, re.IGNORECASE):
        return None
    body = _TAG.sub("", body, count=1)
    body = _NEXT_SPEAKER.split(body, maxsplit=1)[0]
    body = " ".join(body.split()).strip('"“” ')
    return body if len(body.split()) >= min_words else None


_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)


def parse_yes_no(text: str) -> str | None:
    """"yes" / "no" from the Rethinker's first answer, read in its first line; None when
    that line has neither word, or both ("yes or no" is no answer)."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    words = {m.group(1).lower() for m in _YES_NO.finditer(lines[0])} if lines else set()
    return words.pop() if len(words) == 1 else None


def self_report(item: UnlabeledItem) -> str:
    """The patient's opening message: what the long-term plan is made from."""
    return next(t.text for t in item.history if t.role == "patient")


def shown_order(item_id: str, seed: int) -> str:
    """"ab" or "ba": the seeded order the Ranker sees the candidates in."""
    return _judge_order(item_id, seed, tag="rank")


# -- the run ---------------------------------------------------------------------------------
@dataclass
class AgentClients:
    planner: LLMClient
    ranker: LLMClient
    rethinker: LLMClient
    judge: LLMClient


@dataclass
class AgentPrompts:
    long_plan: PromptTemplate
    short_plan: PromptTemplate
    rank: PromptTemplate
    need: PromptTemplate
    rethink: PromptTemplate
    judge: PromptTemplate

    def shas(self) -> dict[str, str]:
        return {t.name: t.sha for t in (self.long_plan, self.short_plan, self.rank,
                                        self.need, self.rethink, self.judge)}


@dataclass
class AgentSettings:
    """The agent strategy's knobs (``annotation.agent`` and ``annotation.judge``)."""

    history_max_turns: int
    calls: AgentCalls
    rerank: bool
    judge_reading: Reading
    seed: int


@dataclass
class AgentResult:
    decisions: list[Decision]
    pairs: list[PreferencePair]
    records: list[dict] = field(default_factory=list)


def _record(item, step, client, template, raw, error, parsed, **extra) -> dict:
    return {"strategy": STRATEGY, "step": step, "item_id": item.id, "raw": raw,
            "error": error, "parsed": parsed, "model": client.model_id,
            "prompt_sha": template.sha, **extra}


def _ask(client: LLMClient, template: PromptTemplate, items, variables, step: str,
         call: CallSpec, parser, records: list[dict], note=lambda item: {}) -> dict:
    """One batched call; returns item id → parsed answer for the readable ones."""
    answers = client.chat_many([template.render(**variables(i)) for i in items], call)
    out = {}
    for item, comp in zip(items, answers):
        parsed = parser(comp.text) if comp.ok else None
        records.append(_record(item, step, client, template, comp.text, comp.error, parsed,
                               **note(item)))
        if parsed is not None:
            out[item.id] = parsed
    return out


def _dialogue(item: UnlabeledItem, s: AgentSettings) -> str:
    return format_dialogue(item.history[-s.history_max_turns:])


def plan(items, clients: AgentClients, prompts: AgentPrompts, s: AgentSettings,
         records: list[dict]) -> dict[str, str]:
    """Planner: long-term plan, then short-term objectives; item id → objectives."""
    plans = _ask(clients.planner, prompts.long_plan, items,
                 lambda i: {"self_report": self_report(i)}, "long_plan", s.calls.long_plan,
                 parse_plan, records)
    planned = [i for i in items if i.id in plans]
    return _ask(clients.planner, prompts.short_plan, planned,
                lambda i: {"plan": plans[i.id], "history": _dialogue(i, s)}, "short_plan",
                s.calls.short_plan, parse_plan, records)


def rank(items, objectives, clients, prompts, s, records) -> dict[str, Choice]:
    """Ranker: item id → "1" / "2" / "equal" in the item's own candidate order."""
    orders = {i.id: shown_order(i.id, s.seed) for i in items}

    def variables(i):
        first, second = shown_pair(i, orders[i.id])
        return {"history": _dialogue(i, s), "objectives": objectives[i.id],
                "response_1": first, "response_2": second}

    shown = _ask(clients.ranker, prompts.rank, items, variables, "rank", s.calls.rank,
                 parse_choice, records, note=lambda i: {"order": orders[i.id]})
    return {iid: to_candidate_frame(c, orders[iid]) for iid, c in shown.items()}


def _draft_variables(objectives, s):
    def variables(i):
        first, second = shown_pair(i, "ab")
        return {"history": _dialogue(i, s), "objectives": objectives[i.id],
                "response_1": first, "response_2": second}
    return variables


def need_better(items, objectives, clients, prompts, s, records) -> dict[str, str]:
    """Rethinker, first step: item id → "yes" (a better reply is needed) or "no"."""
    return _ask(clients.rethinker, prompts.need, items, _draft_variables(objectives, s),
                "need", s.calls.need, parse_yes_no, records)


def rethink(items, objectives, clients, prompts, s, records) -> dict[str, str]:
    """Rethinker, second step: item id → a better doctor reply c3 (items that need one)."""
    return _ask(clients.rethinker, prompts.rethink, items, _draft_variables(objectives, s),
                "rethink", s.calls.rethink, parse_reply, records)


def agent_rank(items: Sequence[UnlabeledItem], clients: AgentClients, prompts: AgentPrompts,
               s: AgentSettings) -> AgentResult:
    """Run the three agents over all items; decisions, pairs and raw answers."""
    records: list[dict] = []
    objectives = plan(items, clients, prompts, s, records)
    planned = [i for i in items if i.id in objectives]
    choices = rank(planned, objectives, clients, prompts, s, records)
    ties = [i for i in planned if choices.get(i.id) == "equal"]
    need = need_better(ties, objectives, clients, prompts, s, records) if ties else {}
    needed = [i for i in ties if need.get(i.id) == "yes"]
    better = rethink(needed, objectives, clients, prompts, s, records) if needed else {}
    reranked = _rerank(ties, clients, prompts, s, records)
    decisions, pairs = [], []
    for item in items:
        d, ps = _decide(item, choices.get(item.id), need.get(item.id), better.get(item.id),
                        reranked.get(item.id), item.id in objectives, s.rerank)
        decisions.append(d)
        pairs += ps
    return AgentResult(decisions, pairs, records)


def _rerank(ties, clients, prompts, s, records) -> dict[str, Decision]:
    if not (s.rerank and ties):
        return {}
    judged = judge_items(ties, clients.judge, prompts.judge, s.history_max_turns, STRATEGY,
                         reading=s.judge_reading, seed=s.seed, call=s.calls.judge,
                         step="rerank")[s.judge_reading]
    records += judged.records
    return {d.item_id: d for d in judged.decisions}


def _decide(item: UnlabeledItem, choice: Choice | None, need: str | None, c3: str | None,
            rerank: Decision | None, planned: bool,
            rerank_on: bool) -> tuple[Decision, list[PreferencePair]]:
    """The item's decision and pairs: one for a ranked winner, up to three for a tie."""
    if not planned or choice is None:
        step = "plan" if not planned else "rank"
        return decision_for(item, STRATEGY, "unparsable", failed_step=step), []
    if choice != "equal":
        d = decision_for(item, STRATEGY, choice, n_pairs=1)
        return d, [pair_from_winner(item, d, step="rank")]
    pairs = []
    if c3 is not None:
        pairs += [pair_over_candidate(item, STRATEGY, c3, RETHINKER_SOURCE, k,
                                      f"-c3-over-{k + 1}", step="rethink") for k in (0, 1)]
    if rerank is not None and rerank.outcome in ("1", "2"):
        win = int(rerank.outcome) - 1
        pairs.append(pair_from_candidates(item, STRATEGY, win, 1 - win, "-rerank",
                                          step="rerank"))
    detail = {"n_pairs": len(pairs), "better_needed": need,
              "rethinker_reply": c3 is not None,
              "rerank": rerank.outcome if rerank is not None else
              ("off" if not rerank_on else None)}
    return decision_for(item, STRATEGY, "tie", **detail), pairs
