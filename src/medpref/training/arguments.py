"""How many optimizer steps a policy run takes, and the warning when they are few.

The trainer arguments themselves are the recipe's trl fields with the hardware's
``policy`` section laid over them (:func:`medpref.finetune.recipe.trainer_arguments`).
"""

from __future__ import annotations

import math

from medpref.finetune.hardware import Hardware
from medpref.finetune.recipe import Recipe


def examples_per_step(hardware: Hardware, world_size: int = 1) -> int:
    """Examples (or pairs) in one optimizer step: batch × accumulation × processes."""
    policy = hardware.policy
    return policy.per_device_train_batch_size * policy.gradient_accumulation_steps * world_size


def optimizer_steps(n_examples: int, hardware: Hardware, epochs: int | float,
                    max_steps: int | None, world_size: int = 1) -> int:
    """Optimizer steps of a run: ``epochs`` whole passes over ``n_examples``, each of
    ``ceil(n / (batch × accumulation × processes))`` steps (the Trainer's own count: the
    last step of an epoch takes the leftover batches), unless ``max_steps`` overrides."""
    if max_steps is not None:
        return max_steps
    per_epoch = max(1, math.ceil(n_examples / examples_per_step(hardware, world_size)))
    return math.ceil(epochs * per_epoch)


def few_steps_warning(what: str, n_examples: int, hardware: Hardware, recipe: Recipe,
                      warn_below: int, world_size: int = 1) -> str:
    """A message when a run is planned with fewer than ``warn_below`` optimizer steps
    ("" otherwise): a big batch on a small file collapses a run to a step or two."""
    steps = optimizer_steps(n_examples, hardware, recipe.num_train_epochs, recipe.max_steps,
                            world_size)
    if steps >= warn_below:
        return ""
    how = (f"max_steps {recipe.max_steps}" if recipe.max_steps is not None else
           f"{recipe.num_train_epochs} epoch(s) of ceil({n_examples} / "
           f"{examples_per_step(hardware, world_size)})")
    return (f"{what}: {steps} optimizer step{'s' if steps != 1 else ''} < warn_below_steps "
            f"{warn_below} ({n_examples} examples, batch "
            f"{hardware.policy.per_device_train_batch_size} × accumulation "
            f"{hardware.policy.gradient_accumulation_steps} × {world_size} process(es); {how})")
