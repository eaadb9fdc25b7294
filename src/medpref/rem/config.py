"""Params of stage 03_rem (section ``rem`` of params.yaml): rules, REM scorers, training."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from medpref.params import StrictModel


class RemTrainParams(StrictModel):
    """LoRA fine-tuning of the REM (PLPF: 2 epochs on 1,800 examples; here the train split)."""

    hardware: str = "cpu"              # configs/hardware/<name>.yaml
    epochs: float = Field(2.0, gt=0.0, le=50.0)
    max_steps: int | None = Field(None, ge=1)   # overrides epochs; None: the profile's cap
    learning_rate: float = Field(1e-3, gt=0.0, le=1.0)
    warmup_steps: int = Field(2, ge=0)
    lora_r: int = Field(16, ge=1, le=256)
    lora_alpha: int = Field(32, ge=1, le=512)
    lora_dropout: float = Field(0.05, ge=0.0, lt=1.0)
    target_modules: list[str] = Field(default_factory=lambda: [
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    max_length: int = Field(512, ge=64, le=32768)
    rule_detail: Literal["full", "short"] = "short"
    # comment_first: "Comment: … Score: N" as in PLPF (scoring writes a comment first);
    # score_first: "Score: N Comment: …" (scoring reads the score token in one pass)
    answer_order: Literal["comment_first", "score_first"] = "score_first"
    adapter_dir: str = "data/03_rem/rem_lora"


class RemParams(StrictModel):
    rules: str = "configs/rules/plpf_flowchart.yaml"
    annotations: str = "data/embedded/rem/annotations.jsonl"
    icl_examples: str = "data/embedded/rem/icl_examples.jsonl"
    prompt: str = "rem_judge"
    role: str = "rem"
    eval_split: str = "test"
    eval_per_rule: int | None = Field(None, ge=1)  # per rule, every score first; None: all
    scorers: list[Literal["sampled", "expected", "finetuned"]] = Field(
        default_factory=lambda: ["sampled", "expected", "finetuned"])
    k: int = Field(2, ge=1, le=50)                 # samples per judgement (Eq. 2)
    temperature: float = Field(0.7, gt=0.0, le=2.0)
    n_examples: int = Field(3, ge=0, le=20)        # in-context examples per rule
    max_new_tokens: int = Field(80, ge=8, le=1024)  # a sampled answer / a greedy comment
    expected_comment: bool = False                 # expected mode: greedy comment first?
    train: RemTrainParams = Field(default_factory=RemTrainParams)
    compliance_dialogues: str = "data/embedded/dialogues.jsonl"
    compliance_n: int = Field(3, ge=1, le=10_000)  # dialogues, each cut at its last doctor turn
    compliance_scorers: list[Literal["sampled", "expected", "finetuned"]] = Field(
        default_factory=lambda: ["expected", "finetuned"])
    reports: str = "reports/03_rem"

    @field_validator("scorers", "compliance_scorers")
    @classmethod
    def _distinct(cls, scorers: list[str]) -> list[str]:
        if not scorers or len(set(scorers)) != len(scorers):
            raise ValueError("list one or more distinct scorer modes")
        return scorers
