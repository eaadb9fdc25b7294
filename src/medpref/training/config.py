"""The ``training`` params section (stage 05): recipes, hardware, the SFT data, the DPO runs.

A **recipe** (``training.recipes.<name>``, chosen by ``training.recipe``) says what is
trained: LoRA rank, α, dropout and modules, learning rate and warm-up, epochs, lengths.
``paper`` is PLPF's Appendix C setting, ``tiny`` the CPU default that trains in minutes.
The **hardware** (``training.hardware``: ``configs/hardware/<name>.yaml``, its ``policy``
section) says where and how fast: device, threads, bf16, per-device batch × accumulation,
gradient checkpointing, checkpoint cadence. Any recipe runs on any hardware. How many
processes (one, DDP, DeepSpeed) is an accelerate config under
``configs/hardware/accelerate/``, chosen at launch.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from medpref.finetune.hardware import Hardware, load_hardware, refuse_moved_keys
from medpref.params import StrictModel
from medpref.stagekit import GuardParams

#: fields of the old ``training.profiles.<name>`` that are hardware now
HARDWARE_KEYS = ("per_device_batch_size", "grad_accumulation", "gradient_checkpointing",
                 "precompute_ref_log_probs", "logging_steps", "save_steps", "save_total_limit")
MACHINE_KEYS = ("bf16", "num_threads")


#: each hardware field → its key in configs/hardware/<name>.yaml
_HARDWARE_HOME = ({key: f"policy.{key}" for key in HARDWARE_KEYS}
                  | {key: key for key in MACHINE_KEYS})


class TrainingRecipe(StrictModel):
    """What a run trains. Every field is set in params.yaml (no defaults here)."""

    lora_r: int = Field(ge=1, le=1024)
    lora_alpha: int = Field(ge=1, le=4096)
    lora_dropout: float = Field(ge=0.0, lt=1.0)
    # model_type (config.json) → modules LoRA wraps; "default" for any other architecture
    target_modules: dict[str, list[str]]
    learning_rate: float = Field(gt=0.0, le=1.0)
    warmup_ratio: float = Field(ge=0.0, lt=1.0)       # share of steps with a rising lr
    # whole passes over the data: SFT over the doctor-turn examples it keeps (at most: the
    # development loss picks the epoch, training.sft.patience stops it), DPO over a run's
    # pairs; a step count is then epochs × ceil(examples / (batch × accumulation)), batch
    # and accumulation being the hardware's
    sft_epochs: int = Field(ge=1, le=100)
    sft_max_steps: int | None = Field(ge=1)       # explicit step override (null: the epochs)
    dpo_epochs: int = Field(ge=1, le=100)
    dpo_max_steps: int | None = Field(ge=1)       # explicit step override (null: the epochs)
    max_length: int = Field(ge=16, le=131072)     # tokens of prompt + answer
    history_max_turns: int | None = Field(ge=1)   # context turns kept before an answer (null: all)

    @model_validator(mode="before")
    @classmethod
    def _no_hardware_keys(cls, data: Any) -> Any:
        return refuse_moved_keys(data, _HARDWARE_HOME, "'{key}' is hardware, not recipe: set "
                                 "'{new}' in configs/hardware/<training.hardware>.yaml")

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
    # contract Dialogue files; a missing one is noted, skipped. The split (shared.split)
    # decides for the dialogues it lists: train is trained on, dev gives the development
    # loss, eval is never read; a file it lists none of trains whole
    dialogues: list[str]
    real: list[RealDialogues]          # [] on the embedded default
    system_prompt: str                 # configs/prompts/<name>.yaml: the policy's system text
    max_examples: int | None = Field(ge=1)  # seeded subset of doctor-turn examples (null: all)
    # stop once the development loss has not fallen for this many epochs (the adapter of
    # the epoch with the lowest one is kept; at most the recipe's sft_epochs)
    patience: int = Field(ge=1, le=100)
    output_dir: str                    # the SFT adapter
    # only doctor turns that pass medpref.turns.turn_quality are targets (failing ones
    # stay as context); false keeps them (it retrains SFT and what follows)
    turn_quality: bool = True


class DPOParams(StrictModel):
    # the runs besides one per annotation strategy (those come from annotation.strategies,
    # first; medpref.finetune.policies.dpo_runs): run name → pairs file (contract "Labeled
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
    heldout_folds: int = Field(0, ge=0, le=20)
    heldout_runs: Literal["strategies"] | list[str] | None = "strategies"

    @model_validator(mode="after")
    def _heldout_folds(self) -> DPOParams:
        if self.heldout_folds == 1:
            raise ValueError("heldout_folds: 0 (off) or at least 2 folds")
        return self


#: keys of the old ``training`` section → what replaced them
_RENAMED = {"profile": "'training.recipe' (what is trained) and 'training.hardware' "
                       "(configs/hardware/<name>.yaml: where and how fast)",
            "profiles": "'training.recipes' (LoRA, learning rate, epochs, lengths); batch, "
                        "accumulation, precision, checkpointing and threads are in "
                        "configs/hardware/<training.hardware>.yaml"}


class TrainingParams(StrictModel):
    recipe: str                        # a name in ``recipes``
    hardware: str                      # configs/hardware/<name>.yaml (or a path to a YAML file)
    recipes: dict[str, TrainingRecipe]
    base_role: str                     # shared.llm.roles entry whose model is trained
    sft: SFTParams
    dpo: DPOParams
    checkpoints_dir: str               # <dir>/<run>/checkpoint-N: where a killed run resumes
    keep_checkpoints: bool             # false: a finished run deletes its checkpoints
    reports: str
    # a run planned with fewer optimizer steps is flagged (logged, and in its card and
    # runs.csv), e.g. gpu hardware's 2 × 16 batch on a pairs file of 21 pairs: 1 step
    warn_below_steps: int = Field(ge=1)
    guard: GuardParams = Field(default_factory=GuardParams)

    @model_validator(mode="before")
    @classmethod
    def _no_old_keys(cls, data: Any) -> Any:
        return refuse_moved_keys(data, _RENAMED, "'training.{key}' is gone: use {new}")

    @field_validator("recipes")
    @classmethod
    def _some_recipe(cls, value: dict[str, TrainingRecipe]) -> dict[str, TrainingRecipe]:
        if not value:
            raise ValueError("at least one recipe is needed")
        return value

    def active_recipe(self) -> TrainingRecipe:
        """``training.recipes[training.recipe]``; an unknown name is an error."""
        if self.recipe not in self.recipes:
            raise ValueError(f"training.recipe '{self.recipe}' is not in training.recipes "
                             f"(known: {sorted(self.recipes)})")
        return self.recipes[self.recipe]

    def active_hardware(self) -> Hardware:
        """``configs/hardware/<training.hardware>.yaml``, validated."""
        return load_hardware(self.hardware)
