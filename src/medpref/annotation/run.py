"""Stage 04's run: load the unlabeled items, run each strategy, write pairs and records.

The notebook calls these in order; each returns plain results, and writing is separate
(atomic files, nothing half-written when a step fails).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from medpref.annotation import agent as agent_mod
from medpref.annotation import cai
from medpref.annotation.config import AnnotationParams
from medpref.annotation.judging import gpt4_rank_pairs, judge_both_orders
from medpref.annotation.pairs import Decision
from medpref.contracts import (ContractError, PreferencePair, RemAnnotation, UnlabeledItem,
                               read_jsonl, write_jsonl)
from medpref.llm import LLMSession
from medpref.params import repo_path
from medpref.prompts import load_prompt
from medpref.rem.base import RuleScorer
from medpref.rules import Flowchart

STRATEGIES = ("gpt4_rank", "cai_avg", "cai_dep", "agent")


@dataclass
class StrategyResult:
    """One strategy's output: a decision per item, the pairs kept, the raw model answers."""

    name: str
    decisions: list[Decision]
    pairs: list[PreferencePair]
    records: list[dict] = field(default_factory=list)
    prompts: dict[str, str] = field(default_factory=dict)
    wall_s: float = 0.0


def load_items(p: AnnotationParams) -> list[UnlabeledItem]:
    """The unlabeled items (stage 01), each with exactly two candidates; the first
    ``max_items`` when set (a prefix, so a larger N keeps the same first items)."""
    path = repo_path(p.input)
    items = read_jsonl(path, UnlabeledItem)
    for line, item in enumerate(items, start=1):
        if len(item.candidates) != 2:
            raise ContractError(path, line, "candidates",
                                f"pairwise annotation needs 2 candidates, got "
                                f"{len(item.candidates)}")
    return items[:p.max_items] if p.max_items else items


# -- gpt4_rank -------------------------------------------------------------------------------
def run_gpt4_rank(items: Sequence[UnlabeledItem], llm: LLMSession,
                  p: AnnotationParams) -> StrategyResult:
    t0 = time.perf_counter()
    template = load_prompt(p.judge.prompt)
    client = llm.role(p.judge.role, max_new_tokens=p.judge.max_new_tokens)
    judged = judge_both_orders(items, client, template, p.history_max_turns, "gpt4_rank",
                               prefix=p.judge.answer_prefix)
    return StrategyResult("gpt4_rank", judged.decisions,
                          gpt4_rank_pairs(items, judged.decisions), judged.records,
                          {template.name: template.sha}, time.perf_counter() - t0)


# -- cai_avg / cai_dep -----------------------------------------------------------------------
def build_rem_scorer(llm: LLMSession, p: AnnotationParams, flowchart: Flowchart,
                     seed: int) -> RuleScorer:
    """Stage 03's scorer in the configured mode, through this stage's `rem` role."""
    from medpref.rem.scorers import build_scorer, finetuned_settings

    if p.rem.mode == "finetuned":
        if not p.rem.adapter:
            raise ValueError("annotation.rem.mode 'finetuned' needs annotation.rem.adapter "
                             "(stage 03's LoRA adapter folder)")
        client = llm.role(p.rem.role, adapter=p.rem.adapter)
        # read the REM the way it was trained (answer order, rule detail: its task card)
        return build_scorer("finetuned", client, flowchart, [], k=p.rem.k, seed=seed,
                            max_new_tokens=p.rem.max_new_tokens,
                            **finetuned_settings(repo_path(p.rem.adapter)))
    client = llm.role(p.rem.role)
    examples = read_jsonl(repo_path(p.rem.icl_examples), RemAnnotation)
    return build_scorer(p.rem.mode, client, flowchart, examples, k=p.rem.k, seed=seed,
                        n_examples=p.rem.n_examples, temperature=p.rem.temperature,
                        max_new_tokens=p.rem.max_new_tokens, detail=p.rem.detail)


@dataclass
class ScoredStates:
    item_states: list[cai.ItemStates]
    judgements: cai.Judgements
    wall_s: float


def score_states(items: Sequence[UnlabeledItem], scorer: RuleScorer, flowchart: Flowchart,
                 trajectory: int) -> ScoredStates:
    t0 = time.perf_counter()
    item_states = cai.collect_states(items, trajectory)
    judgements = cai.score_unique_states(scorer, flowchart, item_states)
    return ScoredStates(item_states, judgements, time.perf_counter() - t0)


def run_cai(items: Sequence[UnlabeledItem], scored: ScoredStates, flowchart: Flowchart,
            p: AnnotationParams, weighting: str) -> StrategyResult:
    """cai_avg or cai_dep from already scored states (no model call here)."""
    name = f"cai_{weighting}"
    decisions = cai.cai_decisions(scored.item_states, scored.judgements, flowchart,
                                  p.scoring, weighting, name)  # type: ignore[arg-type]
    pairs = cai.cai_pairs(items, decisions, p.scoring.top_n)
    return StrategyResult(name, decisions, pairs, wall_s=scored.wall_s)


# -- agent -----------------------------------------------------------------------------------
def run_agent(items: Sequence[UnlabeledItem], llm: LLMSession, p: AnnotationParams,
              seed: int) -> StrategyResult:
    t0 = time.perf_counter()
    a = p.agent
    prompts = agent_mod.AgentPrompts(
        long_plan=load_prompt(a.long_plan_prompt), short_plan=load_prompt(a.short_plan_prompt),
        rank=load_prompt(a.rank_prompt), rethink=load_prompt(a.rethink_prompt),
        judge=load_prompt(p.judge.prompt))
    clients = agent_mod.AgentClients(
        planner=llm.role(a.planner_role), ranker=llm.role(a.ranker_role),
        rethinker=llm.role(a.rethinker_role),
        judge=llm.role(p.judge.role, max_new_tokens=p.judge.max_new_tokens))
    settings = agent_mod.AgentSettings(
        history_max_turns=p.history_max_turns, plan_tokens=a.plan_tokens,
        objective_tokens=a.objective_tokens, rank_tokens=a.rank_tokens,
        rethink_tokens=a.rethink_tokens, rerank=a.rerank,
        judge_prefix=p.judge.answer_prefix, seed=seed)
    result = agent_mod.agent_rank(items, clients, prompts, settings)
    return StrategyResult("agent", result.decisions, result.pairs, result.records,
                          prompts.shas(), time.perf_counter() - t0)


# -- writing ---------------------------------------------------------------------------------
def output_paths(p: AnnotationParams) -> dict[str, Path]:
    out, rep = repo_path(p.output_dir), repo_path(p.reports)
    paths = {f"pairs_{s}": out / "pairs" / f"{s}.jsonl" for s in STRATEGIES}
    paths.update(decisions=out / "decisions.jsonl", raw_answers=out / "raw_answers.jsonl",
                 state_scores=out / "state_scores.jsonl",
                 unparsable=rep / "unparsable.jsonl", summary=rep / "summary",
                 preferences=rep / "source_preferences", margins=rep / "margins",
                 sweep=rep / "threshold_sweep",
                 fig_preferences=rep / "source_preferences.png",
                 fig_margins=rep / "margins.png", metrics=rep / "metrics.json",
                 ledger=rep / "ledger.json", provenance=rep / "provenance.json")
    return paths


def unparsable_records(results: Sequence[StrategyResult]) -> list[dict]:
    """Every model answer that could not be read (the item was skipped at that step)."""
    return [r for res in results for r in res.records if r.get("parsed") is None]


def write_results(results: Sequence[StrategyResult], paths: dict[str, Path]) -> dict[str, int]:
    """Pairs per strategy, all decisions and raw answers, the unparsable ones apart."""
    counts = {}
    for res in results:
        counts[res.name] = write_jsonl(paths[f"pairs_{res.name}"], res.pairs)
    write_jsonl(paths["decisions"], [d.to_record() for res in results for d in res.decisions])
    write_jsonl(paths["raw_answers"], [r for res in results for r in res.records])
    write_jsonl(paths["unparsable"], unparsable_records(results))
    return counts


def stage_metrics(results: Sequence[StrategyResult], ledger: dict, n_items: int,
                  states_scored: int, wall_s: float) -> dict:
    """The numbers the stage reports: pairs and ties per strategy, model use, wall time."""
    out: dict = {"items": n_items, "states_scored": states_scored,
                 "wall_s": round(wall_s, 1),
                 "model_calls": ledger["total"]["calls"],
                 "cache_hits": ledger["total"]["cache_hits"],
                 "unparsable_answers": len(unparsable_records(results))}
    for res in results:
        ties = sum(d.outcome == "tie" for d in res.decisions)
        decisive = sum(d.outcome in ("1", "2") for d in res.decisions)
        out[res.name] = {"pairs": len(res.pairs), "decisive": decisive, "ties": ties,
                         "tie_ratio": round(ties / (ties + decisive), 4) if ties + decisive else None,
                         "wall_s": round(res.wall_s, 1)}
    return out
