"""Params of stage 04 (section ``annotation`` of params.yaml), validated strictly.

The REM that scores candidates is not configured here: ``rem_scorer`` names one entry of
``rem.scorers`` (stage 03's Table 5 rows), built by the same function there and here.
The Eq. 1-4 constants (``scoring``) have their one home in params.yaml: PLPF Appendix C
uses α 0.1, β 0.8, γ 0.1, d 0.65, t1 = t2 = 1.0, ties below a difference of 1, the top 2k
pairs kept; the follow-up sets t1 = t2 = 0.5.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, PrivateAttr, field_validator

from medpref.llm.calls import CallParams, CallSlot, SectionCalls, default_calls
from medpref.llm.types import CallSpec
from medpref.params import EMBEDDED_DIALOGUES, REM_SCORER_READS, ReadBy, StrictModel
from medpref.scoring.formulas import DepSettings
from medpref.stagekit import GuardParams

WeightingName = Literal["avg", "dep"]
#: The strategies of the papers, in the order stage 04 runs them (its LLM calls follow it).
DEFAULT_STRATEGIES = ("gpt4_rank", "cai_avg", "cai_dep", "agent")
#: and, after them, the DPO control (medpref.annotation.control: planted pairs, no model call)
DEFAULT_CONTROLS = ("control_process",)
STRATEGY_NAME = r"^[a-z][a-z0-9_]*$"  # a file name, a DVC stage suffix and a DPO run name


class ScoringConfig(StrictModel):
    """PLPF Eqs. 1-4 and the pair selection (Appendix C); every value comes from params.yaml."""

    alpha: float = Field(ge=0.0, lt=1.0)  # V_α: an unmet predecessor
    beta: float = Field(ge=0.0, lt=1.0)  # V_β: an unmet constraint
    gamma: float = Field(ge=0.0, le=1.0)  # weight of every constraint rule
    discount: float = Field(gt=0.0, le=1.0)  # d of Eq. 1
    t1: float = Field(ge=0.0, le=2.0)  # "predecessor met" threshold
    t2: float = Field(ge=0.0, le=2.0)  # "constraint met" threshold
    # where "met" is read: fixed (t1/t2 on the 0-2 score, PLPF App. C) or rem_dev (per rule,
    # the REM's own cut calibrated on its dev split: stage 03's thresholds.csv)
    met: Literal["fixed", "rem_dev"] = "rem_dev"
    predecessors: Literal["direct", "transitive"]  # which r' ≺ r Eq. 4 multiplies over
    tie_threshold: float = Field(ge=0.0)  # |s1 - s2| below this is a tie
    top_n: int | None = Field(ge=1)  # keep the N widest margins (None: all)
    _calibrated: dict[str, float] = PrivateAttr(default_factory=dict)

    def with_thresholds(self, thresholds: dict[str, float]) -> ScoringConfig:
        """A copy whose Eq. 4 reads "met" at these per-rule values (``met: rem_dev``)."""
        out = self.model_copy()
        out._calibrated = dict(thresholds)
        return out

    @property
    def thresholds(self) -> dict[str, float]:
        """The per-rule thresholds in use (empty: t1/t2)."""
        return dict(self._calibrated)

    def dep_settings(self) -> DepSettings:
        return DepSettings(alpha=self.alpha, beta=self.beta, gamma=self.gamma, t1=self.t1,
                           t2=self.t2, predecessors=self.predecessors,
                           thresholds=dict(self._calibrated))

    def linear(self) -> ScoringConfig:
        """Eq. 4 with every gate open (t1 = t2 = 0, no calibrated cut): the linear sum
        Σ goals + γ Σ constraints that ``dep`` reduces to when no gate acts."""
        out = self.model_copy(update={"t1": 0.0, "t2": 0.0, "met": "fixed"})
        out._calibrated = {}
        return out


class CaiConfig(StrictModel):
    """The main cai_avg / cai_dep strategies (the grid varies these two knobs)."""

    trajectory: int = Field(3, ge=1, le=4)  # states scored: 1 = the candidate alone


class JudgeConfig(StrictModel):
    """gpt4_rank: a judge (``calls.judge``) picks response 1, response 2 or equal.

    ``orders: one`` is the follow-up's GPT-4 Ranking: one question per item (candidates
    shown in a seeded order), "equal" answers dropped. ``both`` is this project's addition:
    the item is asked in both orders and only an answer that survives the swap counts
    (disagreement = tie). ``report_both``: also run the other one and show it in the
    summary (its pairs are not written)."""

    orders: Literal["one", "both"] = "one"
    report_both: bool = True



class AgentConfig(StrictModel):
    """Multiple Agent Ranking: planner, ranker, rethinker (+ the judge's re-rank); their
    calls are ``annotation.calls`` long_plan, short_plan, rank, need and rethink."""

    rerank: bool = True  # re-rank c1 vs c2 with gpt4_rank on ties (off: Table 6 "Rethinker")

@dataclass(frozen=True)
class AgentCalls:
    """The agent strategy's calls, one per step (``annotation.calls``); the Rethinker's
    reply starts with "Doctor:"."""

    long_plan: CallSpec
    short_plan: CallSpec
    rank: CallSpec
    need: CallSpec
    rethink: CallSpec
    judge: CallSpec  # the re-rank of a tie (gpt4_rank's call)


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


class ControlConfig(StrictModel):
    """The ``control_process`` pairs (medpref.annotation.control): no model call."""

    # Dialogue file with meta.diagnosis and meta.diagnosis_turn; its shared.split train part
    dialogues: str = EMBEDDED_DIALOGUES
    max_pairs: int | None = Field(80, ge=1)           # seeded subset (None: all)


#: the dvc stages that read this section: stage 04 (every field without a ``ReadBy``,
#: ``AnnotationParams.READ_BY``), each grid cell (the items, the scoring, the grid) and
#: the grid's table
ANNOTATION = ("annotation",)
WITH_CELLS = ("annotation", "annotation_grid")


class AnnotationParams(SectionCalls):
    SECTION: ClassVar[str] = "annotation"
    READ_BY: ClassVar[tuple[str, ...]] = ANNOTATION
    #: gpt4_rank's judge (also the agent's re-rank of a tie) and the agent's five steps
    CALLS: ClassVar[dict[str, CallSlot]] = {
        "judge": CallSlot(), "long_plan": CallSlot(), "short_plan": CallSlot(),
        "rank": CallSlot(), "need": CallSlot(), "rethink": CallSlot(answer_prefix="Doctor:")}
    calls: dict[str, CallParams] = default_calls(
        judge=dict(role="judge", prompt="annotation_judge", max_new_tokens=24,
                   answer_prefix="Answer:"),
        long_plan=dict(role="planner", prompt="annotation_long_plan", max_new_tokens=96),
        short_plan=dict(role="planner", prompt="annotation_short_plan", max_new_tokens=64),
        rank=dict(role="ranker", prompt="annotation_agent_rank", max_new_tokens=24,
                  answer_prefix="Answer:"),
        need=dict(role="rethinker", prompt="annotation_rethink_need", max_new_tokens=8,
                  answer_prefix="Answer:"),
        rethink=dict(role="rethinker", prompt="annotation_rethink", max_new_tokens=96))

    # the strategies stage 04 runs, in order (medpref.annotation.strategies): each writes
    # <output_dir>/pairs/<name>.jsonl and gets the DPO run <name> (dvc.yaml reads the list)
    strategies: list[str] = Field(default_factory=lambda: [*DEFAULT_STRATEGIES,
                                                           *DEFAULT_CONTROLS])
    input: Annotated[str, ReadBy(WITH_CELLS)] = "data/01_sampling/unlabeled.jsonl"
    rules: Annotated[str, ReadBy(WITH_CELLS)] = "configs/rules/plpf_flowchart.yaml"
    # the first N items (None: all)
    max_items: Annotated[int | None, ReadBy(WITH_CELLS)] = Field(None, ge=1)
    history_max_turns: int = Field(8, ge=1, le=400)  # history shown to judge and agents
    output_dir: str = "data/04_annotation"
    reports: Annotated[str, ReadBy(("annotation", "annotation_grid_table"))] = (
        "reports/04_annotation")
    # a name in rem.scorers (a row of stage 03's Table 5): its settings are read with it
    rem_scorer: Annotated[str, ReadBy(WITH_CELLS, reads=REM_SCORER_READS)] = "encoder"
    rem_table5: str = "reports/03_rem/table5.csv"  # where that row is read from
    # scoring.met rem_dev reads its rows
    rem_thresholds: Annotated[str, ReadBy(WITH_CELLS)] = "reports/03_rem/thresholds.csv"
    scoring: Annotated[ScoringConfig, ReadBy(WITH_CELLS)]
    cai: CaiConfig = Field(default_factory=CaiConfig)
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    grid: Annotated[GridConfig, ReadBy(("annotation_grid", "annotation_grid_table"))] = Field(
        default_factory=GridConfig)
    control: ControlConfig = Field(default_factory=ControlConfig)
    guard: Annotated[GuardParams, ReadBy(WITH_CELLS)] = Field(default_factory=GuardParams)

    def option_scoring(self, sections: dict[str, Any]) -> list[tuple[str, str]]:
        """(params key, role) of each option-scoring use: the REM that scores candidates
        (``rem_scorer``, a ``rem.scorers`` entry read with ``rem``'s role)."""
        rem = sections.get("rem")
        if rem is None or self.rem_scorer not in rem.scorers:
            return []
        return [("annotation.rem_scorer", rem.role)] if rem.scores_options(self.rem_scorer) else []

    @field_validator("strategies")
    @classmethod
    def _strategy_names(cls, v: list[str]) -> list[str]:
        bad = [n for n in v if not re.match(STRATEGY_NAME, n)]
        if bad:
            raise ValueError(f"strategy names must match {STRATEGY_NAME}, got {bad}")
        if len(set(v)) != len(v):
            raise ValueError(f"a strategy is listed twice: {v}")
        return v

    @property
    def agent_calls(self) -> AgentCalls:
        return AgentCalls(**{step: self.call(step) for step in (
            "long_plan", "short_plan", "rank", "need", "rethink", "judge")})

    def pairs_file(self, strategy: str) -> str:
        """Where stage 04 writes a strategy's pairs (and its DPO run reads them)."""
        return f"{self.output_dir}/pairs/{strategy}.jsonl"
