"""Benchmark: the policy's SFT on CPU at batch 1 vs larger batches, padded or padding-free.

Every setting trains the same ``--examples`` doctor-turn examples of the training split
(the stage's own examples: ``shared.split``'s train dialogues, the recipe's context and
length limits) once, from a fresh LoRA on the embedded model, with the stage's trainer
arguments and only the batch settings changed. Printed per setting: optimizer steps, wall
seconds of ``trainer.train`` (model load excluded) and the CPU seconds this process used
meanwhile, tokens per CPU second (every token of prompt + answer, padding not counted)
and the CPU seconds one epoch over every training example would take at that rate. On a
shared, oversubscribed CPU the wall time moves with the other jobs; the CPU time much less
(with one torch thread it is close to the wall time the same work takes on an idle core).
The load (1-minute average) before and after each setting is printed too.

    nice -n 10 .venv/bin/python benchmarks/bench_sft.py --examples 48 \\
        --settings 1:pad 4:pad 8:pad 4:free 8:free
"""

from __future__ import annotations

import argparse
import os
import time

from medpref.data.split import load_split
from medpref.finetune.sft import build_sft_trainer, drop_too_long, load_base, with_lora
from medpref.params import load_params, repo_path
from medpref.prompts import load_prompt
from medpref.training.dialogue_sft import (
    load_dialogues,
    sft_config,
    sft_examples,
    split_corpus,
)


def hardware_for(hardware, batch: int, padding_free: bool):
    policy = hardware.policy.model_copy(update={
        "per_device_train_batch_size": batch, "per_device_eval_batch_size": batch,
        "gradient_accumulation_steps": 1, "padding_free": padding_free,
        "save_steps": 10_000, "logging_steps": 1})
    return hardware.model_copy(update={"policy": policy})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=48)
    ap.add_argument("--settings", nargs="+", default=["1:pad", "4:pad", "8:pad", "8:free"],
                    help="batch:pad or batch:free (padding-free)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", default="benchmarks/results/bench_sft")
    args = ap.parse_args()
    params = load_params()
    p = params.training
    recipe, hardware = p.active_recipe(), p.active_hardware()
    if args.threads:
        hardware = hardware.model_copy(update={"num_threads": args.threads})
    prompt = load_prompt(p.sft.system_prompt).system.strip()
    dialogues, sources = load_dialogues(p.sft)
    corpus = split_corpus(dialogues, sources, load_split(repo_path(params.shared.split)))
    every = sft_examples(corpus.train, prompt, None, params.shared.seed,
                         recipe.history_max_turns, p.sft.turn_quality)
    base_path = repo_path(params.shared.llm.roles[p.base_role].model)
    tok, _ = load_base(base_path, hardware, device="cpu")
    every, _ = drop_too_long(tok, every, recipe.sft.max_length, ("completion",))
    data = every[:args.examples]

    def tokens(ex) -> int:
        return len(tok.apply_chat_template(ex["prompt"] + ex["completion"], tokenize=True,
                                           return_dict=True)["input_ids"])

    n_tokens = sum(tokens(ex) for ex in data)
    print(f"{len(data)} examples ({len(every)} in an epoch), {n_tokens} tokens, "
          f"{n_tokens / len(data):.0f} a example; torch threads {hardware.num_threads}")
    print("setting     steps  wall_s   cpu_s  tok/cpu_s  epoch_cpu_s  load_before  load_after")
    for setting in args.settings:
        batch, mode = setting.split(":")
        hw = hardware_for(hardware, int(batch), mode == "free")
        _, base = load_base(base_path, hw, device="cpu")
        model = with_lora(base, recipe.sft.lora(base.config.model_type))
        cfg = sft_config(recipe.sft.model_copy(update={"num_train_epochs": 1, "max_steps": None}),
                         hw, f"{args.out}/{batch}-{mode}", params.shared.seed)
        cfg.disable_tqdm = True
        trainer = build_sft_trainer(model, tok, data, cfg)
        load0 = os.getloadavg()[0]
        t0, c0 = time.perf_counter(), time.process_time()
        trainer.train()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        print(f"{setting:<10} {trainer.state.global_step:>6} {wall:>7.1f} {cpu:>7.1f} "
              f"{n_tokens / cpu:>10.0f} {len(every) / len(data) * cpu:>12.0f} "
              f"{load0:>12.2f} {os.getloadavg()[0]:>11.2f}", flush=True)


if __name__ == "__main__":
    main()
