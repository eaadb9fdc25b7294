"""The ``sampling`` params section (stage 01)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from medpref.llm.types import CallSpec
from medpref.params import StrictModel
from medpref.sampling.rounds import PREFIX
from medpref.stagekit import GuardParams


class RoundsParams(StrictModel):
    """Round-by-round completion of generated futures (:mod:`medpref.sampling.rounds`)."""

    enabled: bool = True            # false: the one-shot continuation only (short ones reported)
    patient_role: str = "patient"
    doctor_role: str = "doctor"
    patient_prompt: str = "trajectory_patient"
    doctor_prompt: str = "trajectory_doctor"
    max_new_tokens: int = Field(64, ge=8, le=1024)
    retries: int = Field(3, ge=0, le=8)           # an unreadable turn is asked again, sampled
    retry_temperature: float = Field(1.0, gt=0.0, le=2.0)
    max_copied_share: float = Field(0.6, gt=0.0, le=1.0)  # echo of an earlier turn: unreadable

    @property
    def calls(self) -> dict[str, CallSpec]:
        """Each speaker's next-turn call, patient first (the order a round asks them)."""
        return {"patient": CallSpec(self.patient_role, self.patient_prompt,
                                    self.max_new_tokens, PREFIX["patient"]),
                "doctor": CallSpec(self.doctor_role, self.doctor_prompt, self.max_new_tokens,
                                   PREFIX["doctor"])}


class SamplingParams(StrictModel):
    source: Literal["embedded", "mts_dialog", "aci_bench"] = "embedded"
    dialogues: str = "data/embedded/dialogues.jsonl"
    source_split: str = "train"
    source_limit: int | None = Field(200, ge=1)
    n_items: int = Field(32, ge=1, le=100_000)
    future_rounds: int = Field(2, ge=1, le=10)
    min_future_rounds: int = Field(2, ge=0, le=10)
    exemplar_pool: str = "data/embedded/dialogues.jsonl"
    exemplar_max_turns: int = Field(8, ge=2, le=200)
    history_max_turns: int = Field(8, ge=1, le=400)
    max_attempts: int = Field(2, ge=1, le=5)
    role: str = "annotator"
    prompt: str = "trajectory_continuation"
    max_new_tokens: int = Field(160, ge=16, le=4096)
    rounds: RoundsParams = Field(default_factory=RoundsParams)
    guard: GuardParams = Field(default_factory=GuardParams)

    @property
    def continuation_call(self) -> CallSpec:
        """The one-shot continuation: the doctor's reply and the future, from "Doctor:"."""
        return CallSpec(self.role, self.prompt, self.max_new_tokens, "Doctor:")
