"""The ``sampling`` params section (stage 01)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from medpref.llm.calls import CallParams, CallSlot, SectionCalls, default_calls
from medpref.llm.types import CallSpec
from medpref.params import EMBEDDED_DIALOGUES, StrictModel
from medpref.sampling.rounds import PREFIX
from medpref.stagekit import GuardParams


class RoundsParams(StrictModel):
    """Round-by-round completion of generated futures (:mod:`medpref.sampling.rounds`)."""

    enabled: bool = True            # false: the one-shot continuation only (short ones reported)
    retries: int = Field(3, ge=0, le=8)           # an unreadable turn is asked again, sampled
    retry_temperature: float = Field(1.0, gt=0.0, le=2.0)
    max_copied_share: float = Field(0.6, gt=0.0, le=1.0)  # echo of an earlier turn: unreadable

class SamplingParams(SectionCalls):
    SECTION: ClassVar[str] = "sampling"
    #: the one-shot continuation (the doctor's reply and the future, from "Doctor:") and
    #: each speaker's next turn of round-by-round completion
    CALLS: ClassVar[dict[str, CallSlot]] = {
        "continuation": CallSlot(answer_prefix="Doctor:"),
        "patient_turn": CallSlot(answer_prefix=PREFIX["patient"]),
        "doctor_turn": CallSlot(answer_prefix=PREFIX["doctor"])}
    calls: dict[str, CallParams] = default_calls(
        continuation=dict(role="annotator", prompt="trajectory_continuation", max_new_tokens=160),
        patient_turn=dict(role="patient", prompt="trajectory_patient", max_new_tokens=64),
        doctor_turn=dict(role="doctor", prompt="trajectory_doctor", max_new_tokens=64))

    source: Literal["embedded", "mts_dialog", "aci_bench"] = "embedded"
    dialogues: str = EMBEDDED_DIALOGUES
    source_split: str = "train"
    source_limit: int | None = Field(200, ge=1)
    n_items: int = Field(32, ge=1, le=100_000)
    future_rounds: int = Field(2, ge=1, le=10)
    min_future_rounds: int = Field(2, ge=0, le=10)
    exemplar_pool: str = EMBEDDED_DIALOGUES
    exemplar_max_turns: int = Field(8, ge=2, le=200)
    history_max_turns: int = Field(8, ge=1, le=400)
    max_attempts: int = Field(2, ge=1, le=5)
    rounds: RoundsParams = Field(default_factory=RoundsParams)
    guard: GuardParams = Field(default_factory=GuardParams)

    @property
    def round_calls(self) -> dict[str, CallSpec]:
        """Each speaker's next-turn call, patient first (the order a round asks them)."""
        return {"patient": self.call("patient_turn"), "doctor": self.call("doctor_turn")}
