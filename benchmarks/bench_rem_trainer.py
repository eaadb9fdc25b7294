"""The REM trained as stage 03 trains it, then its Table 5 row: before/after a trainer change.

Runs only stage 03's REM steps (``build_rem.train_rem``, then ``run_scorer("finetuned")``
on the evaluation split), with the params of ``params.yaml``, into a temporary folder
(nothing of the repository's ``data/`` is touched). Prints the training summary (steps,
examples, first/last loss, wall time) and the finetuned scorer's Table 5 row, with the
always-majority baseline for scale. The scorer calls skip the response cache: a newly
trained adapter has a new content identity, so every call would miss it anyway.

``--adapter DIR`` scores an adapter trained earlier (no training), e.g. a copy of the
committed ``data/03_rem/rem_lora``, to check that this script reproduces stage 03's row.

``--steps N`` times N optimizer steps (``rem.train.max_steps``) and scores nothing: a
trainer's cost per step. The script uses only ``load_params`` and ``build_rem``'s
``load_inputs``/``train_rem``, so it times another commit's trainer too: run this file
from a checkout of that commit (``cd <checkout> && PYTHONPATH=src .venv/bin/python
<this file> --steps 6``; params, data and code are then that checkout's). Run the
variants one after another on an otherwise idle machine.

``--answer-positions`` asks what trl's CPU path costs: trl 1.16 runs its fused LM head
(log-probabilities, entropy, top-1) on the valid label positions only where Triton runs
(CUDA, XPU) and on every position elsewhere; the flag makes it take the valid-positions
path on the CPU too (positions labelled -100 add nothing to the loss on either path).
Benchmark only: the trainer of stage 03 does not set it.

Usage: .venv/bin/python benchmarks/bench_rem_trainer.py [--adapter DIR | --steps N]
       [--answer-positions] [--eval-per-rule N] [--out DIR]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from medpref.contracts import write_jsonl
from medpref.llm import LLMSession
from medpref.params import load_params
from medpref.rem import build_rem as b03


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--adapter", help="score this adapter folder instead of training one")
    ap.add_argument("--eval-per-rule", type=int, default=None,
                    help="a balanced subset of N per rule (default: rem.eval_per_rule)")
    ap.add_argument("--out", help="keep the adapter, losses and predictions here")
    ap.add_argument("--steps", type=int, help="train N optimizer steps, time them, score nothing")
    ap.add_argument("--answer-positions", action="store_true",
                    help="trl's fused LM head on the answer positions only, on the CPU too")
    args = ap.parse_args()
    if args.answer_positions:
        import trl.trainer.utils as trl_utils

        trl_utils._use_triton = lambda device: True  # the compact path of add_fused_lm_head

    params = load_params()
    seed = params.shared.seed
    work = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench-rem-"))
    work.mkdir(parents=True, exist_ok=True)
    adapter = Path(args.adapter).resolve() if args.adapter else work / "rem_lora"
    where = {"adapter_dir": str(adapter), "checkpoints_dir": str(work / "checkpoints")}
    if args.steps:
        where["max_steps"] = args.steps
    p = params.rem.model_copy(update={"train": params.rem.train.model_copy(update=where)})
    inputs = b03.load_inputs(p)
    if not args.adapter:
        t0 = time.perf_counter()
        train = b03.train_rem(p, inputs, params.shared.llm.roles[p.role].model, seed)
        wall = time.perf_counter() - t0
        losses = b03.training_table(train)
        losses.to_csv(work / "training.csv", index=False)
        print(f"trained: {train.steps} steps on {train.n_train} examples "
              f"({train.n_dropped} too long), loss {losses['loss'].iloc[0]:.3f} -> "
              f"{losses['loss'].iloc[-1]:.3f}; trainer {train.runtime_s:.0f} s, "
              f"train_rem {wall:.0f} s wall", flush=True)
        if args.steps:
            how = " (answer positions only)" if args.answer_positions else ""
            print(f"{b03.__file__}{how}: {train.steps} steps, trainer {train.runtime_s:.1f} s "
                  f"({train.runtime_s / train.steps:.2f} s/step)")
            if not args.out:
                shutil.rmtree(work, ignore_errors=True)
            return
    eval_set = inputs.split(p.eval_split, args.eval_per_rule or p.eval_per_rule)
    llm = LLMSession.for_stage("bench_rem_trainer", params, use_cache=False)
    run = b03.run_scorer("finetuned", llm, p, inputs, eval_set, seed)
    llm.close()
    table = b03.table5([run], p).drop(columns=["method"])
    print(table.to_string(index=False))
    m = b03.baseline_majority(eval_set, inputs.split("train"))
    print(f"majority baseline on these {len(eval_set)}: exact {m['exact_%']:.1f}%, "
          f"fuzzy {m['fuzzy_%']:.1f}%, fuzzy02 {m['fuzzy02_%']:.1f}%")
    if args.out:
        table.to_csv(work / "table5.csv", index=False)
        write_jsonl(work / "predictions.jsonl", run.records)
    else:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
