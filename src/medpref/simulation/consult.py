"""The SP test's consultations: doctor and simulated patient, in lock-step across cases.

Each round, every still-open case gets one doctor turn (one batch for all cases) and then
one patient turn (one batch, from the configured patient of
:mod:`medpref.simulation.patients`). A consultation ends when the patient writes the end
marker, when the round cap is reached, or when a call fails (recorded, never silently
dropped).

A doctor is anything with ``name``, ``kind``, ``model_id`` and ``turns(open, round)``:
a :class:`ModelDoctor` (a role, optionally with a LoRA adapter: one ``chat_many`` batch
per round, its decoding controls sent to its backend, ``stop_after_question`` keeping a
turn up to its first question), or a control of :mod:`medpref.simulation.controls` that
writes its turns from the case and the transcript with no model call.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import Field

from medpref.contracts import ConsultationRecord, SPCase, Turn
from medpref.llm import CallSpec, LLMClient
from medpref.params import StrictModel
from medpref.prompts import PromptTemplate

_DOCTOR_LABEL = re.compile(r"^\s*(?:doctor|医生|dr\.?)\s*[:：]\s*", re.IGNORECASE)
_PATIENT_START = re.compile(r"(?:^|\n|\s)(?:patient|患者|病人)\s*[:：]", re.IGNORECASE)


_FIRST_QUESTION = re.compile(r"^.*?[?？]", re.DOTALL)


def parse_doctor_answer(raw: str, stop_after_question: bool = False) -> str:
    """The doctor's turn from a raw completion: no speaker label, nothing of the
    patient's part the model may go on to write, and (``stop_after_question``) nothing
    after its first question (pure)."""
    text = _DOCTOR_LABEL.sub("", raw or "").strip()
    cut = _PATIENT_START.search(text)
    text = (text[:cut.start()] if cut else text).strip()
    if stop_after_question:
        first = _FIRST_QUESTION.match(text)
        text = first.group(0).strip() if first else text
    return text


def doctor_messages(template: PromptTemplate, turns: Sequence[Turn]) -> list[dict[str, str]]:
    """The doctor's chat: the prompt's system text, then patient turns as ``user`` (each
    through the prompt's user template) and doctor turns as ``assistant``; consecutive
    turns of one speaker are joined so roles alternate."""
    messages = [{"role": "system", "content": template.system.strip()}] if template.system.strip() \
        else []
    for t in turns:
        if t.role == "patient":
            role, content = "user", template.render(patient_turn=t.text)[-1]["content"]
        else:
            role, content = "assistant", t.text
        if messages and messages[-1]["role"] == role:
            messages[-1] = {"role": role, "content": f"{messages[-1]['content']}\n{content}"}
        else:
            messages.append({"role": role, "content": content})
    return messages


@dataclass
class Consultation:
    """One case's transcript under one doctor, with what produced each turn; its record
    (:meth:`record`, :class:`ConsultationRecord`) and back (:meth:`from_record`)."""

    case_id: str
    department: str
    lang: str
    doctor: str
    doctor_model: str
    turns: list[Turn]
    steps: list[dict[str, Any]] = field(default_factory=list)   # raw answers, retrieved chunks
    ended_by: str = "rounds"       # end_marker | rounds | doctor_failed | patient_failed
    error: str | None = None
    kind: str = "model"            # the doctor's kind: model | control

    @property
    def doctor_turns(self) -> list[str]:
        return [t.text for t in self.turns if t.role == "doctor"]

    @property
    def rounds(self) -> int:
        return len(self.doctor_turns)

    def record(self) -> dict[str, Any]:
        return {"case": self.case_id, "department": self.department, "lang": self.lang,
                "doctor": self.doctor, "kind": self.kind, "doctor_model": self.doctor_model,
                "rounds": self.rounds, "ended_by": self.ended_by, "error": self.error,
                "turns": [{"role": t.role, "text": t.text} for t in self.turns],
                "steps": self.steps}

    @classmethod
    def from_record(cls, row: dict[str, Any] | ConsultationRecord) -> Consultation:
        """The consultation of a record (validated as :class:`ConsultationRecord`)."""
        r = row if isinstance(row, ConsultationRecord) else ConsultationRecord.model_validate(row)
        return cls(r.case, r.department, r.lang, r.doctor, r.doctor_model,
                   [Turn(role=t.role, text=t.text) for t in r.turns], list(r.steps),
                   r.ended_by, r.error, r.kind)


class DoctorDecoding(StrictModel):
    """How the doctors under test decode in the SP test (per call, so it lives here; the
    budget is ``simulation.calls.consult.max_new_tokens``)."""

    temperature: float = Field(0.0, ge=0.0, le=2.0)   # paper: greedy
    repetition_penalty: float = Field(1.3, ge=1.0, le=3.0)   # 1.0: off
    no_repeat_ngram_size: int = Field(4, ge=0, le=20)        # 0: off
    stop_after_question: bool = True    # keep a doctor turn up to its first question

    @classmethod
    def plain(cls) -> DoctorDecoding:
        """Greedy with no loop control and the turn as written: how the next-turn and
        held-out calls decode, and a consultation that names no decoding."""
        return cls(repetition_penalty=1.0, no_repeat_ngram_size=0, stop_after_question=False)

    def overrides(self, seed: int) -> dict[str, Any]:
        """One doctor call's generation settings (a seed only when it samples)."""
        out: dict[str, Any] = {"temperature": self.temperature,
                               "repetition_penalty": self.repetition_penalty,
                               "no_repeat_ngram_size": self.no_repeat_ngram_size}
        if self.temperature > 0:
            out["seed"] = seed
        return out



@dataclass
class SimulationSetup:
    """Everything a consultation needs besides the doctor: the patient (any registered
    kind, :mod:`medpref.simulation.patients`) and the doctor's decoding."""

    patient: Any
    doctor_template: PromptTemplate
    rounds: int
    seed: int = 0
    #: ``simulation.doctor_decoding``; None: :meth:`DoctorDecoding.plain`
    decoding: DoctorDecoding | None = None


@dataclass
class DoctorTurn:
    """One doctor turn: its text, the raw completion behind it (a model), or the error."""

    text: str
    raw: str | None = None
    error: str | None = None


class Doctor(Protocol):
    name: str
    kind: str           # model | control
    model_id: str

    def turns(self, open_: Sequence[Consultation], round_no: int) -> list[DoctorTurn]:
        ...


@dataclass
class ModelDoctor:
    """A doctor under test that is a model: one ``chat_many`` batch per round."""

    name: str
    client: LLMClient
    call: CallSpec
    setup: SimulationSetup
    kind: str = "model"

    @property
    def model_id(self) -> str:
        return self.client.model_id

    def turns(self, open_: Sequence[Consultation], round_no: int) -> list[DoctorTurn]:
        setup = self.setup
        dd = setup.decoding or DoctorDecoding.plain()
        convs = [doctor_messages(setup.doctor_template, c.turns) for c in open_]
        return [DoctorTurn("", comp.text, comp.error) if comp.error else
                DoctorTurn(parse_doctor_answer(comp.text, dd.stop_after_question), comp.text)
                for comp in self.client.chat_many(convs, self.call,
                                                  **dd.overrides(setup.seed + round_no))]


def _doctor_round(open_: list[Consultation], doctor: Doctor, round_no: int) -> None:
    for c, turn in zip(open_, doctor.turns(open_, round_no)):
        if turn.error:
            c.ended_by, c.error = "doctor_failed", turn.error
            continue
        c.turns.append(Turn(role="doctor", text=turn.text))
        c.steps.append({"round": round_no, "speaker": "doctor", "raw": turn.raw})


def _patient_round(open_: list[Consultation], setup: SimulationSetup, round_no: int) -> None:
    for c, reply in zip(open_, setup.patient.reply(open_)):
        if reply.error:
            c.ended_by, c.error = "patient_failed", reply.error
            continue
        c.turns.append(Turn(role="patient", text=reply.text))
        c.steps.append({"round": round_no, "speaker": "patient", **reply.step,
                        "ended": reply.ended, "empty": reply.empty})
        if reply.ended:
            c.ended_by = "end_marker"


def simulate(cases: Sequence[SPCase], doctor: Doctor, setup: SimulationSetup
             ) -> list[Consultation]:
    """Run every case's consultation with this doctor, round by round in lock-step.

    The patient opens with its chief complaint; then each round is one doctor turn and
    one patient turn, at most ``setup.rounds`` rounds.
    """
    consults = [Consultation(c.id, c.department, c.lang, doctor.name, doctor.model_id,
                             [Turn(role="patient", text=c.chief_complaint)], kind=doctor.kind)
                for c in cases]
    done: set[int] = set()
    for round_no in range(1, setup.rounds + 1):
        open_ = [c for i, c in enumerate(consults) if i not in done]
        if not open_:
            break
        _doctor_round(open_, doctor, round_no)
        talking = [c for c in open_ if c.ended_by == "rounds"]
        if talking:
            _patient_round(talking, setup, round_no)
        done |= {i for i, c in enumerate(consults) if c.ended_by != "rounds"}
    return consults
