"""Stage 05's training of a recipe on a hardware: SFT, then DPO from its adapter.

It runs the stage's own functions (``train_dialogue_sft``, ``train_dpo``) on a Llama-shaped
model built from a config (random weights: no weights travel to a GPU machine; the speed
and memory of a step do not depend on what the weights are), with the recipe's LoRA,
learning rate and lengths (``training.recipes.<name>``) and the hardware's batch,
accumulation, precision and gradient checkpointing (``configs/hardware/<name>.yaml``), and
prints what a user planning a GPU run needs: optimizer steps, trl's token count over the
trainer's runtime (tokens/s), peak GPU memory, whether bf16 and gradient checkpointing were
on, and that the DPO step moved the LoRA weights away from the SFT adapter.

Examples come from the embedded dialogues with their whole history (the paper recipe keeps
every turn), so prompts are hundreds of tokens long, as real consultations are.

Usage (on a machine with a CUDA GPU; on a CPU use a small ``--layers``/``--hidden``):
    python benchmarks/bench_train_gpu.py [--recipe paper] [--hardware gpu] [--hidden 2048]
        [--layers 16] [--sft-steps 4] [--dpo-steps 4] [--max-length N] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from medpref import REPO_ROOT
from medpref.contracts import Dialogue, read_jsonl
from medpref.finetune.hardware import load_hardware, resolve_bf16
from medpref.params import load_params
from medpref.training.dialogue_sft import sft_examples, train_dialogue_sft
from medpref.training.dpo import train_dpo

TOKENIZER = REPO_ROOT / "models" / "smollm2-135m-instruct"
SYSTEM = "You are a doctor talking with a patient."


def build_model(folder: Path, hidden: int, layers: int, tokenizer: Path) -> tuple[Path, int]:
    """A Llama-shaped model from a config (random weights), saved with the tokenizer."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(tokenizer)
    torch.manual_seed(0)
    heads = max(4, hidden // 64)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=hidden,
                         intermediate_size=int(hidden * 2.75) // 64 * 64,
                         num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=max(1, heads // 4),
                         max_position_embeddings=4096, pad_token_id=tok.pad_token_id,
                         tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder, n_params


def dpo_pairs(dialogues: list[Dialogue], n: int) -> list[dict]:
    """The whole history up to a doctor turn; chosen = that turn, rejected = a doctor turn
    of another dialogue (a learnable preference with realistic lengths)."""
    out = []
    for i in range(n):
        turns = dialogues[i % len(dialogues)].turns
        k = max(j for j, t in enumerate(turns) if t.role == "doctor" and j > 0)
        other = [t.text for t in dialogues[(i + 7) % len(dialogues)].turns
                 if t.role == "doctor"][-1]
        prompt = [{"role": "system", "content": SYSTEM}] + [
            {"role": "assistant" if t.role == "doctor" else "user", "content": t.text}
            for t in turns[:k]]
        out.append({"prompt": prompt, "chosen": [{"role": "assistant", "content": turns[k].text}],
                    "rejected": [{"role": "assistant", "content": other}]})
    return out


def tokens_per_s(logs: list[dict]) -> tuple[float, float]:
    tokens = max((h["num_tokens"] for h in logs if "num_tokens" in h), default=0.0)
    runtime = next(h["train_runtime"] for h in logs if "train_runtime" in h)
    return tokens, runtime


def lora_shift(a: Path, b: Path) -> float:
    """Largest absolute difference between two adapters' LoRA tensors (same names)."""
    from safetensors.torch import load_file

    wa, wb = load_file(str(a / "adapter_model.safetensors")), \
        load_file(str(b / "adapter_model.safetensors"))
    return max(float((wa[k].float() - wb[k].float()).abs().max()) for k in wa if k in wb)


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", default="paper", help="training.recipes.<name>")
    ap.add_argument("--hardware", default="gpu", help="configs/hardware/<name>.yaml")
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--sft-steps", type=int, default=4)
    ap.add_argument("--dpo-steps", type=int, default=4)
    ap.add_argument("--tokenizer", type=Path, default=TOKENIZER)
    ap.add_argument("--max-length", type=int, default=None, help="override the recipe's")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    params = load_params()
    recipe = params.training.recipes[a.recipe]
    hardware = load_hardware(a.hardware)
    hardware = hardware.model_copy(update={
        "policy": hardware.policy.model_copy(update={"save_steps": 10**6})})
    if a.max_length:
        recipe = recipe.model_copy(update={
            kind: getattr(recipe, kind).model_copy(update={"max_length": a.max_length})
            for kind in ("sft", "dpo")})
    per_step = (hardware.policy.per_device_train_batch_size
                * hardware.policy.gradient_accumulation_steps)
    dialogues = read_jsonl(REPO_ROOT / "data/embedded/dialogues.jsonl", Dialogue)
    sft_data = sft_examples(dialogues, SYSTEM, None, seed=0,
                            history_max_turns=recipe.history_max_turns)
    sft_data = (sft_data * (1 + per_step * a.sft_steps // len(sft_data)))[:per_step * a.sft_steps]
    pairs = dpo_pairs(dialogues, per_step * a.dpo_steps)
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    summary: dict = {"device": device, "recipe": a.recipe, "hardware": a.hardware,
                     "bf16": resolve_bf16(hardware),
                     "gradient_checkpointing": hardware.policy.gradient_checkpointing,
                     "lora_r": recipe.sft.r,
                     "batch": hardware.policy.per_device_train_batch_size,
                     "accumulation": hardware.policy.gradient_accumulation_steps,
                     "max_length": recipe.sft.max_length}
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        model, n_params = build_model(tmp / "model", a.hidden, a.layers, a.tokenizer)
        summary.update(params_m=round(n_params / 1e6, 1), hidden=a.hidden, layers=a.layers,
                       build_s=round(time.perf_counter() - t0, 1))
        for part in ("sft", "dpo"):
            if torch.cuda.is_available():
                torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            if part == "sft":
                short = recipe.sft.model_copy(update={"max_steps": a.sft_steps})
                run = train_dialogue_sft(model, sft_data, tmp / "sft", tmp / "ck_sft", short,
                                         hardware, seed=0)
                n = run.n_examples
            else:
                short = recipe.dpo.model_copy(update={"max_steps": a.dpo_steps})
                run = train_dpo(model, tmp / "sft", pairs, tmp / "dpo", tmp / "ck_dpo", short,
                                hardware, seed=0, eval_pairs=4)
                n = run.n_pairs
                summary["dpo_lora_shift_vs_sft"] = lora_shift(tmp / "sft", tmp / "dpo")
                summary["dpo_reward_accuracy_eval"] = run.evaluation.get("rewards/accuracies")
            tokens, runtime = tokens_per_s(run.fit.log_history)
            losses = [h["loss"] for h in run.fit.log_history if "loss" in h]
            summary[part] = {"examples": n, "dropped_too_long": run.n_dropped,
                             "steps": run.fit.steps, "train_s": round(runtime, 1),
                             "wall_s": round(time.perf_counter() - t0, 1),
                             "tokens": tokens, "tokens_per_s": round(tokens / runtime, 1),
                             "first_loss": losses[0] if losses else None,
                             "last_loss": losses[-1] if losses else None,
                             "peak_gpu_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)
                             if torch.cuda.is_available() else None}
    print(json.dumps(summary, indent=2))
    if a.json:
        a.json.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
