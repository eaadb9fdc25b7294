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

``--compact-lm-head on|off`` overrides the hardware's ``rem.compact_lm_head`` (default:
the hardware file's value; ``configs/hardware/cpu.yaml`` sets it on): trl 1.16 runs its
fused LM head on the valid label positions only where Triton runs (CUDA, XPU) and on
every position elsewhere; on, the REM's trainer takes the valid-positions path on the
CPU too (``medpref.training.lm_head``). The override is a copy of the hardware file in
the work folder with that one key changed, so the trainer runs exactly as stage 03's.
Alternate the two (``--steps 4 --compact-lm-head on`` / ``off``) to time the option.

Usage: .venv/bin/python benchmarks/bench_rem_trainer.py [--adapter DIR | --steps N]
       [--compact-lm-head on|off] [--eval-per-rule N] [--out DIR]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import yaml

from medpref.contracts import write_jsonl
from medpref.llm import LLMSession
from medpref.params import load_params
from medpref.rem import build_rem as b03
from medpref.training.hardware import load_hardware


def hardware_with_compact_head(name: str, on: bool, work: Path) -> Path:
    """A copy of hardware ``name`` in ``work`` with ``rem.compact_lm_head`` set to ``on``."""
    hw = load_hardware(name)
    hw = hw.model_copy(update={"rem": hw.rem.model_copy(update={"compact_lm_head": on})})
    path = work / f"hardware-{name}-compact-{'on' if on else 'off'}.yaml"
    path.write_text(yaml.safe_dump(hw.model_dump(), sort_keys=False), encoding="utf-8")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--adapter", help="score this adapter folder instead of training one")
    ap.add_argument("--eval-per-rule", type=int, default=None,
                    help="a balanced subset of N per rule (default: rem.eval_per_rule)")
    ap.add_argument("--out", help="keep the adapter, losses and predictions here")
    ap.add_argument("--steps", type=int, help="train N optimizer steps, time them, score nothing")
    ap.add_argument("--compact-lm-head", choices=("on", "off"),
                    help="override the hardware's rem.compact_lm_head (default: the file's)")
    args = ap.parse_args()

    params = load_params()
    seed = params.shared.seed
    work = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench-rem-"))
    work.mkdir(parents=True, exist_ok=True)
    adapter = Path(args.adapter).resolve() if args.adapter else work / "rem_lora"
    where = {"adapter_dir": str(adapter), "checkpoints_dir": str(work / "checkpoints")}
    if args.steps:
        where["max_steps"] = args.steps
    if args.compact_lm_head:
        where["hardware"] = str(hardware_with_compact_head(
            params.rem.train.hardware, args.compact_lm_head == "on", work))
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
            compact = load_hardware(p.train.hardware).rem.compact_lm_head
            how = " (compact LM head)" if compact else " (LM head on every position)"
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
