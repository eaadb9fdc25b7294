"""Params of stage 04 (section ``annotation`` of params.yaml), validated strictly.

Defaults are the papers' values: PLPF Appendix C (α 0.1, β 0.8, γ 0.1, d 0.65, t1 = t2 = 1.0,
k 5, ties below a score difference of 1, the top 2k pairs kept); the follow-up sets
t1 = t2 = 0.5 (`dvc exp run -S annotation.scoring.t1=0.5 -S annotation.scoring.t2=0.5`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from medpref.params import StrictModel

WeightingName = Literal["avg", "dep"]


class RemConfig(StrictModel):
    """Which REM scores the states (stage 03's scorers, through the `rem` role)."""

    mode: Literal["sampled", "expected", "finetuned"] = "expected"
    k: int = Field(5, ge=1, le=50)  # samples per judgement, `sampled` mode only (Eq. 2)
    temperature: float = Field(0.7, gt=0.0, le=2.0)  # `sampled` mode only
    max_new_tokens: int = Field(64, ge=4, le=1024)  # sampled answers / greedy comments
    # The embedded default is zero-shot with the short rule statement: prompts ~3x shorter
    # than the follow-up's 5-shot full rules, which a 2-core CPU cannot afford per state.
    n_examples: int = Field(0, ge=0, le=20)  # in-context examples per rule (follow-up: 5)
    detail: Literal["full", "short"] | None = "short"  # rule text (None: the mode's default)
    icl_examples: str = "data/embedded/rem/icl_examples.jsonl"
    adapter: str | None = None  # `finetuned` mode: stage 03's LoRA adapter folder
    role: str = "rem"

    @field_validator("adapter")
    @classmethod
    def _adapter_not_blank(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("adapter must be a folder path or null")
        return v


class ScoringConfig(StrictModel):
    """PLPF Eqs. 1-4 and the pair selection (Appendix C)."""

    alpha: float = Field(0.1, ge=0.0, lt=1.0)  # V_α: an unmet predecessor
    beta: float = Field(0.8, ge=0.0, lt=1.0)  # V_β: an unmet constraint
    gamma: float = Field(0.1, ge=0.0, le=1.0)  # weight of every constraint rule
    discount: float = Field(0.65, gt=0.0, le=1.0)  # d of Eq. 1
    t1: float = Field(1.0, ge=0.0, le=2.0)  # "predecessor met" threshold
    t2: float = Field(1.0, ge=0.0, le=2.0)  # "constraint met" threshold
    tie_threshold: float = Field(1.0, ge=0.0)  # |s1 - s2| below this is a tie
    top_n: int | None = Field(2000, ge=1)  # keep the N widest margins (None: all)


class CaiConfig(StrictModel):
    """The main cai_avg / cai_dep strategies (the grid varies these two knobs)."""

    trajectory: int = Field(3, ge=1, le=4)  # states scored: 1 = the candidate alone


class JudgeConfig(StrictModel):
    """gpt4_rank: a judge picks response 1, response 2 or equal, in both orders."""

    role: str = "judge"
    prompt: str = "annotation_judge"
    max_new_tokens: int = Field(24, ge=1, le=1024)
    answer_prefix: str = "Answer:"


class AgentConfig(StrictModel):
    """Multiple Agent Ranking: planner, ranker, rethinker (+ the judge's re-rank)."""

    planner_role: str = "planner"
    ranker_role: str = "ranker"
    rethinker_role: str = "rethinker"
    long_plan_prompt: str = "annotation_long_plan"
    short_plan_prompt: str = "annotation_short_plan"
    rank_prompt: str = "annotation_agent_rank"
    rethink_prompt: str = "annotation_rethink"
    plan_tokens: int = Field(96, ge=8, le=2048)
    objective_tokens: int = Field(64, ge=8, le=2048)
    rank_tokens: int = Field(24, ge=1, le=1024)
    rethink_tokens: int = Field(96, ge=8, le=2048)
    rerank: bool = True  # re-rank c1 vs c2 with the judge on ties (off: Table 6 "Rethinker")


class GridConfig(StrictModel):
    """The weighting × trajectory-length ablation (PLPF Table 3, follow-up Fig. 10)."""

    weightings: list[WeightingName] = Field(default_factory=lambda: ["avg", "dep"], min_length=1)
    trajectories: list[int] = Field(default_factory=lambda: [1, 2, 3], min_length=1)
    output_dir: str = "data/04_annotation/grid"
    reports: str = "reports/04_annotation/grid"

    @field_validator("trajectories")
    @classmethod
    def _lengths_in_range(cls, v: list[int]) -> list[int]:
        bad = [n for n in v if not 1 <= n <= 4]
        if bad:
            raise ValueError(f"trajectory lengths must be 1..4, got {bad}")
        return v

    @field_validator("weightings", "trajectories")
    @classmethod
    def _no_repeats(cls, v: list) -> list:
        if len(set(v)) != len(v):
            raise ValueError(f"a grid axis lists a value twice: {v}")
        return v


class AnnotationParams(StrictModel):
    input: str = "data/01_sampling/unlabeled.jsonl"
    rules: str = "configs/rules/plpf_flowchart.yaml"
    max_items: int | None = Field(8, ge=1)  # the first N items (None: all)
    history_max_turns: int = Field(8, ge=1, le=400)  # history shown to judge and agents
    output_dir: str = "data/04_annotation"
    reports: str = "reports/04_annotation"
    rem: RemConfig = Field(default_factory=RemConfig)
    scoring: ScoringConfig = Field(default_factory=ScoringConfig)
    cai: CaiConfig = Field(default_factory=CaiConfig)
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    grid: GridConfig = Field(default_factory=GridConfig)
