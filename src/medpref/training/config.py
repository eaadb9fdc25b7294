"""The ``training`` params section (stage 05): profiles, the SFT recipe, the DPO runs.

A *profile* says how big and how long a run is (LoRA rank, learning rate, batch ×
accumulation, epochs, precision): ``paper`` is PLPF's Appendix C setting, ``tiny`` the
CPU default that trains in minutes. The recipe (which data, which runs) is the same under
both. Where a run executes (one process, DDP, DeepSpeed) is an accelerate config under
``configs/hardware/accelerate/``, chosen at launch, not here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from medpref.params import StrictModel
from medpref.stagekit import GuardParams


class TrainingProfile(StrictModel):
    """How a run trains. Every field is set in params.yaml (no defaults here)."""

    lora_r: int = Field(ge=1, le=1024)
    lora_alpha: int = Field(ge=1, le=4096)
    lora_dropout: float = Field(ge=0.0, lt=1.0)
    # model_type (config.json) → modules LoRA wraps; "default" for any other architecture
    target_modules: dict[str, list[str]]
    learning_rate: float = Field(gt=0.0, le=1.0)
    warmup_ratio: float = Field(ge=0.0, lt=1.0)       # share of steps with a rising lr
    per_device_batch_size: int = Field(ge=1, le=1024)
    grad_accumulation: int = Field(ge=1, le=1024)
    # whole passes over the data: SFT over the doctor-turn examples it keeps, DPO over a
    # run's pairs; a step count is then epochs × ceil(examples / (batch × accumulation))
    sft_epochs: int = Field(ge=1, le=100)
    sft_max_steps: int | None = Field(ge=1)       # explicit step override (null: the epochs)
    dpo_epochs: int = Field(ge=1, le=100)
    dpo_max_steps: int | None = Field(ge=1)       # explicit step override (null: the epochs)
    max_length: int = Field(ge=16, le=131072)     # tokens of prompt + answer
    history_max_turns: int | None = Field(ge=1)   # context turns kept before an answer (null: all)
    bf16: Literal["auto"] | bool                  # auto: on where the GPU supports it
    gradient_checkpointing: bool
    precompute_ref_log_probs: bool                # DPO: reference log-probs once, up front
    num_threads: int | None = Field(ge=1, le=512)  # CPU threads (null: torch's choice)
    logging_steps: int = Field(ge=1)
    save_steps: int = Field(ge=1)                 # checkpoint every N steps (resume point)
    save_total_limit: int = Field(ge=1)

    @field_validator("target_modules")
    @classmethod
    def _has_default(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        if "default" not in value or not all(value.values()):
            raise ValueError("target_modules needs a non-empty `default` list "
                             "(and non-empty lists per architecture)")
        return value


class RealDialogues(StrictModel):
    """A licensed set read through ``medpref.data.adapters`` (../shared/data)."""

    source: Literal["mts_dialog", "aci_bench"]
    split: str
    limit: int | None = Field(ge=1)


class SFTParams(StrictModel):
    dialogues: list[str]               # contract Dialogue files; a missing one is noted, skipped
    real: list[RealDialogues]          # [] on the embedded default
    system_prompt: str                 # configs/prompts/<name>.yaml: the policy's system text
    max_examples: int | None = Field(ge=1)  # seeded subset of doctor-turn examples (null: all)
    output_dir: str                    # the SFT adapter
    # only doctor turns that pass medpref.notechat.turn_quality are targets (failing ones
    # stay as context); false keeps them (it retrains SFT and what follows)
    turn_quality: bool = True


class DPOParams(StrictModel):
    # the runs besides one per annotation strategy (those come from annotation.strategies,
    # first; medpref.training.policies.dpo_runs): run name → pairs file (contract "Labeled
    # preference pair"), e.g. the Table 3 grid cells; dvc.yaml's training_dpo_grid reads it
    runs: dict[str, str]
    beta: float = Field(gt=0.0, le=10.0)   # λ of PLPF Eq. 5
    loss_type: Literal["sigmoid", "ipo", "hinge", "robust"]
    min_pairs: int = Field(ge=1)           # fewer pairs: the run is skipped, with its reason
    max_pairs: int | None = Field(ge=1)    # seeded subset (null: all)
    eval_pairs: int | None = Field(ge=1)   # reward metrics after training on the first N
    output_dir: str                        # <output_dir>/<run>/adapter
    # held-out implicit reward by cross-fitting (medpref.training.heldout): k folds, each
    # scored by a policy trained on the others (0: off); for the runs named ("strategies":
    # each annotation strategy's run; null: all)
    heldout_folds: int = Field(3, ge=0, le=20)
    heldout_runs: Literal["strategies"] | list[str] | None = "strategies"

    @model_validator(mode="after")
    def _heldout_folds(self) -> DPOParams:
        if self.heldout_folds == 1:
            raise ValueError("heldout_folds: 0 (off) or at least 2 folds")
        return self


class TrainingParams(StrictModel):
    profile: str
    profiles: dict[str, TrainingProfile]
    base_role: str                     # shared.llm.roles entry whose model is trained
    sft: SFTParams
    dpo: DPOParams
    checkpoints_dir: str               # <dir>/<run>/checkpoint-N: where a killed run resumes
    keep_checkpoints: bool             # false: a finished run deletes its checkpoints
    reports: str
    # a run planned with fewer optimizer steps is flagged (logged, and in its card and
    # runs.csv), e.g. the paper profile's 2 × 16 batch on a pairs file of 21 pairs: 1 step
    warn_below_steps: int = Field(ge=1)
    guard: GuardParams = Field(default_factory=GuardParams)

    @field_validator("profiles")
    @classmethod
    def _some_profile(cls, value: dict[str, TrainingProfile]) -> dict[str, TrainingProfile]:
        if not value:
            raise ValueError("at least one profile is needed")
        return value

    def active_profile(self) -> TrainingProfile:
        if self.profile not in self.profiles:
            raise ValueError(f"training.profile '{self.profile}' is not in training.profiles "
                             f"(known: {sorted(self.profiles)})")
        return self.profiles[self.profile]
