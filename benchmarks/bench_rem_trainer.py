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
CPU too (``medpref.finetune.hardware.compact_lm_head``). The override is a copy of the
hardware file in the work folder with that one key changed, so the trainer runs exactly
as stage 03's.
Alternate the two (``--steps 4 --compact-lm-head on`` / ``off``) to time the option.

``--ab N`` is the option's A/B in one process: the REM's trainer as stage 03 builds it,
its first N real batches (batch 4, length-grouped as in training), and for each
``--repeats`` the forward and backward pass of every batch with the LM head on every
position, then on the answer positions only (the optimizer step, identical either way,
is left out). Prints wall and process-CPU seconds of each, the medians, the ratio
compact / every position, and the largest loss difference between the two.

Usage: .venv/bin/python benchmarks/bench_rem_trainer.py [--adapter DIR | --steps N]
       [--compact-lm-head on|off] [--eval-per-rule N] [--out DIR]
       .venv/bin/python benchmarks/bench_rem_trainer.py --ab 2 [--repeats 3]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import yaml

from medpref.contracts import write_jsonl
from medpref.finetune.hardware import load_hardware
from medpref.llm import LLMSession
from medpref.params import load_params, repo_path
from medpref.rem import build_rem as b03


def hardware_with_compact_head(name: str, on: bool, work: Path) -> Path:
    """A copy of hardware ``name`` in ``work`` with ``rem.compact_lm_head`` set to ``on``."""
    hw = load_hardware(name)
    hw = hw.model_copy(update={"rem": hw.rem.model_copy(update={"compact_lm_head": on})})
    path = work / f"hardware-{name}-compact-{'on' if on else 'off'}.yaml"
    path.write_text(yaml.safe_dump(hw.model_dump(), sort_keys=False), encoding="utf-8")
    return path


def rem_trainer(params, work: Path):
    """The REM's trainer as stage 03 builds it (real model, data and hardware), one step."""
    from medpref.finetune.sft import (
        build_sft_trainer,
        drop_too_long,
        load_base,
        with_lora,
    )

    p = params.rem
    t, hw = p.train, load_hardware(p.train.hardware)
    inputs = b03.load_inputs(p)
    examples = b03.sft_examples(inputs.split("train"), inputs.flowchart, p.prompt,
                                t.rule_detail, t.answer_order)
    tok, base = load_base(repo_path(params.shared.llm.roles[p.role].model), hw, "cpu")
    data, dropped = drop_too_long(tok, examples, t.recipe.max_length, ("completion",))
    # dropout 0: a timing without dropout's randomness
    recipe = t.recipe.model_copy(update={"lora_dropout": 0.0})
    model = with_lora(base, recipe.lora(base.config.model_type))
    trainer = build_sft_trainer(model, tok, data, b03.rem_sft_config(
        t, hw, work, params.shared.seed, 1))
    return trainer, model, hw, len(examples), dropped


def lengths_report(params) -> None:
    """Token lengths of the REM's training examples and what padding costs in one epoch
    of the trainer's own batches (length-grouped sampler, pad to the batch's longest)."""
    import numpy as np

    work = Path(tempfile.mkdtemp(prefix="bench-rem-len-"))
    trainer, _, hw, n_all, dropped = rem_trainer(params, work)
    ds = trainer.train_dataset
    full = np.array([len(r["input_ids"]) for r in ds])
    answer = np.array([sum(1 for x in r["labels"] if x != -100) for r in ds])
    q = [0, 10, 25, 50, 75, 90, 100]
    print(f"{len(ds)} of {n_all} training examples fit max_length "
          f"{params.rem.train.recipe.max_length} ({dropped} dropped)")
    print("tokens per example, percentiles " + ", ".join(f"p{x}" for x in q) + ": "
          + ", ".join(f"{v:.0f}" for v in np.percentile(full, q)))
    print("answer (learned) tokens, percentiles: "
          + ", ".join(f"{v:.0f}" for v in np.percentile(answer, q))
          + f"; learned share of all tokens {answer.sum() / full.sum():.1%}")
    padded = real = batches = 0
    for batch in trainer.get_train_dataloader():
        batches += 1
        padded += batch["input_ids"].numel()
        real += int(batch["attention_mask"].sum())
    print(f"one epoch: {batches} batches of {hw.rem.per_device_train_batch_size} "
          f"(accumulation {hw.rem.gradient_accumulation_steps}); {real} real tokens in {padded} "
          f"padded positions: padding is {1 - real / padded:.1%} of the work packing could "
          "remove")
    shutil.rmtree(work, ignore_errors=True)


def ab_compact_head(params, n_batches: int, repeats: int) -> None:
    """Forward + backward of the REM's first real batches, every position vs compact."""
    import statistics

    from medpref.finetune.hardware import compact_lm_head

    work = Path(tempfile.mkdtemp(prefix="bench-rem-ab-"))
    trainer, model, hw, _, _ = rem_trainer(params, work)
    batches = []
    for batch in trainer.get_train_dataloader():
        batches.append(batch)
        if len(batches) == n_batches:
            break
    sizes = [(int(b["input_ids"].shape[1]), int((b["labels"] != -100).sum())) for b in batches]
    print(f"{len(batches)} batches of {hw.rem.per_device_train_batch_size}: (padded length, "
          f"answer tokens) {sizes}", flush=True)
    model.train()
    wall = {"every position": [], "compact": []}
    cpu = {"every position": [], "compact": []}
    losses = {"every position": [], "compact": []}
    for rep in range(repeats):
        for way in wall:
            t0, c0 = time.perf_counter(), time.process_time()
            with compact_lm_head(way == "compact"):
                for b in batches:
                    loss = trainer.compute_loss(model, dict(b))
                    loss.backward()
                    model.zero_grad(set_to_none=True)
                    if rep == 0:
                        losses[way].append(float(loss))
            wall[way].append(time.perf_counter() - t0)
            cpu[way].append(time.process_time() - c0)
            print(f"  repeat {rep + 1} {way:<15} wall {wall[way][-1]:7.1f} s  "
                  f"cpu {cpu[way][-1]:7.1f} s", flush=True)
    ratio_w = statistics.median(a / b for a, b in zip(wall["compact"], wall["every position"]))
    ratio_c = statistics.median(a / b for a, b in zip(cpu["compact"], cpu["every position"]))
    diff = max(abs(a - b) for a, b in zip(losses["compact"], losses["every position"]))
    print(f"median wall: every position {statistics.median(wall['every position']):.1f} s, "
          f"compact {statistics.median(wall['compact']):.1f} s; compact / every position: "
          f"wall {ratio_w:.2f}, cpu {ratio_c:.2f}; largest loss difference {diff:.1e}")
    shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--adapter", help="score this adapter folder instead of training one")
    ap.add_argument("--eval-per-rule", type=int, default=None,
                    help="a balanced subset of N per rule (default: rem.eval_per_rule)")
    ap.add_argument("--out", help="keep the adapter, losses and predictions here")
    ap.add_argument("--steps", type=int, help="train N optimizer steps, time them, score nothing")
    ap.add_argument("--compact-lm-head", choices=("on", "off"),
                    help="override the hardware's rem.compact_lm_head (default: the file's)")
    ap.add_argument("--ab", type=int, metavar="N",
                    help="A/B of compact_lm_head on N real batches (forward + backward)")
    ap.add_argument("--repeats", type=int, default=3, help="with --ab: rounds of A then B")
    ap.add_argument("--lengths", action="store_true",
                    help="token lengths of the training examples and the padding of an epoch")
    args = ap.parse_args()

    params = load_params()
    if args.lengths:
        lengths_report(params)
        return
    if args.ab:
        ab_compact_head(params, args.ab, args.repeats)
        return
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
