"""A training profile → the arguments trl's trainers and peft's LoRA take.

One place turns ``training.profiles.<name>`` into ``SFTConfig``/``DPOConfig`` keyword
arguments, so SFT and every DPO run share batch, precision, checkpointing and logging.
trl defaults to bf16 and gradient checkpointing; on a CPU both make LoRA training about
12x slower, so they are set explicitly from the profile and the hardware present.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from medpref.training.config import TrainingProfile
from medpref.training.hardware import HardwareProfile
from medpref.training.sft import LoraSettings


def bf16_supported() -> bool:
    """A CUDA device with native bfloat16 (Ampere or later)."""
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())


def resolve_bf16(profile: TrainingProfile) -> bool:
    """``auto`` → bf16 where the GPU supports it; ``true`` without such a GPU is an error
    (bf16 autocast on a CPU runs, but many times slower than float32)."""
    if profile.bf16 == "auto":
        return bf16_supported()
    if profile.bf16 and not bf16_supported():
        raise ValueError("training profile asks for bf16 but no CUDA device with bfloat16 "
                         "is present; set bf16: auto (or false)")
    return bool(profile.bf16)


def target_modules(profile: TrainingProfile, model_type: str) -> tuple[str, ...]:
    """The modules LoRA wraps for this architecture (``config.model_type``)."""
    return tuple(profile.target_modules.get(model_type, profile.target_modules["default"]))


def lora_settings(profile: TrainingProfile, model_type: str) -> LoraSettings:
    return LoraSettings(r=profile.lora_r, alpha=profile.lora_alpha,
                        dropout=profile.lora_dropout,
                        target_modules=target_modules(profile, model_type))


def load_hardware_of(profile: TrainingProfile) -> HardwareProfile:
    """What ``sft.load_base`` needs: the model is loaded on the CPU (the Trainer, or
    accelerate under a launcher, moves it to this process's device)."""
    return HardwareProfile(device="cpu", num_threads=profile.num_threads)


def examples_per_step(profile: TrainingProfile, world_size: int = 1) -> int:
    """Examples (or pairs) in one optimizer step: batch × accumulation × processes."""
    return profile.per_device_batch_size * profile.grad_accumulation * world_size


def optimizer_steps(n_examples: int, profile: TrainingProfile, epochs: int,
                    max_steps: int | None, world_size: int = 1) -> int:
    """Optimizer steps of a run: ``epochs`` whole passes over ``n_examples``, each of
    ``ceil(n / (batch × accumulation × processes))`` steps (the Trainer's own count: the
    last step of an epoch takes the leftover batches), unless ``max_steps`` overrides."""
    if max_steps is not None:
        return max_steps
    return epochs * max(1, math.ceil(n_examples / examples_per_step(profile, world_size)))


def few_steps_warning(what: str, n_examples: int, profile: TrainingProfile, epochs: int,
                      max_steps: int | None, warn_below: int, world_size: int = 1) -> str:
    """A message when a run is planned with fewer than ``warn_below`` optimizer steps
    ("" otherwise): a big batch on a small file collapses a run to a step or two."""
    steps = optimizer_steps(n_examples, profile, epochs, max_steps, world_size)
    if steps >= warn_below:
        return ""
    how = (f"max_steps {max_steps}" if max_steps is not None else
           f"{epochs} epoch(s) of ceil({n_examples} / {examples_per_step(profile, world_size)})")
    return (f"{what}: {steps} optimizer step{'s' if steps != 1 else ''} < warn_below_steps "
            f"{warn_below} ({n_examples} examples, batch {profile.per_device_batch_size} × "
            f"accumulation {profile.grad_accumulation} × {world_size} process(es); {how})")


def trainer_kwargs(profile: TrainingProfile, output_dir: str | Path, seed: int, epochs: int,
                   max_steps: int | None) -> dict[str, Any]:
    """Arguments shared by ``SFTConfig`` and ``DPOConfig`` (both are TrainingArguments).

    The run length is ``epochs`` whole passes (the Trainer counts the steps, also under
    several processes), or ``max_steps`` where a profile sets that override.

    ``use_cpu`` where no GPU exists: a CPU launch with several processes (torchrun) then
    runs DDP over gloo, the same code path as on GPUs. Checkpoints every ``save_steps`` into
    ``output_dir`` (the resume point); the progress bar stays on (``disable_tqdm`` False) so a
    long run shows its rate and remaining time.
    """
    import torch

    return {
        "output_dir": str(output_dir), "num_train_epochs": epochs,
        "max_steps": max_steps if max_steps is not None else -1,
        "use_cpu": not torch.cuda.is_available(),
        "per_device_train_batch_size": profile.per_device_batch_size,
        "per_device_eval_batch_size": profile.per_device_batch_size,
        "gradient_accumulation_steps": profile.grad_accumulation,
        "learning_rate": profile.learning_rate,
        "warmup_steps": profile.warmup_ratio,  # < 1: a ratio
        "lr_scheduler_type": "linear", "bf16": resolve_bf16(profile), "fp16": False,
        # transformers 5 renamed it; trl reads the old name, which mirrors the new one
        "activation_checkpointing": profile.gradient_checkpointing,
        "gradient_checkpointing": profile.gradient_checkpointing,
        "logging_steps": profile.logging_steps, "logging_first_step": True,
        "save_strategy": "steps", "save_steps": profile.save_steps,
        "save_total_limit": profile.save_total_limit, "save_only_model": False,
        "report_to": [], "seed": seed, "data_seed": seed, "dataloader_num_workers": 0,
        "disable_tqdm": False, "max_length": profile.max_length, "dataset_num_proc": None,
        # DDP + LoRA: frozen base weights get no gradient; without this DDP waits for them
        "ddp_find_unused_parameters": False}
