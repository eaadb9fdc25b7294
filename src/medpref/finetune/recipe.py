"""A recipe: what one trainer trains, in trl's and peft's own field names.

One type for every run that fine-tunes: the REM (``rem.train.recipe``), the policy's SFT
and its DPO (``training.recipes.<name>.sft`` / ``.dpo``). As in the alignment-handbook's
``recipes/*/config.yaml``, a field is spelled as the library that reads it spells it:
``r``, ``lora_alpha``, ``lora_dropout``, ``target_modules`` are peft's ``LoraConfig``;
the rest are trl's ``SFTConfig``/``DPOConfig`` (``beta`` and ``loss_type``: DPO's). The
recipe's trainer fields reach trl unchanged; the hardware section
(``configs/hardware/<name>.yaml``) is laid over them (:func:`trainer_arguments`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from medpref.finetune.hardware import Hardware, TrainerHardware, resolve_bf16
from medpref.params import StrictModel

#: the recipe fields that are peft's ``LoraConfig``'s (the rest are trl's)
LORA_FIELDS = ("r", "lora_alpha", "lora_dropout", "target_modules")



@dataclass(frozen=True)
class LoraSettings:
    """peft's ``LoraConfig`` fields of a run (a recipe's, for one architecture)."""

    r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.05
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")


class Recipe(StrictModel):
    """What one trainer trains. Every field is set in params.yaml (no defaults here) but
    DPO's ``beta`` and ``loss_type``, which an SFT recipe leaves out."""

    # peft.LoraConfig
    r: int = Field(ge=1, le=1024)
    lora_alpha: int = Field(ge=1, le=4096)
    lora_dropout: float = Field(ge=0.0, lt=1.0)
    # the modules LoRA wraps: one list, or model_type (config.json) → list with a "default"
    target_modules: list[str] | dict[str, list[str]]
    # trl.SFTConfig / trl.DPOConfig (transformers.TrainingArguments)
    learning_rate: float = Field(gt=0.0, le=1.0)
    lr_scheduler_type: Literal["linear", "cosine", "constant", "constant_with_warmup"]
    warmup_steps: int | float = Field(ge=0)   # below 1: a share of the steps; from 1: steps
    num_train_epochs: int | float = Field(gt=0, le=100)
    max_steps: int | None = Field(ge=1)       # exact optimizer steps (null: the epochs decide)
    max_length: int = Field(ge=16, le=131072)  # tokens of prompt + answer
    beta: float | None = Field(None, gt=0.0, le=10.0)   # DPO: λ of PLPF Eq. 5
    loss_type: Literal["sigmoid", "ipo", "hinge", "robust"] | None = None  # DPO: Eq. 5

    @field_validator("warmup_steps")
    @classmethod
    def _ratio_or_count(cls, value: int | float) -> int | float:
        if value >= 1 and value != int(value):
            raise ValueError("warmup_steps is a share of the steps below 1 and a whole "
                             f"number of steps from 1, got {value}")
        return value

    @field_validator("target_modules")
    @classmethod
    def _has_default(cls, value: list[str] | dict[str, list[str]]):
        if isinstance(value, dict) and ("default" not in value or not all(value.values())):
            raise ValueError("target_modules by model type needs a non-empty `default` list "
                             "(and non-empty lists per architecture)")
        if not value:
            raise ValueError("target_modules is empty")
        return value

    def is_dpo(self) -> bool:
        return self.beta is not None

    def modules_for(self, model_type: str) -> tuple[str, ...]:
        """The modules LoRA wraps for this architecture (``config.model_type``)."""
        if isinstance(self.target_modules, list):
            return tuple(self.target_modules)
        return tuple(self.target_modules.get(model_type, self.target_modules["default"]))

    def lora(self, model_type: str) -> LoraSettings:
        """peft's ``LoraConfig`` fields of this recipe, for one architecture."""
        return LoraSettings(r=self.r, lora_alpha=self.lora_alpha,
                            lora_dropout=self.lora_dropout,
                            target_modules=self.modules_for(model_type))

    def trainer_fields(self) -> dict[str, Any]:
        """The recipe's trl fields as trl takes them (``max_steps`` null is trl's -1)."""
        out = self.model_dump(exclude={*LORA_FIELDS, "beta", "loss_type"})
        out["max_steps"] = -1 if self.max_steps is None else self.max_steps
        if self.is_dpo():
            out |= {"beta": self.beta, "loss_type": self.loss_type}
        return out


def require_kind(recipe: Recipe, where: str, dpo: bool) -> Recipe:
    """A DPO recipe has ``beta`` and ``loss_type``; an SFT one has neither."""
    has = (recipe.beta is not None, recipe.loss_type is not None)
    if dpo and not all(has):
        raise ValueError(f"{where} is a DPO recipe: set beta and loss_type")
    if not dpo and any(has):
        raise ValueError(f"{where} is an SFT recipe: beta and loss_type are DPO's")
    return recipe


def house_arguments(hardware: Hardware, output_dir: str | Path, seed: int) -> dict[str, Any]:
    """Trainer arguments that no recipe or hardware file sets (the same for every run).

    ``use_cpu`` on CPU hardware and where no GPU exists: a CPU launch with several
    processes (torchrun) then runs DDP over gloo, the same code path as on GPUs.
    Checkpoints every ``save_steps`` into ``output_dir`` (the resume point); the progress
    bar stays on (``disable_tqdm`` False) so a long run shows its rate and remaining time.
    """
    import torch

    return {
        "output_dir": str(output_dir),
        "use_cpu": hardware.device == "cpu" or not torch.cuda.is_available(),
        "bf16": resolve_bf16(hardware), "fp16": False, "logging_first_step": True,
        "save_strategy": "steps", "save_only_model": False,
        "report_to": [], "seed": seed, "data_seed": seed, "dataloader_num_workers": 0,
        "disable_tqdm": False, "dataset_num_proc": None,
        # DDP + LoRA: frozen base weights get no gradient; without this DDP waits for them
        "ddp_find_unused_parameters": False}


def trainer_arguments(recipe: Recipe, section: TrainerHardware, hardware: Hardware,
                      output_dir: str | Path, seed: int, config_cls: type) -> dict[str, Any]:
    """``config_cls`` (trl's ``SFTConfig`` or ``DPOConfig``) keyword arguments: the house's,
    the recipe's trl fields, and the hardware section laid over them. A hardware key the
    config does not have (DPO's ``precompute_ref_log_probs`` for SFT) is left out."""
    args = (house_arguments(hardware, output_dir, seed) | recipe.trainer_fields()
            | section.trainer_fields())
    # transformers 5 renamed it; trl reads the old name, which mirrors the new one
    args["activation_checkpointing"] = args["gradient_checkpointing"]
    known = {f.name for f in dataclasses.fields(config_cls)}
    return {key: value for key, value in args.items() if key in known}
