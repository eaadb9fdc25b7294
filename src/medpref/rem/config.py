"""Params of stage 03_rem (section ``rem`` of params.yaml): rules, REM scorers, training.

``rem.scorers`` is the one definition of how a REM is read: every entry is a row of
Table 5, and stage 04 scores its candidates with one of them by name
(``annotation.rem_scorer``), built by the same function
(:func:`medpref.remscore.scorers.scorer_from_settings`).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from medpref.finetune.recipe import Recipe, require_kind
from medpref.handoffs import REM_ADAPTER, REM_SCORERS
from medpref.llm.calls import CallParams, CallSlot, SectionCalls, default_calls
from medpref.params import EMBEDDED_DIALOGUES, StrictModel
from medpref.remscore.task import COMMENT_PREFIX
from medpref.stagekit import GuardParams

#: the split (and evaluation set) of the labelled turns' development part
TURNS_DEV = "turns_dev"


class RemTrainParams(StrictModel):
    """The REM's recipe (PLPF: 2 epochs on 1,800 examples; here the train split), the
    hardware it trains on and how its task is written."""

    hardware: str = "cpu"              # configs/hardware/<name>.yaml (its `rem` section)
    # an SFT recipe in trl's and peft's names (max_steps: exact; null: the epochs,
    # capped by the hardware's rem.max_steps_cap)
    recipe: Recipe
    rule_detail: Literal["full", "short"] = "short"
    # comment_first: "Comment: … Score: N" as in PLPF (scoring writes a comment first);
    # score_first: "Score: N Comment: …" (scoring reads the score token in one pass)
    answer_order: Literal["comment_first", "score_first"] = "score_first"
    # at most this many training rows (a seeded rule × score stratified sample of the train
    # split; PLPF trains on all 1,800): the LoRA REM's minutes grow with its rows
    max_rows: int | None = Field(160, ge=1)
    adapter_dir: str = REM_ADAPTER
    checkpoints_dir: str = "data/03_rem/checkpoints"  # a killed run resumes here (removed after)

    @model_validator(mode="after")
    def _sft_recipe(self) -> RemTrainParams:
        require_kind(self.recipe, "rem.train.recipe", dpo=False)
        return self


class RemConstructionParams(StrictModel):
    """How ``python -m medpref.rem.constructions`` builds ``rem.constructed``: the written
    constructions over the training-split dialogues, the REM's own split of those
    dialogues, and the balance of rule × score × turn length (docs/rem.md)."""

    config: str = "configs/rem/constructions.yaml"
    dialogues: str = EMBEDDED_DIALOGUES                # its `train` part (shared.split) only
    seed: int = 0
    dev_share: float = Field(0.15, ge=0.0, lt=0.5)      # of the training dialogues
    test_share: float = Field(0.15, ge=0.0, lt=0.5)
    max_history_turns: int = Field(10, ge=2, le=40)     # a row keeps its last N turns (even)
    length_bins: list[int] = Field(default_factory=lambda: [10, 20, 35])  # word cuts
    # rows per cell (rule × score × length bin × asks a question × first doctor turn),
    # per split (the REM's own)
    per_cell: dict[Literal["train", "dev", "test"], int] = Field(
        default_factory=lambda: {"train": 12, "dev": 4, "test": 4})
    # then rows added to every rule × score below this many (a scarce label), per split
    per_label_floor: dict[Literal["train", "dev", "test"], int] = Field(
        default_factory=lambda: {"train": 60, "dev": 15, "test": 15})
    overlap_words: int = Field(8, ge=4, le=50)  # a shared run this long = shared text

    @field_validator("max_history_turns")
    @classmethod
    def _even(cls, n: int) -> int:
        if n % 2:
            raise ValueError("must be even, so a trimmed history starts with a patient turn")
        return n


class RemTurnsParams(StrictModel):
    """Labelled doctor turns that no construction made, as REM rows (issue 40; docs/rem.md,
    "Labelled turns"): each turn gives one row per rule, its labeller-``l1`` score.

    ``files`` hold turns of the split's training dialogues in the shape of
    ``real_turns.jsonl`` (``part``: ``train`` or ``dev``, by dialogue). The independent
    test's SP turns of the cases outside ``sp_test_cases`` join them (the cases of
    ``sp_dev_cases`` as development rows, the others as training rows) and leave the test;
    the SP turns of ``sp_test_cases``, every held-out turn (an eval-split state) and every
    human turn stay test items. An SP case named in neither list is an error."""

    files: list[str] = Field(default_factory=lambda: [
        "data/embedded/rem/real_turns.jsonl", "data/embedded/rem/train_turns.jsonl",
        "data/embedded/rem/sp_turns.jsonl"])
    # the embedded cases: 8 of 17 seeded as test cases, 3 of the other 9 as dev cases
    sp_test_cases: list[str] = Field(default_factory=lambda: [
        "sp-0001", "sp-0002", "sp-0003", "sp-0004", "sp-0005", "sp-0012", "sp-0013", "sp-0017"])
    sp_dev_cases: list[str] = Field(default_factory=lambda: ["sp-0006", "sp-0010", "sp-0011"])

    @model_validator(mode="after")
    def _disjoint(self) -> RemTurnsParams:
        both = sorted(set(self.sp_test_cases) & set(self.sp_dev_cases))
        if both:
            raise ValueError(f"rem.turns: cases both test and dev: {both}")
        return self


class RemScorerSettings(StrictModel):
    """How one REM scorer reads the model (one row of Table 5).

    ``sampled``: k sampled answers averaged (Eq. 2); ``expected``: Σ s·p(s) of the score
    token; ``finetuned``: the LoRA REM of ``rem.train.adapter_dir``, read the way its task
    card says it was trained (``detail`` and ``comment`` must then stay null). A mode is a
    builder registered in :data:`medpref.registry.REM_SCORERS`
    (:mod:`medpref.remscore.scorers` registers these three).
    """

    mode: str
    k: int = Field(1, ge=1, le=50)                  # samples per judgement (sampled)
    temperature: float = Field(0.7, gt=0.0, le=2.0)  # sampled
    n_examples: int = Field(0, ge=0, le=20)         # in-context examples per rule
    detail: Literal["full", "short"] | None = None  # rule text; null: the mode's default
    comment: bool | None = None                     # expected: greedy comment first?
    # what a state's rule score v is (expected/finetuned): Σ s·p(s), or the most probable
    # score (the score a greedy REM writes: Eq. 2 with k = 1); sampled: the mean of k samples
    state_value: Literal["expected", "label"] = "expected"
    rule_blind: bool = False   # encoder: one classifier pooled over the rules (rule removed)

    @model_validator(mode="after")
    def _fits_the_mode(self) -> RemScorerSettings:
        from medpref.remscore.scorers import REM_SCORERS

        mode = REM_SCORERS.get(self.mode)   # an unknown mode: the key and the known modes
        if self.rule_blind and not mode.fitted:
            raise ValueError(f"rule_blind applies to fitted scorers only (mode {self.mode})")
        if mode.check is not None:
            mode.check(self)
        return self

    @property
    def fitted(self) -> bool:
        """Fitted on the REM data by stage 03 (cheap: scored on every item)."""
        from medpref.remscore.scorers import REM_SCORERS

        return REM_SCORERS.get(self.mode).fitted


class RemFittedParams(StrictModel):
    """The fitted scorers (encoder REM and baselines): where their models go, what they
    read, and the regularisation grid their C is chosen from on the development split."""

    model_dir: str = REM_SCORERS                    # <scorer name>.json per fitted scorer
    # one of medpref.embedding.PACKAGED_ENCODERS, or a sentence-transformers folder
    embedding_model: str = "use_multilingual"
    lexicon: str = "data/embedded/lexicon"            # the surface word lists' source
    disease_types: list[str] = Field(default_factory=lambda: [
        "Disease or Syndrome", "Mental or Behavioral Dysfunction", "Neoplastic Process",
        "Injury or Poisoning"])
    test_types: list[str] = Field(default_factory=lambda: [
        "Laboratory Procedure", "Diagnostic Procedure"])
    c_grid: list[float] = Field(default_factory=lambda: [0.01, 0.1, 1.0, 10.0])

    @field_validator("c_grid")
    @classmethod
    def _positive(cls, grid: list[float]) -> list[float]:
        if not grid or any(c <= 0 for c in grid):
            raise ValueError("c_grid: one or more positive values")
        return grid


class RemParams(SectionCalls):
    """The REM's one call, ``calls.score``: its role is the REM's model (the base of the
    LoRA REM too), its prompt the REM task (the fine-tuning examples' too), its budget
    that of a sampled answer or of a greedy comment, written after "Comment:"."""

    SECTION: ClassVar[str] = "rem"
    CALLS: ClassVar[dict[str, CallSlot]] = {"score": CallSlot(answer_prefix=COMMENT_PREFIX)}
    calls: dict[str, CallParams] = default_calls(
        score=dict(role="rem", prompt="rem_judge", max_new_tokens=80))

    rules: str = "configs/rules/plpf_flowchart.yaml"
    annotations: str = "data/embedded/rem/annotations.jsonl"
    # constructed rows (python -m medpref.rem.constructions; rem.construction says how)
    constructed: str = "data/embedded/rem/constructed.jsonl"
    construction: RemConstructionParams = Field(default_factory=RemConstructionParams)
    icl_examples: str = "data/embedded/rem/icl_examples.jsonl"
    independent: str | None = "data/embedded/rem/independent.jsonl"   # rows per turn
    dev_split: str = "dev"                         # the constructed rows' development split
    # labelled turns the fitted scorers (and the LoRA REM's sample) learn from; None: none
    turns: RemTurnsParams | None = Field(default_factory=RemTurnsParams)
    # where C and the default REM are chosen: the constructed ``dev`` split, or the
    # labelled turns' development part (``turns_dev``; needs ``turns``)
    select_on: Literal["dev", "turns_dev"] = "turns_dev"
    eval_split: str = "test"
    eval_per_rule: int | None = Field(None, ge=1)  # per rule, every score first; None: all
    scorers: dict[str, RemScorerSettings]          # Table 5's rows, by name
    fitted: RemFittedParams = Field(default_factory=RemFittedParams)
    # LLM rows score a fixed, seeded subset (rule × gold stratified) of each of these sets;
    # every fitted row scores the whole set and is also shown on that subset
    llm_eval_rows: int | None = Field(60, ge=1)
    llm_eval_sets: list[Literal["dev", "turns_dev", "test", "hand_test", "independent"]] = Field(
        default_factory=lambda: ["dev", "turns_dev", "independent"])
    paired_against: list[str] = Field(default_factory=lambda: ["length", "surface",
                                                               "encoder_blind"])
    bootstrap_rounds: int = Field(2000, ge=1000, le=100_000)
    near_constant_share: float = Field(0.9, gt=0.0, le=1.0)  # flag: one label on > this share
    train: RemTrainParams
    compliance_dialogues: str = EMBEDDED_DIALOGUES
    compliance_n: int = Field(3, ge=1, le=10_000)  # dialogues, each cut at its last doctor turn
    compliance_scorers: list[str]                  # names in `scorers`
    guard: GuardParams = Field(default_factory=GuardParams)

    @property
    def role(self) -> str:
        """The REM's role (``calls.score.role``)."""
        return self.call("score").role

    @property
    def prompt(self) -> str:
        """The REM task's prompt (``calls.score.prompt``)."""
        return self.call("score").prompt

    def scores_options(self, name: str) -> bool:
        """Whether scorer ``name`` of ``scorers`` reads option probabilities (log-probs)."""
        from medpref.remscore.scorers import REM_SCORERS  # registers the modes

        return REM_SCORERS.get(self.scorers[name].mode).options

    def option_scoring(self, sections: dict[str, Any]) -> list[tuple[str, str]]:
        """(params key, role) of each option-scoring use (medpref.params checks the
        role's server): stage 03 runs every LLM scorer on ``llm_eval_sets``, and the
        compliance scorers on its dialogues."""
        uses = [(f"rem.scorers.{name}.mode", self.role) for name in self.scorers
                if self.llm_eval_sets and self.scores_options(name)]
        return uses + [("rem.compliance_scorers", self.role)
                       for name in self.compliance_scorers if self.scores_options(name)]

    @model_validator(mode="after")
    def _turns_for_selection(self) -> RemParams:
        if self.select_on == "turns_dev" and self.turns is None:
            raise ValueError("rem.select_on: turns_dev needs rem.turns")
        return self

    @property
    def select_split(self) -> str:
        """The annotations' split C and the default REM are chosen on."""
        return self.dev_split if self.select_on == "dev" else TURNS_DEV

    @field_validator("scorers")
    @classmethod
    def _some_scorers(cls, scorers: dict) -> dict:
        if not scorers:
            raise ValueError("list one or more REM scorers")
        return scorers

    @model_validator(mode="after")
    def _paired_against_known(self) -> RemParams:
        unknown = [s for s in self.paired_against if s not in self.scorers]
        if unknown:
            raise ValueError(f"paired_against names {unknown}, not in rem.scorers "
                             f"({sorted(self.scorers)})")
        return self

    @model_validator(mode="after")
    def _compliance_scorers_are_known(self) -> RemParams:
        unknown = [s for s in self.compliance_scorers if s not in self.scorers]
        if unknown or len(set(self.compliance_scorers)) != len(self.compliance_scorers):
            raise ValueError(f"compliance_scorers must name distinct entries of rem.scorers "
                             f"({sorted(self.scorers)}), got {self.compliance_scorers}")
        return self
