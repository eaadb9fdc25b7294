"""A recipe on a hardware → the arguments trl's trainers and peft's LoRA take.

One place turns a section of ``configs/hardware/<name>.yaml`` (where and how fast: ``rem``
for stage 03's REM, ``policy`` for stage 05) and a recipe (what is trained:
``training.recipes.<name>``, or ``rem.train``) into ``SFTConfig``/``DPOConfig`` keyword
arguments, so the REM, the policy's SFT and every DPO run share batch, precision,
checkpointing and logging. trl defaults to bf16 and gradient checkpointing; on a CPU
both make LoRA training about 12x slower, so they are set explicitly from the hardware
and what is present.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from medpref.finetune.hardware import Hardware, hardware_kwargs
from medpref.finetune.sft import LoraSettings
from medpref.training.config import TrainingRecipe


def target_modules(recipe: TrainingRecipe, model_type: str) -> tuple[str, ...]:
    """The modules LoRA wraps for this architecture (``config.model_type``)."""
    return tuple(recipe.target_modules.get(model_type, recipe.target_modules["default"]))


def lora_settings(recipe: TrainingRecipe, model_type: str) -> LoraSettings:
    return LoraSettings(r=recipe.lora_r, alpha=recipe.lora_alpha,
                        dropout=recipe.lora_dropout,
                        target_modules=target_modules(recipe, model_type))


def examples_per_step(hardware: Hardware, world_size: int = 1) -> int:
    """Examples (or pairs) in one optimizer step: batch × accumulation × processes."""
    return hardware.policy.per_device_batch_size * hardware.policy.grad_accumulation * world_size


def optimizer_steps(n_examples: int, hardware: Hardware, epochs: int,
                    max_steps: int | None, world_size: int = 1) -> int:
    """Optimizer steps of a run: ``epochs`` whole passes over ``n_examples``, each of
    ``ceil(n / (batch × accumulation × processes))`` steps (the Trainer's own count: the
    last step of an epoch takes the leftover batches), unless ``max_steps`` overrides."""
    if max_steps is not None:
        return max_steps
    return epochs * max(1, math.ceil(n_examples / examples_per_step(hardware, world_size)))


def few_steps_warning(what: str, n_examples: int, hardware: Hardware, epochs: int,
                      max_steps: int | None, warn_below: int, world_size: int = 1) -> str:
    """A message when a run is planned with fewer than ``warn_below`` optimizer steps
    ("" otherwise): a big batch on a small file collapses a run to a step or two."""
    steps = optimizer_steps(n_examples, hardware, epochs, max_steps, world_size)
    if steps >= warn_below:
        return ""
    how = (f"max_steps {max_steps}" if max_steps is not None else
           f"{epochs} epoch(s) of ceil({n_examples} / {examples_per_step(hardware, world_size)})")
    return (f"{what}: {steps} optimizer step{'s' if steps != 1 else ''} < warn_below_steps "
            f"{warn_below} ({n_examples} examples, batch "
            f"{hardware.policy.per_device_batch_size} × accumulation "
            f"{hardware.policy.grad_accumulation} × {world_size} process(es); {how})")


def trainer_kwargs(recipe: TrainingRecipe, hardware: Hardware, output_dir: str | Path,
                   seed: int, epochs: int, max_steps: int | None) -> dict[str, Any]:
    """Arguments shared by the policy's ``SFTConfig`` and ``DPOConfig`` (both are
    TrainingArguments): the hardware's ``policy`` section and the recipe.

    The run length is ``epochs`` whole passes (the Trainer counts the steps, also under
    several processes), or ``max_steps`` where the recipe sets that override.
    """
    return hardware_kwargs(hardware.policy, hardware, output_dir, seed) | {
        "num_train_epochs": epochs, "max_steps": max_steps if max_steps is not None else -1,
        "learning_rate": recipe.learning_rate,
        "warmup_steps": recipe.warmup_ratio,  # < 1: a ratio
        "lr_scheduler_type": "linear", "max_length": recipe.max_length}
