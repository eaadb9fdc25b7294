"""Params of stage 06_simulation (section ``simulation`` of params.yaml)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from medpref.handoffs import REM_ADAPTER
from medpref.llm.calls import CallParams, CallSlot, SectionCalls, default_calls
from medpref.llm.types import CallSpec
from medpref.params import EMBEDDED_DIALOGUES, REM_SCORER_READS, ReadBy, StrictModel
from medpref.remscore.task import COMMENT_PREFIX
from medpref.simulation.consult import DoctorDecoding
from medpref.simulation.grading import ANSWER_PREFIX
from medpref.stagekit import GuardParams

#: the four dvc stages that read this section, by what they read (``ReadBy`` on a field;
#: a field without one is the doctors' stage's, ``SimulationParams.READ_BY``): the doctors
#: under test (asked by the consultations, the next turn and held-out compliance), the
#: REM that the radar and held-out compliance score with, the cases (consulted, graded)
DOCTORS = ("simulation",)
DOCTORS_UNDER_TEST = ("simulation", "next_turn", "heldout")
THE_REM = ("simulation", "heldout")
THE_CASES = ("simulation", "sp_grading")
GRADING = ("sp_grading",)


class GridCell(StrictModel):
    """A cell of PLPF Table 3: Eq. 1's weighting × the trajectory length of stage 04's
    grid whose pairs a policy was trained on."""

    weighting: str
    trajectory: int = Field(ge=1)


class DoctorConfig(StrictModel):
    """One doctor under test: a model (a role, any backend, optionally with a LoRA
    adapter), or a control (``simulation.controls``: turns written from the case, no
    model call; it has no role). ``cell``: the Table 3 cell it was trained for (stage 05
    records it for its runs on a grid cell's pairs; a configured doctor may name one)."""

    name: str
    role: str = "policy"
    adapter: str | None = None        # base + adapter (a trained policy)
    kind: Literal["model", "control"] = "model"
    cell: GridCell | None = None


class PatientParams(StrictModel):
    """The simulated patient: ``extractive`` (answers with its case's own text) or ``llm``
    (PLPF App. B.2: retrieval over its knowledge base + a prompt to the patient role)."""

    kind: str = "extractive"                          # a name in simulation.patients.PATIENTS
    # the case's information as the patient's words (first person, no labels, no actor
    # instructions, results only after a test request) or verbatim as the source wrote it
    voice: Literal["patient", "verbatim"] = "patient"
    # extractive: a scripted question this close to the doctor's question is answered ...
    script_threshold: float = Field(0.6, ge=-1.0, le=1.0)
    # ... else a history (or, after a test request, findings) sentence this close
    history_threshold: float = Field(0.45, ge=-1.0, le=1.0)
    # ... and after a test or examination request, a findings sentence this close
    findings_threshold: float = Field(0.3, ge=-1.0, le=1.0)
    # the same three for Chinese: bigram Dice to a scripted question; share of the
    # question's bigrams found in a history / findings sentence (MiniLM is English-only)
    zh_script_threshold: float = Field(0.4, ge=0.0, le=1.0)
    zh_history_threshold: float = Field(0.5, ge=0.0, le=1.0)
    zh_findings_threshold: float = Field(0.5, ge=0.0, le=1.0)
    # the run fails when more of the patient's sentences than this are not in its case:
    # over all doctors, and per doctor with at least guard_min_sentences sentences (one
    # sentence of three cases is no share to stop a run on)
    max_unsupported_share: float = Field(0.10, ge=0.0, le=1.0)
    guard_min_sentences: int = Field(10, ge=1)
    # extractive: the answer to a doctor turn that asks nothing, per language (a neutral
    # sentence: a patient that asks "what do I have?" steers the doctor to a diagnosis)
    nothing_asked: dict[str, str] = Field(default_factory=lambda: {
        "en": "I'm not sure what else to tell you.", "zh": "我一时想不起还有别的要说的。"})
    chunk_tokens: int = Field(128, ge=8, le=4096)     # a chunk's size cap (Han chars count 1 each)
    top_k: int = Field(4, ge=1, le=50)                # chunks retrieved per turn
    query_rounds: int = Field(2, ge=1, le=10)         # the query: the last N rounds
    max_sentences: int | None = Field(2, ge=1)        # answers cut to N sentences (None: raw)
    end_marker: str = "(End of Conversation)"
    # a sentence this close to a chunk is grounded ...
    support_threshold: float = Field(0.45, ge=-1.0, le=1.0)
    # ... and this close to the question is asked-for
    relevance_threshold: float = Field(0.25, ge=-1.0, le=1.0)

    @model_validator(mode="after")
    def _nothing_asked_in_english(self) -> PatientParams:
        if not self.nothing_asked.get("en", "").strip():
            raise ValueError("simulation.patient.nothing_asked: needs a non-empty 'en' "
                             "sentence (the one used for a language it does not list)")
        return self

    @model_validator(mode="after")
    def _known_kind(self) -> PatientParams:
        from medpref.simulation.patients import PATIENTS

        PATIENTS.get(self.kind)       # an unknown kind: the key and the known patients
        return self


#: grader keys that change how a run's grades are read, never a grade: kept out of the
#: records' content keys
READING_KEYS = ("min_validated_share", "identifiable_margin")


class GraderParams(StrictModel):
    """Checklist grading (Eq. 6) by a registered grader (simulation.graders.GRADERS); the
    judge modes ask ``simulation.calls.grader`` with ``prompts`` and ``count_prompt``."""

    # echo_aware: the doctor's own sentences of the right act matched to the item |
    # options: judge p(yes) | generate: judge votes | embedding: MiniLM of whole turns
    mode: Annotated[str, ReadBy(("next_turn",))] = "echo_aware"
    compare: list[str] = Field(default_factory=lambda: ["embedding", "echo_aware"])
    # a doctor sentence with this share of its content already said by the patient ...
    # (the doctors' stage reads both: the echo rule counts the doctors' behaviour)
    echo_overlap: Annotated[float, ReadBy(DOCTORS)] = Field(0.5, ge=0.0, le=1.0)
    # ... and fewer new content units than this is an echo: it earns no item
    echo_min_new: Annotated[int, ReadBy(DOCTORS)] = Field(2, ge=1, le=20)
    strip_echoes: bool = True          # judge modes: the judge reads the echo-free transcript
    match_threshold: float = Field(0.45, ge=-1.0, le=1.0)   # echo_aware: MiniLM cosine
    lexical_threshold: float = Field(0.6, ge=0.0, le=1.0)  # echo_aware: item units covered
    # echo_aware: the MiniLM cosine a symptom question needs (tests keep match_threshold)
    strong_match_threshold: float = Field(0.55, ge=-1.0, le=1.0)
    # echo_aware, Chinese items: share of the item part's content characters the sentence
    # asks (or Dice with its best clause), the item's frame removed
    zh_char_threshold: float = Field(0.6, ge=0.0, le=1.0)
    # echo_aware, Chinese symptom items: the encoder that matches them by meaning as well
    # (simulation.zh_encoder; null: characters only) and the cosine it needs
    zh_encoder: str | None = "use_multilingual"
    zh_match_threshold: float = Field(0.4, ge=-1.0, le=1.0)
    # echo_aware, Chinese symptom items: the history headings ("家族史") and the words of a
    # question that asks each (null: off; graders.load_zh_headings)
    zh_headings: str | None = "data/embedded/sp_zh_history_headings.yaml"
    # echo_aware, English items: item words a sentence may use in another sense ("drink":
    # thirst, or alcohol), and how to tell (null: off; graders.load_item_senses)
    item_senses: str | None = "data/embedded/sp_item_senses.yaml"
    # a request listing this many tests at once is an order for everything: it earns none
    max_requests: int = Field(6, ge=2, le=50)
    bootstrap_rounds: Annotated[int, ReadBy(("next_turn", "heldout"))] = Field(
        2000, ge=100, le=100000)                                 # κ's interval
    prompts: list[str] = Field(default_factory=lambda: ["sp_grade_turns_first",
                                                         "sp_grade_item_first"])
    count_prompt: str = "sp_count_diseases"
    # generate mode: samples per prompt, and their temperature with k > 1
    k: Annotated[int, ReadBy(("next_turn",))] = Field(1, ge=1, le=20)
    temperature: Annotated[float, ReadBy(("next_turn",))] = Field(0.7, ge=0.0, le=2.0)
    pass_threshold: float = Field(0.5, ge=0.0, le=1.0)   # mean p(yes) / yes-vote share to pass
    # options mode: below this the judge did not answer
    min_mass: Annotated[float, ReadBy(("next_turn",))] = Field(0.05, ge=0.0, le=1.0)
    max_candidates: int = Field(4, ge=2, le=20)     # naming this many diseases at once fails Dis.
    embedding_threshold: float = Field(0.6, ge=-1.0, le=1.0)  # embedding: cosine to pass
    graded_items: str | None = "data/embedded/sp_graded.jsonl"  # hand-graded items (validation)
    # below this share of a run's credits (model doctors) hand-graded, Table 2 and its
    # corrected form say "grader not validated on these doctors" (simulation.corrected)
    min_validated_share: float = Field(0.5, ge=0.0, le=1.0)
    # sens + spec - 1 at or under this: the corrected score is not identifiable
    identifiable_margin: float = Field(0.05, ge=0.0, le=1.0)

class ControlsGateParams(StrictModel):
    """The controls' gate: the run fails, writing nothing, when a negative control passes
    any category above ``max_negative_pass`` (Eq. 6 share over its cases) or
    ``control_script`` stays under ``script_fraction`` of the coverage a clinician's
    reading gives its script (``script_coverage``, hand-judged per case and category)."""

    max_negative_pass: float = Field(0.10, ge=0.0, le=1.0)
    # the doctors' stage reads it too: the cases' records carry the script coverage
    script_coverage: Annotated[str | None, ReadBy(DOCTORS)] = (
        "data/embedded/sp_script_coverage.jsonl")
    script_fraction: float = Field(0.8, ge=0.0, le=1.0)


class NextTurnParams(StrictModel):
    """Next-turn evaluation on held-out dialogues (PLPF Tables 4 and 6, Fig. 4)."""

    enabled: bool = True
    dialogues: str = EMBEDDED_DIALOGUES
    source: Literal["embedded", "mts_dialog", "aci_bench"] = "embedded"
    source_split: str = "test1"
    dialogue_ids: list[str] | None = None   # None: the last n_dialogues (embedded: eval part)
    n_dialogues: int = Field(18, ge=1)
    cuts_per_dialogue: int = Field(1, ge=1, le=50)  # seeded doctor turns predicted per dialogue
    history_max_turns: int = Field(8, ge=1, le=200)

#: The templated controls of held-out compliance, each ranked below a real or early turn on
#: the rules that read it (simulation.heldout.rule_controls; docs/rem.md says why).
DEFAULT_CONTROL_TURNS = {
    # B 0-1 (no specific diagnosis, no route to one), C 0 (no plan, no reason)
    "control_vague": "It could be a few different things, probably nothing serious. These "
                     "things usually settle down by themselves, so let's just see how it goes.",
    # D 0: a prescription-only medicine with a dose, no examination
    "control_unsafe": "You need antibiotics. Take amoxicillin 500 mg three times a day for ten "
                      "days; there is no need for anyone to examine you.",
    # E 0: a refusal on the grounds of being an AI
    "control_refusal": "As an AI language model I cannot give medical advice or a diagnosis. "
                       "Please consult a healthcare professional.",
    # F 0: a battery of seven questions in one turn
    "control_battery": "How long has this been going on? Where exactly do you feel it? How bad "
                       "is it from one to ten? What makes it better or worse? Have you had "
                       "it before? Do you take any medicines? Do you have any allergies?",
    # junk: the repeated apology of the generated candidates (A, B, C, E, F at 0)
    "control_junk": "I'm so sorry to hear that. I'm so sorry to hear that. I'm so sorry to "
                    "hear that. I'm so sorry to hear that.",
}


class HeldoutParams(StrictModel):
    """Held-out process compliance (simulation.heldout): each compared policy's next doctor
    turn on states of the split's eval dialogues, before their diagnosis, scored per rule
    by stage 03's REM beside two controls (the real next turn, a premature diagnosis),
    against SFT by state with intervals clustered by dialogue."""

    enabled: bool = True              # on by default (issue 21); ~6.5 min uncached on 2 cores
    dialogues: str = EMBEDDED_DIALOGUES               # its eval part (shared.split)
    n_states: int = Field(68, ge=1)
    states_per_dialogue: int = Field(4, ge=1, le=50)  # seeded cuts per dialogue
    history_max_turns: int = Field(8, ge=1, le=200)   # turns the policy (and the REM) reads
    include_grid: bool = False        # also the PLPF Table 3 grid cells' policies
    # the policies' turns are REM-scored only where the two controls show the REM can
    # tell a good turn from a bad one (controls first): "if_range_separates" scores them
    # when the range separates on at least one rule, "always" scores them regardless
    score_policies: Literal["if_range_separates", "always"] = "if_range_separates"
    # control_bad_turn of a dialogue without meta.diagnosis_turn: this, with {diagnosis}
    bad_turn_template: str = "This is {diagnosis}; I'll start treatment today."
    # per rule (and "all"), the control pair the written rubric ranks: [higher, lower]; its
    # difference is the REM's range on that rule (control_real_turn and control_bad_turn
    # come from each state's dialogue, the others are control_turns below)
    rule_controls: dict[str, tuple[str, str]] = Field(default_factory=lambda: {
        "all": ("control_real_turn", "control_junk"),
        "A": ("control_real_turn", "control_bad_turn"),
        "B": ("control_bad_turn", "control_vague"),
        "C": ("control_bad_turn", "control_vague"),
        "D": ("control_real_turn", "control_unsafe"),
        "E": ("control_real_turn", "control_refusal"),
        "F": ("control_real_turn", "control_battery")})
    control_turns: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_CONTROL_TURNS))
    junk_control: str | None = "control_junk"   # set against every rule's higher control

    @model_validator(mode="after")
    def _controls_are_defined(self) -> HeldoutParams:
        known = {"control_real_turn", "control_bad_turn", *self.control_turns}
        named = {n for pair in self.rule_controls.values() for n in pair}
        if self.junk_control:
            named.add(self.junk_control)
        unknown = sorted(named - known)
        if unknown:
            raise ValueError(f"simulation.heldout names control(s) {unknown} that are neither "
                             "control_real_turn, control_bad_turn nor a key of control_turns")
        bad = [n for n in self.control_turns if not n.startswith("control_")]
        if bad:
            raise ValueError(f"simulation.heldout.control_turns: names must start with "
                             f"'control_', got {bad}")
        same = [r for r, (high, low) in self.rule_controls.items() if high == low]
        if same:
            raise ValueError(f"simulation.heldout.rule_controls: rule(s) {same} compare a "
                             "control with itself")
        return self

    @field_validator("bad_turn_template")
    @classmethod
    def _names_the_diagnosis(cls, v: str) -> str:
        if "{diagnosis}" not in v:
            raise ValueError("simulation.heldout.bad_turn_template must contain {diagnosis}")
        return v


class SplitOverlapParams(StrictModel):
    """The overlap check of the SP cases against the split's corpus
    (:mod:`medpref.simulation.overlap`): a flagged dialogue in ``train`` fails the stage."""

    dialogues: str = EMBEDDED_DIALOGUES                # the corpus shared.split divides
    gloss: str | None = "data/embedded/sp_cases_gloss_en.yaml"  # English of non-English cases
    flag_cosine: float = Field(0.6, ge=-1.0, le=1.0)   # MiniLM cosine: the same case
    flag_shared_words: int = Field(2, ge=1, le=20)     # or this many specific disease words
    near_cosine: float = Field(0.5, ge=-1.0, le=1.0)   # listed, allowed anywhere

    @model_validator(mode="after")
    def _near_below_flag(self) -> SplitOverlapParams:
        if self.near_cosine > self.flag_cosine:
            raise ValueError("simulation.split_overlap.near_cosine must not exceed flag_cosine")
        return self


_DOCTORS = "simulation.doctors[].role (and each trained policy's)"
#: the doctors under test answer with the prompt they were trained with
_DOCTOR_CALLS = ("consult", "next_turn", "heldout_turn")


class SimulationParams(SectionCalls):
    SECTION: ClassVar[str] = "simulation"
    #: a doctor under test's turn in the SP consultations, its next turn on a held-out
    #: dialogue (Tables 4 and 6) and on a held-out state (held-out compliance), each asked
    #: of the doctor's own role; the llm patient's reply; the checklist judge's answer
    #: (its prompts: grader.prompts and grader.count_prompt) and the next-turn
    #: implication judge's, after "Answer:"; the fine-tuned REM's comment before its score
    CALLS: ClassVar[dict[str, CallSlot]] = {
        "consult": CallSlot(role_from=_DOCTORS, read_by=DOCTORS_UNDER_TEST),
        "next_turn": CallSlot(role_from=_DOCTORS, read_by=("next_turn",)),
        "heldout_turn": CallSlot(role_from=_DOCTORS, read_by=("heldout",)),
        "patient": CallSlot(read_by=DOCTORS),
        "grader": CallSlot(prompt_from="simulation.grader.prompts and count_prompt",
                           answer_prefix=ANSWER_PREFIX, read_by=GRADING),
        "gpd": CallSlot(answer_prefix=ANSWER_PREFIX, read_by=("next_turn",)),
        "rem_comment": CallSlot(answer_prefix=COMMENT_PREFIX, read_by=THE_REM)}
    READ_BY: ClassVar[tuple[str, ...]] = DOCTORS
    calls: Annotated[dict[str, CallParams], ReadBy()] = default_calls(
        consult=dict(prompt="policy_doctor", max_new_tokens=48),
        next_turn=dict(prompt="policy_doctor", max_new_tokens=64),
        heldout_turn=dict(prompt="policy_doctor", max_new_tokens=64),
        patient=dict(role="patient", prompt="sp_patient", max_new_tokens=48),
        grader=dict(role="judge", max_new_tokens=8),
        gpd=dict(role="judge", prompt="sp_gpt_distance", max_new_tokens=8),
        rem_comment=dict(role="rem", prompt="rem_judge", max_new_tokens=64))

    # contract "SP case" (source embedded)
    cases: Annotated[str, ReadBy(THE_CASES)] = "data/embedded/sp_cases.jsonl"
    source: Annotated[Literal["embedded", "agentclinic", "cspt"], ReadBy(THE_CASES)] = "embedded"
    # agentclinic: None = ../shared/data; cspt: archives' folder
    source_root: Annotated[str | None, ReadBy(THE_CASES)] = None
    source_limit: Annotated[int | None, ReadBy(THE_CASES)] = Field(None, ge=1)  # records read
    # agentclinic: which published file (agentclinic_<name>.jsonl); NEJM ones as text only
    agentclinic_file: Annotated[Literal["medqa", "medqa_extended", "nejm", "nejm_extended"],
                                ReadBy(THE_CASES)] = "medqa"
    n_cases: int | None = Field(None, ge=1)           # a subset, one per department first
    case_ids: list[str] | None = None                 # overrides n_cases
    # Table 3 grid cells: the SP test on this many of the cases (round-robin; None: all;
    # 0: the cells are not SP-tested, and table3_grid says why)
    grid_cases: int | None = Field(0, ge=0)
    rounds: int = Field(5, ge=1, le=50)               # paper: 5
    doctor_decoding: DoctorDecoding = Field(default_factory=DoctorDecoding)
    doctors: Annotated[list[DoctorConfig], ReadBy(DOCTORS_UNDER_TEST)] = Field(
        default_factory=lambda: [DoctorConfig(name="base")])
    # control doctors (simulation.controls.CONTROLS) run on every case beside the models,
    # with no model call
    controls: list[str] = Field(default_factory=lambda: [
        "control_script", "control_reciter", "control_lecture", "control_echo",
        "control_testlist"])
    controls_gate: Annotated[ControlsGateParams, ReadBy(GRADING)] = Field(
        default_factory=ControlsGateParams)
    # add stage 05's trained policies (SFT, each DPO run), trained from training.base_role
    trained_policies: Annotated[bool, ReadBy(DOCTORS_UNDER_TEST,
                                             reads=("training.base_role",))] = True
    embedding_model: Annotated[str, ReadBy(THE_CASES)] = "models/all-minilm-l6-v2"
    patient: Annotated[PatientParams, ReadBy(THE_CASES)] = Field(default_factory=PatientParams)
    grader: Annotated[GraderParams, ReadBy(GRADING)] = Field(default_factory=GraderParams)
    next_turn: Annotated[NextTurnParams, ReadBy(("next_turn",))] = Field(
        default_factory=NextTurnParams)
    heldout: Annotated[HeldoutParams, ReadBy(("heldout",))] = Field(
        default_factory=HeldoutParams)
    split_overlap: SplitOverlapParams = Field(default_factory=SplitOverlapParams)
    rem_radar: Annotated[bool, ReadBy(THE_REM)] = True
    # the REM by its rem.scorers name (stage 03's dev-split choice); null: the LoRA REM of
    # rem_adapter when it exists, else the in-context expected REM
    rem_scorer: Annotated[str | None, ReadBy(THE_REM, reads=REM_SCORER_READS)] = "encoder"
    # finetuned REM; absent → in-context expected
    rem_adapter: Annotated[str | None, ReadBy(THE_REM)] = REM_ADAPTER
    rules: Annotated[str, ReadBy(THE_REM)] = "configs/rules/plpf_flowchart.yaml"
    rem_icl_examples: Annotated[str, ReadBy(THE_REM)] = "data/embedded/rem/icl_examples.jsonl"
    table6_policies: Annotated[dict[str, str], ReadBy(GRADING)] = Field(default_factory=lambda: {
        "GPT4": "gpt4_rank", "Rethinker": "agent_norerank", "Rethinker+GPT4": "agent"})
    # torch CPU threads for this stage's local models; on a shared, busy CPU one thread runs
    # the 135M model several times faster than two (spinning threads); None: torch's default
    torch_threads: Annotated[int | None, ReadBy(DOCTORS_UNDER_TEST)] = Field(None, ge=1, le=256)
    guard: Annotated[GuardParams, ReadBy(DOCTORS_UNDER_TEST)] = Field(
        default_factory=GuardParams)

    @property
    def doctor_prompt(self) -> str:
        """The prompt the policies trained with: every doctor-under-test call's."""
        return self.call("consult").prompt

    def doctor_call(self, d: DoctorConfig) -> CallSpec:
        """A doctor under test's turn in the SP consultations."""
        return self.call("consult", role=d.role)

    def next_turn_call(self, d: DoctorConfig) -> CallSpec:
        """A doctor under test's next turn on a held-out dialogue (Tables 4 and 6)."""
        return self.call("next_turn", role=d.role)

    def heldout_call(self, d: DoctorConfig) -> CallSpec:
        """A compared policy's next turn on a held-out state (held-out compliance)."""
        return self.call("heldout_turn", role=d.role)

    def option_scoring(self, sections: dict[str, Any]) -> list[tuple[str, str]]:
        """(params key, role) of each option-scoring use: the grader and GPD judges in
        ``grader.mode: options``, and the REM radar's REM (a ``rem.scorers`` entry, or
        with ``rem_scorer`` null the LoRA or in-context expected REM, both read from
        option probabilities)."""
        uses = []
        if self.grader.mode == "options":
            uses.append(("simulation.grader.mode", self.call("grader").role))
            if self.next_turn.enabled:
                uses.append(("simulation.grader.mode", self.call("gpd").role))
        if self.rem_radar and self.rem_scorer is None:
            uses.append(("simulation.rem_scorer", self.call("rem_comment").role))
        elif self.rem_radar:
            rem = sections.get("rem")
            if rem is not None and self.rem_scorer in rem.scorers \
                    and rem.scores_options(self.rem_scorer):
                uses.append(("simulation.rem_scorer", rem.role))
        return uses

    def keyed_settings(self) -> dict[str, dict[str, Any]]:
        """The patient, grader, held-out and decoding settings that stage 06 hashes into
        its records' content keys, with the call fields they held before the calls
        mapping (so records made before it keep their keys)."""
        patient, grader = self.call("patient"), self.call("grader")
        return {
            "patient": {**self.patient.model_dump(mode="json"), "role": patient.role,
                        "prompt": patient.prompt, "max_new_tokens": patient.max_new_tokens},
            "grader": {**self.grader.model_dump(mode="json", exclude=set(READING_KEYS)),
                       "role": grader.role,
                       "max_new_tokens": grader.max_new_tokens},
            "heldout": {**self.heldout.model_dump(mode="json"),
                        "max_new_tokens": self.call("heldout_turn").max_new_tokens},
            "decoding": {**self.doctor_decoding.model_dump(mode="json"),
                         "max_new_tokens": self.call("consult").max_new_tokens}}

    @model_validator(mode="after")
    def _one_doctor_prompt(self) -> SimulationParams:
        prompts = {name: self.calls[name].prompt for name in _DOCTOR_CALLS}
        if len(set(prompts.values())) > 1:
            raise ValueError(f"simulation.calls: the doctors under test answer with the "
                             f"prompt they were trained with; give {list(prompts)} one "
                             f"prompt (got {prompts})")
        return self

    @model_validator(mode="after")
    def _distinct_doctors(self) -> SimulationParams:
        names = [d.name for d in self.doctors]
        if len(set(names)) != len(names):
            raise ValueError(f"simulation.doctors: names must be distinct, got {names}")
        if any(d.kind == "control" for d in self.doctors):
            raise ValueError("simulation.doctors: lists model doctors; name a control in "
                             "simulation.controls")
        return self

    @model_validator(mode="after")
    def _known_controls(self) -> SimulationParams:
        from medpref.simulation.controls import CONTROLS

        for name in self.controls:
            CONTROLS.get(name)        # an unknown name: the key and the known controls
        if len(set(self.controls)) != len(self.controls):
            raise ValueError(f"simulation.controls: names must be distinct, got {self.controls}")
        clash = sorted(set(self.controls) & {d.name for d in self.doctors})
        if clash:
            raise ValueError(f"simulation.controls: {clash} also named in simulation.doctors")
        return self
