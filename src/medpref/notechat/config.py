"""Params of stage 02 (NoteChat): the ``notechat`` section of ``params.yaml``.

Every knob of the note → dialogue pipeline lives here: where the notes come from, which
QuickUMLS index extracts concepts, which ``shared.llm.roles`` play planner, doctor,
patient and polisher, the round limit, the polish passes and the single-prompt
baselines that give Table 3 its comparison rows.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from medpref.data.aci_bench import ACI_SPLITS
from medpref.data.mts_dialog import MTS_SPLITS
from medpref.llm.calls import CallParams, CallSlot, SectionCalls, default_calls
from medpref.llm.types import CallSpec
from medpref.params import RoleConfig, StrictModel
from medpref.stagekit import GuardParams


class QuickUMLSParams(StrictModel):
    """How QuickUMLS matches note text against the index (see its documentation)."""

    threshold: float = Field(0.8, gt=0.0, le=1.0)
    similarity: Literal["jaccard", "dice", "cosine", "overlap"] = "jaccard"
    window: int = Field(5, ge=1, le=10)
    min_match_length: int = Field(3, ge=1, le=20)
    #: TUIs to keep; None keeps every semantic type in the index.
    accepted_semtypes: list[str] | None = None


#: how each speaker's line starts: the answer prefix of every call that writes one
TURN_PREFIX = {"doctor": "Doctor:", "patient": "Patient:"}


#: the agent that makes each NoteChat call (its client is the call's role), and the
#: prompt-template key each call's prompt is loaded under (medpref.notechat.dialogues)
AGENT_OF = {"planning": "planner", "doctor_turn": "doctor", "patient_turn": "patient",
            "polish": "polisher"}
TEMPLATE_OF = {"planning": "planning", "doctor_turn": "doctor", "patient_turn": "patient",
               "polish": "polish", "baseline": "single_prompt"}



class BaselineSpec(StrictModel):
    """A single-prompt generator row of Table 3 (the paper's ChatGPT / GPT-4 rows).

    ``overrides`` change the role's model config for this row only (e.g.
    ``{backend: openai, model: gpt-4o}``), so a stronger model can stand in for GPT-4
    without touching ``shared``.
    """

    name: str = Field(min_length=1)
    role: str = "planner"
    overrides: dict[str, Any] = Field(default_factory=dict)

    @field_validator("overrides")
    @classmethod
    def _known_role_keys(cls, value: dict[str, Any]) -> dict[str, Any]:
        unknown = set(value) - set(RoleConfig.model_fields)
        if unknown:
            raise ValueError(f"unknown role config keys {sorted(unknown)} "
                             f"(known: {sorted(RoleConfig.model_fields)})")
        return value


def _default_baselines() -> list[BaselineSpec]:
    """The paper's two rows; both the embedded model until the second is pointed at a
    stronger one (they then differ only by their sampling seeds)."""
    return [BaselineSpec(name="single_prompt", role="planner"),
            BaselineSpec(name="single_prompt_strong", role="planner")]


class NoteChatParams(SectionCalls):
    SECTION: ClassVar[str] = "notechat"
    #: the planner's draft dialogue, from the doctor's first line; each role-play
    #: speaker's next turn; a window's rewrite, from the line of the speaker its first
    #: turn has; a single-prompt baseline's whole dialogue (each row's own role)
    CALLS: ClassVar[dict[str, CallSlot]] = {
        "planning": CallSlot(answer_prefix=TURN_PREFIX["doctor"]),
        "doctor_turn": CallSlot(answer_prefix=TURN_PREFIX["doctor"]),
        "patient_turn": CallSlot(answer_prefix=TURN_PREFIX["patient"]),
        "polish": CallSlot(prefix_from="the window's first speaker (Doctor: or Patient:)"),
        "baseline": CallSlot(role_from="notechat.baselines[].role",
                             answer_prefix=TURN_PREFIX["doctor"])}
    calls: dict[str, CallParams] = default_calls(
        planning=dict(role="planner", prompt="notechat_planning", max_new_tokens=128),
        doctor_turn=dict(role="doctor", prompt="notechat_doctor", max_new_tokens=48),
        patient_turn=dict(role="patient", prompt="notechat_patient", max_new_tokens=40),
        polish=dict(role="rethinker", prompt="notechat_polish", max_new_tokens=128),
        baseline=dict(prompt="notechat_single_prompt", max_new_tokens=192))

    # -- notes ---------------------------------------------------------------------------
    source: Literal["embedded", "mts_dialog", "aci_bench"] = "embedded"
    notes: str = "data/embedded/notes.jsonl"
    #: mts_dialog: train | validation | test1 | test2; aci_bench: train | valid | test1 |
    #: test2 | test3
    source_split: str = "train"
    #: real sets: the folder holding aci-bench/ and mts-dialog/ (relative to the repo unless
    #: absolute); None: $MEDPREF_SHARED_DATA, else ../shared/data
    source_root: str | None = None
    #: rows read from a real data set before sampling (None: all of the split)
    source_limit: int | None = Field(200, ge=1)
    n_notes: int = Field(6, ge=1, le=100_000)
    #: first: the first n_notes (by file order); random: a seeded sample
    sample: Literal["first", "random"] = "first"
    # -- concepts ------------------------------------------------------------------------
    lexicon: str = "data/embedded/lexicon"
    index: str = "data/02_notechat/quickumls_index"
    #: a full (licensed) UMLS QuickUMLS index folder, used instead of `index` when set
    umls_index: str | None = None
    stopwords: str = "configs/notechat/stopwords.txt"
    quickumls: QuickUMLSParams = Field(default_factory=QuickUMLSParams)
    # -- generation ----------------------------------------------------------------------
    rubric: str = "configs/notechat/polish_rules.yaml"
    soap_headings: str = "configs/notechat/soap_headings.yaml"
    #: decoding temperature of every generation call (the paper used 0.7); seeded
    temperature: float = Field(0.7, ge=0.0, le=2.0)
    #: concept keywords listed in the planning prompt (the rest stay in the checklist)
    max_plan_keywords: int = Field(24, ge=1, le=500)
    #: note concepts the draft never mentions are appended to the checklist
    checklist_keep_missing: bool = True
    max_rounds: int = Field(6, ge=1, le=100)
    #: rounds every segment plays even when its checklist is empty from the start
    min_rounds: int = Field(1, ge=0, le=100)
    keywords_per_turn: int = Field(2, ge=1, le=20)
    history_turns: int = Field(6, ge=0, le=200)
    max_turn_words: int = Field(60, ge=5, le=1000)
    #: a turn (5+ words) that copies this share of an earlier turn's word pairs is
    #: dropped as an echo (1.0: exact repeats only)
    max_copied_share: float = Field(0.6, gt=0.0, le=1.0)
    #: calls per role-play turn: a dropped (malformed) answer is asked again, new seed
    turn_attempts: int = Field(2, ge=1, le=5)
    polish_iterations: int = Field(1, ge=0, le=10)
    #: turns rewritten per polish call (0: the whole dialogue in one call)
    polish_window_turns: int = Field(4, ge=0, le=400)
    #: a polished window is kept only if it keeps this share of the window's turns
    polish_min_turn_ratio: float = Field(0.75, ge=0.0, le=2.0)
    #: notes longer than this (words) are split by SOAP section, generated per section
    #: and combined (the paper's MTS-Dialog procedure); 0 always splits
    long_note_words: int = Field(350, ge=0, le=100_000)
    # -- baselines -----------------------------------------------------------------------
    baselines: list[BaselineSpec] = Field(default_factory=_default_baselines)
    # -- evaluation ----------------------------------------------------------------------
    #: self-BLEU: hypotheses scored per corpus (seeded sample; None: every utterance)
    self_bleu_sample: int | None = Field(None, ge=2)
    #: hand-labelled generated turns (turn_quality_validation.LabelledTurn lines) to
    #: measure the turn-quality checks against; None: no validation table
    turn_quality_labels: str | None = "data/embedded/turn_quality_labels.jsonl"
    guard: GuardParams = Field(default_factory=GuardParams)

    @property
    def agent_roles(self) -> dict[str, str]:
        """NoteChat's four agents and the role each plays (its calls' role)."""
        return {agent: self.call(name).role for name, agent in AGENT_OF.items()}

    @property
    def template_names(self) -> dict[str, str]:
        """Each step's prompt template: key → name under configs/prompts."""
        return {key: self.call(name).prompt for name, key in TEMPLATE_OF.items()}

    @property
    def turn_calls(self) -> dict[str, CallSpec]:
        """Each role-play speaker's next turn."""
        return {"doctor": self.call("doctor_turn"), "patient": self.call("patient_turn")}

    @property
    def polish_calls(self) -> dict[str, CallSpec]:
        """A window's rewrite, from the line of the speaker its first turn has (doctor
        first: a batch shares its answer prefix)."""
        return {speaker: self.call("polish", answer_prefix=prefix)
                for speaker, prefix in TURN_PREFIX.items()}

    def baseline_call(self, b: BaselineSpec) -> CallSpec:
        """A single-prompt baseline's whole dialogue, from the doctor's first line."""
        return self.call("baseline", role=b.role)

    @model_validator(mode="after")
    def _consistent(self) -> NoteChatParams:
        if self.min_rounds > self.max_rounds:
            raise ValueError(f"min_rounds ({self.min_rounds}) > max_rounds ({self.max_rounds})")
        splits = {"mts_dialog": MTS_SPLITS, "aci_bench": ACI_SPLITS}.get(self.source, {})
        if splits and self.source_split not in splits:
            raise ValueError(f"source_split {self.source_split!r} is not a split of {self.source} "
                             f"(expected one of {list(splits)})")
        names = [b.name for b in self.baselines]
        if len(set(names)) != len(names) or {n.lower() for n in names} & {"notechat", "human"}:
            raise ValueError(f"baseline names must be distinct and not 'notechat'/'human' "
                             f"(got {names})")
        return self

    def index_dir(self) -> str:
        """The QuickUMLS index in use: the licensed one when given, else the built one."""
        return self.umls_index or self.index
