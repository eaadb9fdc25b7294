"""Stage 04_annotation: label every unlabeled item of stage 01 with each strategy.

``run(stage)`` loads the items, runs the strategies ``annotation.strategies`` names, in
its order (:mod:`medpref.annotation.strategies`; built in: gpt4_rank, cai_avg / cai_dep
with stage 03's REM, by name from ``rem.scorers``, and agent), checks the yield, writes
pairs, decisions and raw answers (DVC's cache), then the per-item records
(:data:`medpref.annotation.outputs.OUTPUTS`, ``reports/04_annotation/records``) and the
tables built from them as written, and returns the tables the notebook shows. Each step is
a function of its own (also used by the grid cells, :mod:`medpref.annotation.grid`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from medpref.annotation import agent as agent_mod
from medpref.annotation import cai, outputs
from medpref.annotation.analysis import pair_quality
from medpref.annotation.config import AnnotationParams
from medpref.annotation.judging import READINGS, gpt4_rank_pairs, judge_items
from medpref.annotation.strategies import STRATEGIES, StrategyFn, StrategyResult
from medpref.contracts import ContractError, UnlabeledItem, read_jsonl, write_jsonl
from medpref.data.split import DialogueSplit, load_split
from medpref.params import repo_path
from medpref.prompts import load_prompt
from medpref.rules import Flowchart, load_rules
from medpref.scoring.thresholds import describe as describe_thresholds
from medpref.scoring.thresholds import load_thresholds
from medpref.stagekit import Stage

#: The summary row of the gpt4_rank reading whose pairs are not written, and its metrics key.
ALTERNATIVE = {"one": "gpt4_rank (one order: follow-up)",
               "both": "gpt4_rank (both orders: ours)"}
METRICS_KEY = {ALTERNATIVE["one"]: "gpt4_rank_one_order",
               ALTERNATIVE["both"]: "gpt4_rank_both_orders"}
#: The strategy whose verdicts the yield guard counts (the REM-scored one, PLPF's).
GUARDED = "cai_dep"


# -- inputs ---------------------------------------------------------------------------------
def load_items(p: AnnotationParams, split: DialogueSplit | None = None) -> list[UnlabeledItem]:
    """The unlabeled items (stage 01), each with exactly two candidates; the first
    ``max_items`` when set (a prefix, so a larger N keeps the same first items). An item
    cut from a dialogue that ``split`` (the written split, ``shared.split``) holds out in
    dev or eval is refused: annotation never sees those dialogues."""
    path = repo_path(p.input)
    items = read_jsonl(path, UnlabeledItem)
    for line, item in enumerate(items, start=1):
        if len(item.candidates) != 2:
            raise ContractError(path, line, "candidates",
                                f"pairwise annotation needs 2 candidates, got "
                                f"{len(item.candidates)}")
        dialogue = (getattr(item, "meta", None) or {}).get("dialogue_id")
        part = split.parts.get(dialogue, "train") if split is not None else "train"
        if part != "train":
            raise ContractError(path, line, "meta.dialogue_id",
                                f"dialogue {dialogue!r} is in the '{part}' part of "
                                f"{split.path}: no preference item may come from it")
    return items[:p.max_items] if p.max_items else items


def resolve_scoring(stage: Stage) -> None:
    """``annotation.scoring`` as Eq. 4 reads it in this run: with ``met: rem_dev`` the
    per-rule thresholds stage 03 calibrated for ``annotation.rem_scorer`` on the REM's dev
    split (``annotation.rem_thresholds``); with ``fixed`` t1 and t2 as given."""
    p: AnnotationParams = stage.p
    if p.scoring.met == "rem_dev":
        p.scoring = p.scoring.with_thresholds(
            load_thresholds(repo_path(p.rem_thresholds), p.rem_scorer))
    used = describe_thresholds(p.scoring.thresholds, p.scoring.t1, p.scoring.t2)
    print(f"Eq. 4 'met' thresholds: {used}")


def load_stage_items(stage: Stage) -> list[UnlabeledItem]:
    """:func:`load_items` with the stage's written split."""
    return load_items(stage.p, load_split(repo_path(stage.params.shared.split)))


def rem_table5_row(p: AnnotationParams) -> dict[str, Any]:
    """Stage 03's Table 5 row of the scorer this stage uses (its exact configuration);
    an error when Table 5 has no such row."""
    path = repo_path(p.rem_table5)
    table = pd.read_csv(path)
    row = table[table["scorer"] == p.rem_scorer]
    if row.empty:
        raise ValueError(f"{path}: no row for REM scorer '{p.rem_scorer}' "
                         f"(annotation.rem_scorer; Table 5 has {list(table['scorer'])})")
    return row.iloc[0].to_dict()


# -- gpt4_rank ------------------------------------------------------------------------------
def run_gpt4_rank(stage: Stage, items: Sequence[UnlabeledItem]) -> list[StrategyResult]:
    """gpt4_rank in ``judge.orders``'s reading (pairs written), and with ``report_both``
    the other reading from the same batch of answers (shown, not written)."""
    p: AnnotationParams = stage.p
    call = p.call("judge")
    template = load_prompt(call.prompt)
    client = stage.role(call.role)
    other = [r for r in READINGS if r != p.judge.orders] if p.judge.report_both else []
    judged = judge_items(items, client, template, p.history_max_turns, "gpt4_rank",
                         reading=p.judge.orders, seed=stage.seed, call=call, also=other)
    out = [StrategyResult("gpt4_rank", judged[p.judge.orders].decisions,
                          gpt4_rank_pairs(items, judged[p.judge.orders].decisions),
                          judged[p.judge.orders].records, {template.name: template.sha})]
    for reading in other:
        out.append(StrategyResult(ALTERNATIVE[reading], judged[reading].decisions,
                                  gpt4_rank_pairs(items, judged[reading].decisions)))
    return out


# -- cai_avg / cai_dep ----------------------------------------------------------------------
def rem_scorer(stage: Stage, flowchart: Flowchart):
    """Stage 03's scorer ``rem.scorers[annotation.rem_scorer]``, built as stage 03 builds it."""
    from medpref.remscore.scorers import scorer_from_settings

    p: AnnotationParams = stage.p
    rem = stage.params.rem
    if p.rem_scorer not in rem.scorers:
        raise ValueError(f"annotation.rem_scorer '{p.rem_scorer}' is not in rem.scorers "
                         f"({sorted(rem.scorers)})")
    return scorer_from_settings(p.rem_scorer, rem.scorers[p.rem_scorer], stage.llm, rem,
                                flowchart, stage.seed)


@dataclass
class ScoredStates:
    item_states: list[cai.ItemStates]
    judgements: cai.Judgements


def score_states(items: Sequence[UnlabeledItem], scorer, flowchart: Flowchart,
                 trajectory: int) -> ScoredStates:
    item_states = cai.collect_states(items, trajectory)
    return ScoredStates(item_states, cai.score_unique_states(scorer, flowchart, item_states))


def run_cai(items: Sequence[UnlabeledItem], scored: ScoredStates, flowchart: Flowchart,
            p: AnnotationParams, weighting: str) -> StrategyResult:
    """cai_avg or cai_dep from already scored states (no model call here)."""
    name = f"cai_{weighting}"
    decisions = cai.cai_decisions(scored.item_states, scored.judgements, flowchart,
                                  p.scoring, weighting, name)  # type: ignore[arg-type]
    return StrategyResult(name, decisions, cai.cai_pairs(items, decisions, p.scoring.top_n))


# -- agent ----------------------------------------------------------------------------------
def run_agent(stage: Stage, items: Sequence[UnlabeledItem]) -> StrategyResult:
    p: AnnotationParams = stage.p
    calls = p.agent_calls
    prompts = agent_mod.AgentPrompts(**{step: load_prompt(call.prompt)
                                        for step, call in vars(calls).items()})
    clients = agent_mod.AgentClients(
        planner=stage.role(calls.long_plan.role), ranker=stage.role(calls.rank.role),
        rethinker=stage.role(calls.need.role), judge=stage.role(calls.judge.role))
    settings = agent_mod.AgentSettings(
        history_max_turns=p.history_max_turns, calls=calls, rerank=p.agent.rerank,
        judge_reading=p.judge.orders, seed=stage.seed)
    result = agent_mod.agent_rank(items, clients, prompts, settings)
    return StrategyResult("agent", result.decisions, result.pairs, result.records,
                          prompts.shas())


# -- the registered strategies -------------------------------------------------------------
@dataclass
class AnnotationInputs:
    """What a strategy reads: the stage (params, roles, seed), the items and the rules.
    The REM scores the states once, when first asked (cai_avg and cai_dep share them)."""

    stage: Stage
    items: list[UnlabeledItem]
    flowchart: Flowchart
    _scorer: Any = field(default=None, init=False, repr=False)
    _scored: ScoredStates | None = field(default=None, init=False, repr=False)

    @property
    def p(self) -> AnnotationParams:
        return self.stage.p

    def scored(self) -> ScoredStates:
        if self._scored is None:
            with self.stage.step("cai_states"):
                self._scorer = rem_scorer(self.stage, self.flowchart)
                self._scored = score_states(self.items, self._scorer, self.flowchart,
                                            self.p.cai.trajectory)
        return self._scored

    @property
    def scorer(self):
        self.scored()
        return self._scorer


def strategy_plan(names: Sequence[str]) -> list[tuple[str, StrategyFn]]:
    """The strategies ``annotation.strategies`` names, in its order; an unknown name is an
    error naming the param and the known strategies (before any model is called). Each
    strategy, built-in or not, registers in the module of its name, which the registry
    imports when the name is first asked for (:data:`medpref.registry.STRATEGIES`)."""
    return [(name, STRATEGIES.get(name)) for name in names]


# -- the run --------------------------------------------------------------------------------
@dataclass
class AnnotationOutputs:
    """What stage 04 produced; ``results`` are the written strategies (one per
    ``annotation.strategies`` entry), ``shown`` also the gpt4_rank reading that is only
    reported."""

    items: int
    results: dict[str, StrategyResult]
    shown: list[StrategyResult]
    rem_row: dict[str, Any]
    coverage: dict[str, Any]
    summary: pd.DataFrame
    preferences: pd.DataFrame
    margins: pd.DataFrame
    sweep: pd.DataFrame
    unparsable: pd.DataFrame
    examples: list[str]
    figures: dict[str, Path] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)
    prompts: dict[str, str] = field(default_factory=dict)


def usable_items(result: StrategyResult) -> int:
    """Items the strategy reached a verdict on (a winner or a tie)."""
    return sum(d.outcome in ("1", "2", "tie") for d in result.decisions)


def run_strategies(inputs: AnnotationInputs,
                   names: Sequence[str]) -> dict[str, list[StrategyResult]]:
    """Each named strategy in order (the order of the model calls): its results, the
    written one first. An unknown name fails before any model call."""
    produced = {}
    for name, strategy in strategy_plan(names):
        results = strategy(inputs)
        if not results or results[0].name != name:
            raise ValueError(f"annotation strategy '{name}' must return its own result "
                             f"first, got {[r.name for r in results]}")
        produced[name] = results
    return produced


def guarded_result(inputs: AnnotationInputs, results: dict[str, StrategyResult]):
    """The REM-scored strategy's result (``GUARDED``), computed from the scored states
    (no model call) when it is not among the strategies run."""
    if GUARDED in results:
        return results[GUARDED]
    return run_cai(inputs.items, inputs.scored(), inputs.flowchart, inputs.p, "dep")


def run(stage: Stage) -> AnnotationOutputs:
    """Every strategy of ``annotation.strategies`` on every item; fails before writing when
    the REM gave a verdict (a winner or a tie) on too few items, or a role's calls failed
    too often (``annotation.guard``)."""
    p: AnnotationParams = stage.p
    strategy_plan(p.strategies)  # an unknown name fails here, before any work
    resolve_scoring(stage)
    inputs = AnnotationInputs(stage, load_stage_items(stage), load_rules(repo_path(p.rules)))
    items, flowchart = inputs.items, inputs.flowchart
    rem_row = rem_table5_row(p)
    produced = run_strategies(inputs, p.strategies)
    results = {name: res[0] for name, res in produced.items()}
    scored = inputs.scored()  # state_scores.jsonl and the coverage, whichever strategies ran
    # the guard reads the REM-scored strategy (PLPF's); the judge's and the agents'
    # unreadable answers are counted per strategy in the summary instead
    stage.check_yield(usable_items(guarded_result(inputs, results)), len(items),
                      what=f"items the REM scored ({GUARDED} verdicts)")

    shown = [r for res in produced.values() for r in res]
    state_rows = cai.state_score_rows(scored.item_states, scored.judgements, flowchart,
                                      p.scoring)
    write_data(stage, results, shown, state_rows)
    built = write_reports(stage, outputs.records_of(shown, results, state_rows))
    out = AnnotationOutputs(
        items=len(items), results=results, shown=shown, rem_row=rem_row,
        coverage=cai.length_coverage(scored.item_states),
        summary=built["summary"], preferences=built["source_preferences"],
        margins=built["margins"], sweep=built["threshold_sweep"],
        unparsable=pd.DataFrame(outputs.unparsable_rows(built["records"]),
                                columns=["strategy", "step", "item_id", "raw"]),
        examples=example_pairs(results.values()),
        figures={"preferences": stage.report("source_preferences.png"),
                 "margins": stage.report("margins.png")})
    out.metrics = stage_metrics(out, len(scored.judgements))
    out.metrics["eq4_gating"] = {
        "thresholds": describe_thresholds(p.scoring.thresholds, p.scoring.t1, p.scoring.t2),
        **cai.gating_summary(state_rows, guarded_result(inputs, results).decisions,
                             cai.cai_decisions(scored.item_states, scored.judgements, flowchart,
                                               p.scoring.linear(), "dep", "linear"))}
    out.metrics["pair_quality"] = pair_quality(results)
    out.prompts = {k: v for r in results.values() for k, v in r.prompts.items()}
    if inputs.scorer.prompt is not None:   # a fitted REM reads no prompt
        out.prompts[inputs.scorer.prompt.name] = inputs.scorer.prompt.sha
    stage.note_provenance(models=out.models, prompts=out.prompts)
    return out


# -- writing --------------------------------------------------------------------------------
def example_pairs(results, width: int = 160) -> list[str]:
    """One pair per strategy, as short lines to print."""
    lines = []
    for res in results:
        if res.pairs:
            pair = res.pairs[0]
            lines += [f"[{res.name}] {pair.id}  margin={pair.margin}",
                      f"  patient : {pair.prompt[-1].text[:width]}",
                      f"  chosen  ({pair.chosen_source}): {pair.chosen[:width]}",
                      f"  rejected({pair.rejected_source}): {pair.rejected[:width]}", ""]
    return lines


def write_data(stage: Stage, results: dict[str, StrategyResult],
               shown: Sequence[StrategyResult], state_rows: list[dict]) -> None:
    """Pairs per strategy (stage 05's input), all decisions, raw answers and state scores
    (DVC's cache)."""
    for name, res in results.items():
        write_jsonl(stage.data(f"pairs/{name}.jsonl"), res.pairs)
    write_jsonl(stage.data("decisions.jsonl"),
                [d.to_record() for res in shown for d in res.decisions])
    write_jsonl(stage.data("raw_answers.jsonl"),
                [r for res in results.values() for r in res.records])
    write_jsonl(stage.data("state_scores.jsonl"), state_rows)


def write_reports(stage: Stage, records: dict[str, list[dict]]) -> dict[str, Any]:
    """The records (``reports/04_annotation/records``), then every table, figure and
    ``unparsable.jsonl`` built from the records as written (the path ``medpref tables``
    takes); returns the built objects by name, and the written records as ``records``."""
    outputs.OUTPUTS.write_records(stage.reports_dir, records)
    written = outputs.OUTPUTS.load_records(stage.reports_dir)
    built = outputs.OUTPUTS.build(written, stage.params)
    outputs.OUTPUTS.write_built(stage.reports_dir, built)
    return {**built, "records": written}


def _native(value: Any) -> Any:
    """A JSON-ready value: numpy scalars as Python numbers, NaN and "" as None."""
    if hasattr(value, "item"):
        value = value.item()
    if value == "" or (isinstance(value, float) and value != value):
        return None
    return value


def stage_metrics(out: AnnotationOutputs, states_scored: int) -> dict[str, Any]:
    """Scores only: pairs, ties and wins per strategy (and the reported gpt4_rank reading),
    full-length coverage of the trajectories, and the REM's Table 5 row."""
    metrics: dict[str, Any] = {
        "items": out.items, "states_scored": states_scored,
        "full_length_share": out.coverage["full_length_share"],
        "rem": {"scorer": out.rem_row["scorer"],
                **{k: _native(out.rem_row.get(k)) for k in ("exact_%", "fuzzy_%", "fuzzy02_%",
                                                            "near_constant")}}}
    for row in out.summary.to_dict("records"):
        if row["strategy"].startswith("PLPF"):
            continue
        metrics[METRICS_KEY.get(row["strategy"], row["strategy"])] = {k: _native(row[k]) for k in (
            "pairs", "decisive", "ties", "unusable", "tie_ratio", "sampled_wins",
            "generated_wins", "margin_median")}
    return metrics
