"""Hardware (``configs/hardware/<name>.yaml``): where and how fast a recipe trains.

The vocabulary, one name each: a **recipe** says what is trained (LoRA, learning rate,
epochs, lengths: ``rem.train.recipe`` and ``training.recipes.<name>`` in params.yaml); a
**hardware** file says where and how fast (device, threads, precision, per-device batch
× accumulation, gradient checkpointing, checkpoint cadence); an **overlay**
(``configs/overlays/``) is a set of params overrides. As in the alignment-handbook,
the same recipe runs on a 2-core CPU or a GPU by switching one param
(``rem.train.hardware``, ``training.hardware``). Processes and sharding (DDP, DeepSpeed)
are an accelerate config under ``configs/hardware/accelerate/``, chosen at launch.

A hardware file has the machine's settings and one section per trainer: ``rem`` (stage
03's REM LoRA) and ``policy`` (stage 05's SFT and DPO), which batch differently. A
section's keys are trainer arguments in trl's own names, laid over the recipe's as they
are (:func:`medpref.finetune.recipe.trainer_arguments`), but ``compact_lm_head`` and the
REM's ``max_steps_cap``, which medpref reads itself.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError

from medpref.params import StrictModel, repo_path

#: section keys that are no trainer argument (read by medpref itself)
_NOT_TRAINER = ("compact_lm_head", "max_steps_cap")




class TrainerHardware(StrictModel):
    """How one trainer batches on this hardware: trainer arguments (trl's names) laid over
    the recipe, and ``compact_lm_head``. Every field is set in the file."""

    per_device_train_batch_size: int = Field(ge=1, le=1024)
    per_device_eval_batch_size: int = Field(ge=1, le=1024)
    gradient_accumulation_steps: int = Field(ge=1, le=1024)
    gradient_checkpointing: bool          # on: less memory, more time (off on a CPU)
    logging_steps: int = Field(ge=1)
    save_steps: int = Field(ge=1)         # checkpoint every N steps (the resume point)
    save_total_limit: int = Field(ge=1)
    #: the LM head on the learned (label != -100) positions only, on a CPU too (trl does
    #: so on CUDA/XPU whatever this says): medpref.training.lm_head
    compact_lm_head: bool

    def trainer_fields(self) -> dict[str, Any]:
        """The section's trainer arguments (what is laid over the recipe)."""
        return self.model_dump(exclude=set(_NOT_TRAINER))


class RemHardware(TrainerHardware):
    """Stage 03's REM LoRA (``medpref.rem.build_rem.train_rem``)."""

    # cap on the optimizer steps the epochs give, on slow hardware (null: none); a cap,
    # so not trl's max_steps (which is exact): medpref.rem.build_rem.rem_steps
    max_steps_cap: int | None = Field(ge=1)
    # group_by_length: batches of similar length, less padding
    train_sampling_strategy: Literal["group_by_length", "random"]


class PolicyHardware(TrainerHardware):
    """Stage 05's SFT and DPO of the policy (``medpref.training``)."""

    precompute_ref_log_probs: bool        # DPO: reference log-probs once, up front
    # SFT: a batch's examples flattened into one sequence, no padding (transformers keeps
    # them apart by position ids); trl's DPO does not do it
    padding_free: bool


class Hardware(StrictModel):
    """One ``configs/hardware/<name>.yaml``."""

    device: Literal["cpu", "cuda", "auto"]
    num_threads: int | None = Field(ge=1, le=512)   # torch CPU threads (null: torch's choice)
    bf16: Literal["auto"] | bool                    # auto: on where the GPU has bfloat16
    rem: RemHardware
    policy: PolicyHardware

def hardware_path(name: str) -> Path:
    """A hardware name (``cpu``) or a path to a YAML file."""
    if name.endswith((".yaml", ".yml")):
        return repo_path(name)
    return repo_path(f"configs/hardware/{name}.yaml")


def load_hardware(name: str) -> Hardware:
    """Load and validate a hardware file; errors name the file and the key."""
    path = hardware_path(name)
    if not path.exists():
        known = sorted(p.stem for p in repo_path("configs/hardware").glob("*.yaml"))
        raise FileNotFoundError(f"no hardware '{name}' ({path}); known: {known}")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    try:
        return Hardware.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        raise ValueError(f"{path}: '{key}': {err['msg']}".replace("'': ", "")) from None


def bf16_supported() -> bool:
    """A CUDA device with native bfloat16 (Ampere or later)."""
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())


def resolve_bf16(hardware: Hardware) -> bool:
    """``auto`` → bf16 where the GPU supports it; ``true`` without such a GPU is an error
    (bf16 autocast on a CPU runs, but many times slower than float32)."""
    if hardware.bf16 == "auto":
        return bf16_supported()
    if hardware.bf16 and not bf16_supported():
        raise ValueError("the hardware asks for bf16 but no CUDA device with bfloat16 "
                         "is present; set bf16: auto (or false)")
    return bool(hardware.bf16)


# -- the LM head on the learned positions only (a section's ``compact_lm_head``) -----------
# trl (1.16) computes a trainer's loss through a fused, chunked LM head
# (``trl.trainer.utils.add_fused_lm_head``). Where Triton runs (CUDA, XPU) it projects only
# the positions whose label is not -100; elsewhere, a CPU included, it projects every
# position and zeroes the masked ones afterwards (a comment in trl: a varying number of
# valid positions would recompile Neuron's tiles). With a completion-only loss most
# positions are prompt: the REM learns a score and a short comment after a 300-500 token
# prompt, so on a CPU most of the head's work (49,152 logits a position) is thrown away.
#
# :func:`compact_lm_head` makes trl take its valid-positions path on the CPU as well, for
# the duration of one trainer's ``train``; the positions labelled -100 add nothing to the
# loss on either path, so only the summation order of the loss changes (the tests check
# the two losses agree). Nothing else of trl is changed, and generation never goes through
# the fused head. (Here, not in a module of its own: every stage that trains imports this.)
_HEAD_LOCK = threading.Lock()
_ACTIVE = 0  # trainers inside compact_lm_head()
_ORIGINAL = None


def _trl_utils():
    import trl.trainer.utils as trl_utils

    if not callable(getattr(trl_utils, "_use_triton", None)):
        import trl

        raise RuntimeError(
            f"compact_lm_head: trl {trl.__version__} has no trl.trainer.utils._use_triton "
            "(the switch of its fused LM head between every position and the valid ones); "
            "set compact_lm_head: false in the hardware file, or pin trl 1.16")
    return trl_utils


@contextlib.contextmanager
def compact_lm_head(enabled: bool = True):
    """While inside, trl's fused LM head scores the valid label positions only on any
    device (its CUDA/XPU behaviour). Nested and concurrent uses are counted; the
    original switch is back when the last one leaves, also after an exception."""
    global _ACTIVE, _ORIGINAL
    if not enabled:
        yield
        return
    utils = _trl_utils()
    with _HEAD_LOCK:
        if _ACTIVE == 0:
            _ORIGINAL = utils._use_triton
            utils._use_triton = _always_compact
        _ACTIVE += 1
    try:
        yield
    finally:
        with _HEAD_LOCK:
            _ACTIVE -= 1
            if _ACTIVE == 0:
                utils._use_triton = _ORIGINAL


def _always_compact(device) -> bool:
    """trl's ``compact = _use_triton(device)``: True everywhere (the kernels inside
    still fold their tiles in torch where Triton does not run: they read their own
    module's switch, not this one)."""
    return True


def train_with_compact_head(trainer, enabled: bool):
    """Make ``trainer.train`` run under :func:`compact_lm_head` when ``enabled`` (the
    hardware section's ``compact_lm_head``); returns the trainer."""
    if not enabled:
        return trainer
    train = trainer.train

    @functools.wraps(train)
    def compact_train(*args, **kwargs):
        with compact_lm_head():
            return train(*args, **kwargs)

    trainer.train = compact_train
    trainer.compact_lm_head = True
    return trainer
