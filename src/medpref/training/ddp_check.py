"""Do data-parallel replicas end with the same LoRA weights? (a known trl/peft pitfall)

Run it under a launcher, one process per device::

    accelerate launch --config_file configs/hardware/accelerate/multi_gpu_ddp.yaml \\
        --num_processes 2 -m medpref.training.ddp_check --out benchmarks/results/ddp_check

Every process trains the same few DPO steps of a tiny model built from a config (through
:func:`medpref.training.dpo.train_dpo`, the stage's own path) on its own shard of the
pairs, then writes its trained LoRA weights; the main process compares all of them and
exits 1 when any replica differs. Nothing here is distributed by hand: accelerate starts
the processes and the Trainer wraps the model in DDP.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from medpref import REPO_ROOT

TOKENIZER = REPO_ROOT / "models" / "smollm2-135m-instruct"


def tiny_model(folder: Path) -> Path:
    """A 2-layer llama with the embedded tokenizer (same seed, so same on every rank)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(TOKENIZER)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=512, pad_token_id=tok.pad_token_id)
    LlamaForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def pairs(n: int) -> list[dict]:
    """Conversational pairs that differ from one another (so shards differ by rank)."""
    return [{"prompt": [{"role": "user",
                         "content": f"My symptom number {i} started {i} days ago."}],
             "chosen": [{"role": "assistant", "content": f"How bad is symptom {i} now?"}],
             "rejected": [{"role": "assistant", "content": "Go away."}]} for i in range(n)]



def main(argv: list[str] | None = None) -> int:
    from accelerate import PartialState
    from safetensors.torch import load_file, save_file
    from transformers import TrainerCallback

    from medpref.finetune.hardware import load_hardware
    from medpref.params import load_params
    from medpref.training.dpo import train_dpo

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args(argv)
    import torch

    state = PartialState(cpu=not torch.cuda.is_available())  # CPU processes: gloo
    out = args.out
    with state.main_process_first():
        if state.is_main_process:
            out.mkdir(parents=True, exist_ok=True)
            tiny_model(out / "model")
    recipe = load_params().training.recipes["tiny"].dpo.model_copy(update={
        "max_steps": args.steps, "num_train_epochs": 50, "learning_rate": 5e-3})
    cpu = load_hardware("cpu")  # its batch 1 × 1, on whatever devices the launcher gives
    hardware = cpu.model_copy(update={
        "device": "auto", "bf16": "auto", "num_threads": 1,
        "policy": cpu.policy.model_copy(update={"save_steps": 1000})})
    captured: dict = {}

    class Capture(TrainerCallback):  # the weights as training leaves them, per process
        def on_train_end(self, targs, tstate, control, model=None, **kwargs):
            captured.update({k: v.detach().float().cpu().clone()
                             for k, v in model.named_parameters()
                             if "lora_" in k and ".default." in k})

    train_dpo(out / "model", None, pairs(8 * state.num_processes), out / "adapter",
              out / "ckpt", recipe, hardware, seed=0,
              callbacks=(Capture(),))
    save_file(captured, str(out / f"rank{state.process_index}.safetensors"))
    state.wait_for_everyone()
    if not state.is_main_process:
        return 0
    ranks = [load_file(str(out / f"rank{r}.safetensors")) for r in range(state.num_processes)]
    worst = max(float((ranks[0][k] - other[k]).abs().max()) for other in ranks[1:]
                for k in ranks[0])
    moved = load_file(str(out / "rank0.safetensors"))
    report = {"processes": state.num_processes, "tensors": len(ranks[0]),
              "max_abs_difference": worst, "device": str(state.device),
              "identical": worst == 0.0 and len(moved) > 0}
    (out / "ddp_check.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report))
    return 0 if report["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
