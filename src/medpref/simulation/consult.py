"""The SP test's consultations: doctor and simulated patient, in lock-step across cases.

Each round, every still-open case gets one doctor turn (one ``chat_many`` batch for all
cases) and then one patient turn (one batch): retrieval query from the last rounds, top
chunks, the patient prompt. A consultation ends when the patient writes the end marker,
when the round cap is reached, or when a call fails (recorded, never silently dropped).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from medpref.contracts import SPCase, Turn
from medpref.llm import LLMClient
from medpref.prompts import PromptTemplate
from medpref.simulation.knowledge import Encoder, KnowledgeBase, retrieval_query
from medpref.simulation.patient import parse_patient_answer, render_patient_prompt

_DOCTOR_LABEL = re.compile(r"^\s*(?:doctor|医生|dr\.?)\s*[:：]\s*", re.IGNORECASE)
_PATIENT_START = re.compile(r"(?:^|\n|\s)(?:patient|患者|病人)\s*[:：]", re.IGNORECASE)


def parse_doctor_answer(raw: str) -> str:
    """The doctor's turn from a raw completion: no speaker label, nothing of the
    patient's part the model may go on to write (pure)."""
    text = _DOCTOR_LABEL.sub("", raw or "").strip()
    cut = _PATIENT_START.search(text)
    return (text[:cut.start()] if cut else text).strip()


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
    """One case's transcript under one doctor, with what produced each turn."""

    case_id: str
    department: str
    lang: str
    doctor: str
    doctor_model: str
    turns: list[Turn]
    steps: list[dict[str, Any]] = field(default_factory=list)   # raw answers, retrieved chunks
    ended_by: str = "rounds"       # end_marker | rounds | doctor_failed | patient_failed
    error: str | None = None

    @property
    def doctor_turns(self) -> list[str]:
        return [t.text for t in self.turns if t.role == "doctor"]

    @property
    def rounds(self) -> int:
        return len(self.doctor_turns)

    def record(self) -> dict[str, Any]:
        return {"case": self.case_id, "department": self.department, "lang": self.lang,
                "doctor": self.doctor, "doctor_model": self.doctor_model,
                "rounds": self.rounds, "ended_by": self.ended_by, "error": self.error,
                "turns": [{"role": t.role, "text": t.text} for t in self.turns],
                "steps": self.steps}


@dataclass
class SimulationSetup:
    """Everything a consultation needs besides the doctor."""

    patient: LLMClient
    patient_template: PromptTemplate
    doctor_template: PromptTemplate
    kbs: dict[str, KnowledgeBase]
    encode: Encoder
    rounds: int
    top_k: int
    query_rounds: int
    end_marker: str
    max_sentences: int | None
    patient_max_new_tokens: int
    doctor_max_new_tokens: int
    doctor_temperature: float = 0.0
    seed: int = 0


def _doctor_round(open_: list[Consultation], doctor: LLMClient, setup: SimulationSetup,
                  round_no: int) -> None:
    convs = [doctor_messages(setup.doctor_template, c.turns) for c in open_]
    overrides: dict[str, Any] = {"max_new_tokens": setup.doctor_max_new_tokens,
                                 "temperature": setup.doctor_temperature}
    if setup.doctor_temperature > 0:
        overrides["seed"] = setup.seed + round_no
    for c, comp in zip(open_, doctor.chat_many(convs, **overrides)):
        if comp.error:
            c.ended_by, c.error = "doctor_failed", comp.error
            continue
        c.turns.append(Turn(role="doctor", text=parse_doctor_answer(comp.text)))
        c.steps.append({"round": round_no, "speaker": "doctor", "raw": comp.text})


def _patient_round(open_: list[Consultation], setup: SimulationSetup, round_no: int) -> None:
    queries = [retrieval_query(c.turns, setup.query_rounds) for c in open_]
    qvecs = setup.encode(queries)
    prompts, retrieved = [], []
    for c, qv in zip(open_, qvecs):
        kb = setup.kbs[c.case_id]
        top = kb.top(qv, setup.top_k)
        retrieved.append(top)
        prompts.append(render_patient_prompt(setup.patient_template, [kb.chunks[i] for i in top],
                                             c.turns[:-1], c.turns[-1].text, setup.end_marker))
    comps = setup.patient.chat_many(prompts, max_new_tokens=setup.patient_max_new_tokens)
    for c, comp, top, q in zip(open_, comps, retrieved, queries):
        if comp.error:
            c.ended_by, c.error = "patient_failed", comp.error
            continue
        ans = parse_patient_answer(comp.text, setup.end_marker, setup.max_sentences)
        c.turns.append(Turn(role="patient", text=ans.text))
        c.steps.append({"round": round_no, "speaker": "patient", "raw": comp.text,
                        "query": q, "chunks": top, "ended": ans.ended, "empty": ans.empty})
        if ans.ended:
            c.ended_by = "end_marker"


def simulate(cases: Sequence[SPCase], doctor: LLMClient, doctor_name: str,
             setup: SimulationSetup) -> list[Consultation]:
    """Run every case's consultation with this doctor, round by round in lock-step.

    The patient opens with its chief complaint; then each round is one doctor turn and
    one patient turn, at most ``setup.rounds`` rounds.
    """
    consults = [Consultation(c.id, c.department, c.lang, doctor_name, doctor.model_id,
                             [Turn(role="patient", text=c.chief_complaint)]) for c in cases]
    done: set[int] = set()
    for round_no in range(1, setup.rounds + 1):
        open_ = [c for i, c in enumerate(consults) if i not in done]
        if not open_:
            break
        _doctor_round(open_, doctor, setup, round_no)
        talking = [c for c in open_ if c.ended_by == "rounds"]
        if talking:
            _patient_round(talking, setup, round_no)
        done |= {i for i, c in enumerate(consults) if c.ended_by != "rounds"}
    return consults
