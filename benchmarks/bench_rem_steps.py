"""Benchmark: wall time of N optimizer steps of the REM's LoRA training (stage 03).

Trains the REM exactly as stage 03 does (``build_rem.train_rem``: params.yaml's ``rem``
recipe, the hardware's ``rem`` section, the real training examples) but stops after
``N`` optimizer steps (``rem.train.max_steps``), into a temporary folder that is removed
afterwards. It uses only ``load_params``, ``build_rem.load_inputs`` and
``build_rem.train_rem``, which every version of the project since the hardware files has,
so it times another commit's trainer too: run this file from a checkout of that commit
(``cd <checkout> && PYTHONPATH=src .venv/bin/python <this file> 6``; params, data and
code are then that checkout's). Run the variants one after another on an otherwise idle
machine. Model loading is outside the trainer seconds, inside the wall seconds.

``--answer-positions`` asks what trl's CPU path costs: trl 1.16 runs its fused LM head
(log-probabilities, entropy, top-1) on the valid label positions only where Triton runs
(CUDA, XPU) and on every position elsewhere; the flag makes it take the valid-positions
path on the CPU too (positions labelled -100 add nothing to the loss on either path).
Benchmark only: the trainer of stage 03 does not set it.

Usage: PYTHONPATH=src .venv/bin/python benchmarks/bench_rem_steps.py [N] [--answer-positions]
(N default 10)
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from medpref.params import load_params
from medpref.rem import build_rem


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    steps = int(args[0]) if args else 10
    if "--answer-positions" in sys.argv:
        import trl.trainer.utils as trl_utils

        trl_utils._use_triton = lambda device: True  # the compact path of add_fused_lm_head
    params = load_params()
    work = Path(tempfile.mkdtemp(prefix="bench-rem-steps-"))
    try:
        p = params.rem
        p = p.model_copy(update={"train": p.train.model_copy(update={
            "max_steps": steps, "adapter_dir": str(work / "rem_lora"),
            "checkpoints_dir": str(work / "checkpoints")})})
        inputs = build_rem.load_inputs(p)
        t0 = time.perf_counter()
        result = build_rem.train_rem(p, inputs, params.shared.llm.roles[p.role].model,
                                     params.shared.seed)
        wall = time.perf_counter() - t0
        how = " (answer positions only)" if "--answer-positions" in sys.argv else ""
        print(f"{build_rem.__file__}{how}: {result.steps} steps, trainer {result.runtime_s:.1f} s "
              f"({result.runtime_s / result.steps:.2f} s/step), train_rem {wall:.1f} s wall")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
