"""The LM head on the learned positions only, on every device (hardware ``compact_lm_head``).

trl (1.16) computes a trainer's loss through a fused, chunked LM head
(``trl.trainer.utils.add_fused_lm_head``). Where Triton runs (CUDA, XPU) it projects only
the positions whose label is not -100; elsewhere, a CPU included, it projects every
position and zeroes the masked ones afterwards (a comment in trl: a varying number of
valid positions would recompile Neuron's tiles). With a completion-only loss most
positions are prompt: the REM learns a score and a short comment after a 300-500 token
prompt, so on a CPU most of the head's work (49,152 logits a position) is thrown away.

:func:`compact_lm_head` makes trl take its valid-positions path on the CPU as well, for
the duration of one trainer's ``train``; the positions labelled -100 add nothing to the
loss on either path, so only the summation order of the loss changes (the tests check
the two losses agree). Nothing else of trl is changed, and generation never goes through
the fused head.
"""

from __future__ import annotations

import contextlib
import functools
import threading

_LOCK = threading.Lock()
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
    with _LOCK:
        if _ACTIVE == 0:
            _ORIGINAL = utils._use_triton
            utils._use_triton = _always_compact
        _ACTIVE += 1
    try:
        yield
    finally:
        with _LOCK:
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
