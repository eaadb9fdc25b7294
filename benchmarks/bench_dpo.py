"""DPO throughput: this stage's training path against a minimal plain-trl script.

In one run, on the same pairs, model, LoRA and trainer settings, it times

1. **stage** — ``medpref.training.dpo.train_dpo``: the policy starts from a LoRA adapter
   (as stage 05 starts from the SFT adapter), trl's frozen ``ref`` copy is the reference,
   checkpoints every ``--save-steps`` (the resume points), adapter saved at the end;
2. **plain** — the few lines of trl's documentation: ``DPOTrainer(model, args=DPOConfig(...),
   peft_config=LoraConfig(...))``, reference = the base with the adapter disabled, no
   checkpoints.

Throughput is trl's own count of non-padding training tokens (``num_tokens``) over the
trainer's ``train_runtime``; the runs alternate (stage, plain, stage, ...) and the median
of ``--repeats`` is shown with the ratio (goal ≥ 0.9). CPU seconds of each whole run
(loading, tokenizing, training; the stage also checkpoints, evaluates one pair and saves
its adapter) are printed too: they do not depend on how busy a shared machine is. The model
is built from a config (small) unless ``--model`` names a folder
(e.g. models/smollm2-135m-instruct).

Usage: .venv/bin/python benchmarks/bench_dpo.py [--model PATH] [--pairs 16] [--steps 4]
       [--batch 2] [--max-length 256] [--repeats 3] [--save-steps 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from medpref import REPO_ROOT
from medpref.contracts import Dialogue, read_jsonl
from medpref.finetune.hardware import load_hardware
from medpref.finetune.sft import load_base, save_adapter, with_lora
from medpref.params import load_params
from medpref.training.dpo import train_dpo

TOKENIZER = REPO_ROOT / "models" / "smollm2-135m-instruct"
SYSTEM = "You are a doctor talking with a patient."


def bench_pairs(n: int) -> list[dict]:
    """Conversational pairs from the embedded dialogues: the real doctor answer (chosen)
    against another dialogue's doctor turn (rejected)."""
    rows = read_jsonl(REPO_ROOT / "data/embedded/dialogues.jsonl", Dialogue)
    out = []
    for i in range(n):
        turns = rows[i % len(rows)].turns
        other = [t.text for t in rows[(i + 7) % len(rows)].turns if t.role == "doctor"][-1]
        out.append({"prompt": [{"role": "system", "content": SYSTEM},
                               {"role": "user", "content": turns[0].text}],
                    "chosen": [{"role": "assistant", "content": turns[1].text}],
                    "rejected": [{"role": "assistant", "content": other}]})
    return out


def small_model(folder: Path) -> Path:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(TOKENIZER)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=256, intermediate_size=688,
                         num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=1024, pad_token_id=tok.pad_token_id,
                         tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def start_adapter(model_path: Path, recipe, hardware, folder: Path) -> Path:
    """A fresh LoRA adapter saved like the SFT adapter the stage starts DPO from."""
    _, base = load_base(model_path, hardware, device="cpu")
    save_adapter(with_lora(base, recipe.lora(base.config.model_type)), folder)
    return folder


def throughput(logs: list[dict]) -> tuple[float, float, float]:
    """(tokens, train seconds, tokens/s) from a trainer's log history."""
    tokens = max(h["num_tokens"] for h in logs if "num_tokens" in h)
    runtime = next(h["train_runtime"] for h in logs if "train_runtime" in h)
    return tokens, runtime, tokens / runtime


def run_stage(model_path, adapter, data, recipe, hardware, work: Path) -> dict:
    t0 = time.process_time()
    run = train_dpo(model_path, adapter, data, work / "out", work / "ckpt", recipe, hardware,
                    seed=0, eval_pairs=1)
    tokens, secs, rate = throughput(run.fit.log_history)
    return {"tokens": tokens, "train_s": secs, "tokens_per_s": rate,
            "cpu_s": time.process_time() - t0}


def run_plain(model_path, data, recipe, hardware, work: Path) -> dict:
    """The minimal trl recipe (same batch, length, LoRA, precision and checkpointing)."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    t0 = time.process_time()
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    lora = recipe.lora(model.config.model_type)
    args = DPOConfig(output_dir=str(work / "plain"), max_steps=recipe.max_steps,
                     per_device_train_batch_size=hardware.policy.per_device_train_batch_size,
                     gradient_accumulation_steps=hardware.policy.gradient_accumulation_steps,
                     learning_rate=recipe.learning_rate, max_length=recipe.max_length,
                     bf16=False, gradient_checkpointing=False, save_strategy="no",
                     report_to=[], logging_steps=1, use_cpu=not torch.cuda.is_available())
    trainer = DPOTrainer(model=model, args=args, train_dataset=Dataset.from_list(data),
                         processing_class=tok,
                         peft_config=LoraConfig(r=lora.r, lora_alpha=lora.lora_alpha,
                                                lora_dropout=lora.lora_dropout,
                                                target_modules=list(lora.target_modules),
                                                task_type="CAUSAL_LM"))
    trainer.train()
    tokens, secs, rate = throughput(trainer.state.log_history)
    return {"tokens": tokens, "train_s": secs, "tokens_per_s": rate,
            "cpu_s": time.process_time() - t0}


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None, help="model folder (default: small, "
                    "built from a config)")
    ap.add_argument("--pairs", type=int, default=16)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--save-steps", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    a = ap.parse_args()
    recipe = load_params().training.recipes["tiny"].dpo.model_copy(update={
        "max_steps": a.steps, "num_train_epochs": 100, "max_length": a.max_length})
    cpu = load_hardware("cpu")
    hardware = cpu.model_copy(update={"device": "auto", "bf16": "auto", "policy": cpu.policy
                                      .model_copy(update={"per_device_train_batch_size": a.batch,
                                                          "gradient_accumulation_steps": 1,
                                                          "save_steps": a.save_steps,
                                                          "logging_steps": 1})})
    data = bench_pairs(a.pairs)
    with tempfile.TemporaryDirectory(prefix="bench-dpo-") as tmp:
        tmp = Path(tmp)
        model_path = a.model or small_model(tmp / "model")
        adapter = start_adapter(model_path, recipe, hardware, tmp / "start_adapter")
        results: dict[str, list[dict]] = {"stage": [], "plain": []}
        for i in range(a.repeats):
            results["stage"].append(run_stage(model_path, adapter, data, recipe, hardware,
                                              tmp / f"s{i}"))
            results["plain"].append(run_plain(model_path, data, recipe, hardware, tmp / f"p{i}"))
    med = {k: statistics.median(r["tokens_per_s"] for r in v) for k, v in results.items()}
    cpu = {k: statistics.median(r["cpu_s"] for r in v) for k, v in results.items()}
    device = "cuda:" + torch.cuda.get_device_name(0) if torch.cuda.is_available() else \
        f"cpu ({torch.get_num_threads()} threads)"
    summary = {"device": device, "model": str(a.model or "llama from config (h256, 4 layers)"),
               "batch_size": a.batch, "max_length": a.max_length, "steps": a.steps,
               "pairs": a.pairs, "repeats": a.repeats,
               "tokens_per_step": results["stage"][0]["tokens"] / a.steps,
               "stage_tokens_per_s": round(med["stage"], 1),
               "plain_tokens_per_s": round(med["plain"], 1),
               "ratio_stage_over_plain": round(med["stage"] / med["plain"], 3),
               "stage_cpu_s": round(cpu["stage"], 1), "plain_cpu_s": round(cpu["plain"], 1),
               "runs": results}
    print(f"device {device} | batch {a.batch} | max_length {a.max_length} | "
          f"{a.steps} steps x {a.repeats} repeats | model {summary['model']}")
    print(f"stage DPO  {med['stage']:8.1f} tokens/s  (median; CPU {cpu['stage']:.1f} s a run)")
    print(f"plain trl  {med['plain']:8.1f} tokens/s  (median; CPU {cpu['plain']:.1f} s a run)")
    print(f"ratio stage/plain = {summary['ratio_stage_over_plain']:.3f} (goal >= 0.9)")
    if a.json:
        a.json.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
