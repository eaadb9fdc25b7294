"""Benchmark: seconds per optimizer step of the REM's LoRA fine-tuning (stage 03).

Takes the REM's real training examples (params ``rem``) and the hardware (its `rem` section), and
times ``--steps`` optimizer steps of LoRA training on the embedded model three ways:

* ``before``: right padding, the LM head and loss on every position, random batches
  (what ``train_lora`` did before);
* ``answer_head``: left padding, the LM head on the answer tail only (same loss);
* ``after``: that plus length-grouped batches (``group_by_length``), what runs now.

Each variant sees the same batches (the first ``--steps`` of its sampler order), so
the per-step times compare the work, not the data. Also prints the token lengths of the
training set (padding waste per batch). CPU time is the steadier number on a shared
machine.

Usage: PYTHONPATH=src .venv/bin/python benchmarks/bench_sft.py [--steps 3] [--variants before,after]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

from medpref.params import load_params
from medpref.rem import build_rem
from medpref.training.hardware import load_hardware
from medpref.training.sft import (
    AnswerOnlyCollator,
    LoraSettings,
    answer_only_loss,
    encode_examples,
    load_base,
    with_lora,
)


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def batches(data, per_step: int, steps: int, grouped: bool, seed: int) -> list[list[dict]]:
    """The first ``steps`` batches of a random or a length-grouped order."""
    import torch
    from transformers.trainer_pt_utils import get_length_grouped_indices

    g = torch.Generator().manual_seed(seed)
    if grouped:
        order = get_length_grouped_indices([len(d["input_ids"]) for d in data], per_step,
                                           generator=g)
    else:
        order = torch.randperm(len(data), generator=g).tolist()
    return [[data[i] for i in order[s * per_step:(s + 1) * per_step]] for s in range(steps)]


def time_steps(model, optimizer, collator, plan, micro: int, answer_head: bool):
    walls, cpus, tokens = [], [], 0
    for step_batch in plan:
        w0, c0 = time.perf_counter(), cpu_s()
        optimizer.zero_grad()
        for m in range(0, len(step_batch), micro):
            batch = collator(step_batch[m:m + micro])
            tokens += batch["input_ids"].numel()
            if answer_head:
                loss = answer_only_loss(model, batch)
            else:
                loss = model(**batch).loss
            (loss / max(1, len(step_batch) // micro)).backward()
        optimizer.step()
        walls.append(time.perf_counter() - w0)
        cpus.append(cpu_s() - c0)
    return walls, cpus, tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--variants", default="before,answer_head,after")
    args = ap.parse_args()

    import torch

    params = load_params()
    p = params.rem
    hw = load_hardware(p.train.hardware)
    inputs = build_rem.load_inputs(p)
    examples = build_rem.sft_examples(inputs.split("train"), inputs.flowchart, p.prompt,
                                      p.train.rule_detail, p.train.answer_order)
    base_path = params.shared.llm.roles[p.role].model
    tok, base = load_base(build_rem.repo_path(base_path), hw)
    data, dropped = encode_examples(tok, examples, p.train.max_length)
    lengths = sorted(len(d["input_ids"]) for d in data)
    print(f"train examples {len(data)} (dropped {dropped}); tokens min "
          f"{lengths[0]} median {statistics.median(lengths):.0f} max {lengths[-1]}")
    per_step = hw.rem.per_device_batch_size * hw.rem.grad_accumulation
    model = with_lora(base, LoraSettings(r=p.train.lora_r, alpha=p.train.lora_alpha,
                                         dropout=p.train.lora_dropout,
                                         target_modules=tuple(p.train.target_modules)))
    model.train()
    optimizer = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=1e-5)
    print(f"threads {torch.get_num_threads()}; batch {hw.rem.per_device_batch_size} x "
          f"{hw.rem.grad_accumulation} accumulation; {args.steps} steps per variant")
    print(f"{'variant':<12}{'wall s/step':>12}{'cpu s/step':>12}{'tokens/step':>12}")
    for variant in args.variants.split(","):
        grouped = variant == "after"
        answer_head = variant in ("answer_head", "after")
        collator = AnswerOnlyCollator(tok, padding_side="left" if answer_head else "right")
        plan = batches(data, per_step, args.steps, grouped, seed=params.shared.seed)
        walls, cpus, tokens = time_steps(model, optimizer, collator, plan,
                                         hw.rem.per_device_batch_size, answer_head)
        print(f"{variant:<12}{statistics.mean(walls):>12.1f}{statistics.mean(cpus):>12.1f}"
              f"{tokens / len(plan):>12.0f}")


if __name__ == "__main__":
    main()
