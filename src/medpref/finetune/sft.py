"""LoRA supervised fine-tuning with trl's ``SFTTrainer``, the loss on the answer only.

One training path for both fine-tunings of this repository: the REM (stage 03, PLPF
§2.2.2: "only computes the loss of tokens after the string 'Assistant'") and the policy's
SFT on doctor turns (stage 05, :mod:`medpref.training.dialogue_sft`). An example is a trl
*prompt-completion* conversation (``{"prompt": [messages], "completion": [assistant]}``);
``SFTTrainer`` with ``completion_only_loss`` masks (label -100) every token of the
rendered prompt, the assistant marker included, so only the answer and its end-of-turn
token are learned. The result is a PEFT adapter folder that the ``hf`` backend loads
through ``RoleConfig.adapter``. The DPO stage reuses the model/LoRA setup.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medpref.finetune.hardware import Hardware
from medpref.finetune.recipe import LoraSettings


@dataclass
class TrainResult:
    adapter_dir: Path
    n_train: int
    n_dropped: int
    steps: int
    runtime_s: float
    losses: list[dict[str, float]] = field(default_factory=list)


def with_lora(model, lora: LoraSettings):
    """Wrap a causal LM in a fresh LoRA adapter (only the adapter is trainable)."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=lora.r, lora_alpha=lora.lora_alpha, lora_dropout=lora.lora_dropout,
                        target_modules=list(lora.target_modules), task_type="CAUSAL_LM")
    return get_peft_model(model, config)


def load_base(model_path: str | Path, hardware: Hardware, device: str | None = None):
    """Tokenizer and float32 base model on the hardware's device, or on ``device`` (the
    policy is loaded on the CPU: the Trainer, or accelerate under a launcher, moves it to
    its process's device). bf16 is left to the Trainer's autocast, so CPU runs stay in
    fast float32."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if hardware.num_threads:
        torch.set_num_threads(hardware.num_threads)
    tok = AutoTokenizer.from_pretrained(model_path)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    device = device or hardware.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return tok, model.to(device)


def token_length(tokenizer, messages: list[dict[str, str]]) -> int:
    """Tokens of a conversation in the model's chat template."""
    return len(tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True)
               ["input_ids"])


def drop_too_long(tokenizer, examples: list[dict[str, Any]], max_length: int,
                  parts: tuple[str, ...]) -> tuple[list[dict[str, Any]], int]:
    """Examples whose prompt plus longest answer fits ``max_length`` tokens; truncating
    would cut the learned answer, so longer ones are dropped (and counted)."""
    kept = [ex for ex in examples
            if max(token_length(tokenizer, ex["prompt"] + ex[part]) for part in parts)
            <= max_length]
    return kept, len(examples) - len(kept)


def build_sft_trainer(model, tok, data: list[dict[str, Any]], args, callbacks: tuple = (),
                      eval_data: list[dict[str, Any]] | None = None,
                      compact_lm_head: bool = False):
    """``SFTTrainer`` over prompt-completion examples; ``args`` is an ``SFTConfig`` with
    ``completion_only_loss=True`` (the loss on the completion alone). ``eval_data``, when
    given, is what ``evaluate`` scores, with the same loss. ``compact_lm_head`` (a hardware
    section's key): the LM head on the learned positions only, on a CPU too
    (:func:`medpref.finetune.hardware.compact_lm_head`)."""
    from datasets import Dataset
    from trl import SFTTrainer

    from medpref.finetune.hardware import train_with_compact_head

    return train_with_compact_head(SFTTrainer(
        model=model, args=args, train_dataset=Dataset.from_list(data),
        eval_dataset=Dataset.from_list(eval_data) if eval_data else None,
        processing_class=tok, callbacks=list(callbacks)), compact_lm_head)


def portable_path(path: str | Path) -> str:
    """A path inside the repository as a repo-relative string (the adapter's config, and
    so its cache fingerprint, then does not depend on where the checkout lives)."""
    from medpref import REPO_ROOT

    path = Path(path).resolve()
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


TASK_CARD = "medpref_task.json"


def read_task_card(adapter_dir: str | Path) -> dict[str, Any]:
    """The task card saved with an adapter ({} for an adapter saved without one)."""
    path = Path(adapter_dir) / TASK_CARD
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def write_canonical_config(folder: Path) -> None:
    """Rewrite a saved adapter's config with peft's set-valued lists in sorted order."""
    from medpref.identity import canonical_adapter_config

    config = Path(folder) / "adapter_config.json"
    if config.exists():
        config.write_text(canonical_adapter_config(config.read_text(encoding="utf-8")),
                          encoding="utf-8")


def save_adapter(model, out_dir: str | Path, task_card: dict[str, Any] | None = None) -> Path:
    """Write the adapter (and its task card) to a temporary folder beside ``out_dir``,
    then swap it in."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        model.save_pretrained(tmp)
        write_canonical_config(tmp)
        if task_card is not None:
            (tmp / TASK_CARD).write_text(json.dumps(task_card, indent=2, sort_keys=True) + "\n",
                                         encoding="utf-8")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        tmp.chmod(0o755)  # mkdtemp (and safetensors) make it private; it is a shared product
        for f in tmp.iterdir():
            f.chmod(0o644)
        tmp.rename(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir
