"""LoRA supervised fine-tuning with the loss on the answer only (PLPF §2.2.2).

PLPF trains its REM auto-regressively and "only computes the loss of tokens after the
string 'Assistant'". Here an example is a chat prompt plus the assistant's answer; the
model's chat template renders both, and :class:`AnswerOnlyCollator` masks (label -100)
every token up to and including the last assistant marker, so only the answer and its
end-of-turn token are learned. The result is a PEFT adapter folder that the ``hf``
backend loads through ``RoleConfig.adapter``. The DPO stage reuses the model/LoRA setup.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medpref.training.hardware import Hardware, resolve_bf16

IGNORE_INDEX = -100


@dataclass(frozen=True)
class SFTExample:
    """A prompt (chat messages) and the assistant answer to learn."""

    messages: list[dict[str, str]]
    answer: str


@dataclass(frozen=True)
class LoraSettings:
    r: int = 8
    alpha: int = 16
    dropout: float = 0.05
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")


@dataclass(frozen=True)
class SFTSettings:
    epochs: float = 1.0
    max_steps: int | None = None
    learning_rate: float = 3e-4
    warmup_steps: int = 0
    max_length: int = 512
    seed: int = 0
    logging_steps: int = 5


@dataclass
class TrainResult:
    adapter_dir: Path
    n_train: int
    n_dropped: int
    steps: int
    runtime_s: float
    losses: list[dict[str, float]] = field(default_factory=list)


def response_marker(tokenizer) -> str:
    """The text the chat template puts before an assistant answer (e.g.
    ``<|im_start|>assistant\\n``): the generation prompt minus the bare conversation."""
    msgs = [{"role": "user", "content": "x"}]
    bare = tokenizer.apply_chat_template(msgs, tokenize=False)
    opened = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    if not opened.startswith(bare) or opened == bare:
        raise ValueError("cannot find the assistant marker of this chat template")
    return opened[len(bare):]


def render_example(tokenizer, example: SFTExample) -> str:
    """Prompt and answer as one text in the model's chat template."""
    msgs = list(example.messages) + [{"role": "assistant", "content": example.answer}]
    return tokenizer.apply_chat_template(msgs, tokenize=False)


def encode_examples(tokenizer, examples: Sequence[SFTExample],
                    max_length: int) -> tuple[list[dict[str, list[int]]], int]:
    """Token ids of each example; examples longer than ``max_length`` are dropped (and
    counted) rather than truncated, since truncation would cut the answer."""
    kept, dropped = [], 0
    for ex in examples:
        ids = tokenizer(render_example(tokenizer, ex), add_special_tokens=False)["input_ids"]
        if len(ids) > max_length:
            dropped += 1
            continue
        kept.append({"input_ids": ids})
    return kept, dropped


def _last_index_of(seq: list[int], sub: list[int]) -> int:
    for start in range(len(seq) - len(sub), -1, -1):
        if seq[start:start + len(sub)] == sub:
            return start
    return -1


class AnswerOnlyCollator:
    """Pads a batch and sets labels to -100 on everything but the final answer.

    The answer starts after the last occurrence of the response marker's tokens; a
    sequence without the marker is an error (the mask would otherwise be silently empty
    or cover the prompt). Batches are padded to their longest sequence. With
    ``padding_side="left"`` every answer ends at the last position, so the loss needs
    the LM head only on the batch's last ``answer_width`` positions
    (:class:`AnswerOnlyTrainer`); position ids then count from each row's first token.
    """

    def __init__(self, tokenizer, marker: str | None = None, padding_side: str = "right"):
        if padding_side not in ("left", "right"):
            raise ValueError(f"padding_side must be 'left' or 'right', not {padding_side!r}")
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None \
            else tokenizer.eos_token_id
        self.marker = marker if marker is not None else response_marker(tokenizer)
        self.marker_ids = tokenizer(self.marker, add_special_tokens=False)["input_ids"]
        self.padding_side = padding_side

    def labels_for(self, ids: list[int]) -> list[int]:
        at = _last_index_of(ids, self.marker_ids)
        if at < 0:
            raise ValueError(f"assistant marker {self.marker!r} not found in a training "
                             "sequence; the answer-only loss mask needs it")
        start = at + len(self.marker_ids)
        return [IGNORE_INDEX] * start + ids[start:]

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        width = max(len(f["input_ids"]) for f in features)
        left = self.padding_side == "left"
        ids, labels, mask = [], [], []
        for f in features:
            seq = list(f["input_ids"])
            fill = width - len(seq)
            parts = [(seq, self.labels_for(seq), [1] * len(seq)),
                     ([self.pad_id] * fill, [IGNORE_INDEX] * fill, [0] * fill)]
            if left:
                parts.reverse()
            ids.append(parts[0][0] + parts[1][0])
            labels.append(parts[0][1] + parts[1][1])
            mask.append(parts[0][2] + parts[1][2])
        batch = {"input_ids": torch.tensor(ids), "labels": torch.tensor(labels),
                 "attention_mask": torch.tensor(mask)}
        if left:
            batch["position_ids"] = (batch["attention_mask"].cumsum(-1) - 1).clamp(min=0)
        return batch


def answer_width(labels) -> int:
    """How many last positions of a left-padded batch hold every answer token (the
    first answer token of the widest answer is predicted one position earlier)."""
    import torch

    has = (labels != IGNORE_INDEX).any(dim=0)
    if not bool(has.any()):
        return 1
    first = int(torch.nonzero(has)[0])
    return labels.shape[1] - first


def answer_only_loss(model, batch: dict[str, Any], num_items: int | None = None):
    """Causal-LM loss on a left-padded batch with the LM head run on the answer tail only.

    The same loss as the model's own (mean over answer tokens, or sum / ``num_items``
    across an accumulated batch), without the vocabulary-wide head and softmax on every
    prompt position: with a 49k-token vocabulary that head is about a fifth of a small
    model's forward and backward, and the prompts are most of each sequence."""
    import torch.nn.functional as F

    labels = batch["labels"]
    k = answer_width(labels)
    inputs = {key: v for key, v in batch.items() if key != "labels"}
    # logits of the last k + 1 positions predict the tokens of the last k positions
    logits = model(**inputs, logits_to_keep=k + 1).logits[:, :-1, :].float()
    target = labels[:, -k:]
    total = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1),
                            ignore_index=IGNORE_INDEX, reduction="sum")
    count = num_items if num_items is not None else (target != IGNORE_INDEX).sum()
    return total / count


def _answer_only_trainer():
    """A ``Trainer`` whose loss is :func:`answer_only_loss` (made lazily: transformers is
    imported only when training)."""
    from transformers import Trainer

    class AnswerOnlyTrainer(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            loss = answer_only_loss(model, inputs, num_items_in_batch)
            # a sum over the accumulated batch's tokens is already scaled for accumulation
            self.loss_is_scaled_for_ga = num_items_in_batch is not None
            return (loss, None) if return_outputs else loss

    return AnswerOnlyTrainer


def with_lora(model, lora: LoraSettings):
    """Wrap a causal LM in a fresh LoRA adapter (only the adapter is trainable)."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
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


def planned_steps(n_train: int, hardware: Hardware, sft: SFTSettings) -> int:
    """Optimizer steps of the REM's run: an explicit ``sft.max_steps`` wins; otherwise the
    epochs over ``n_train`` examples, capped by the hardware's ``rem.max_steps``."""
    if sft.max_steps is not None:
        return sft.max_steps
    rem = hardware.rem
    steps = max(1, math.ceil(sft.epochs * math.ceil(n_train / (rem.per_device_batch_size
                                                               * rem.grad_accumulation))))
    return min(steps, rem.max_steps) if rem.max_steps is not None else steps


def train_lora(model_path: str | Path, examples: Sequence[SFTExample], out_dir: str | Path,
               hardware: Hardware, sft: SFTSettings = SFTSettings(),
               lora: LoraSettings = LoraSettings(),
               task_card: dict[str, Any] | None = None) -> TrainResult:
    """Train a LoRA adapter on answer-only loss and save it (atomically) to ``out_dir``.

    ``task_card`` (optional) is saved beside the weights as ``TASK_CARD`` (JSON): how the
    adapter's inputs and answers were formatted, so that users of the adapter can format
    them the same way (:func:`read_task_card`)."""
    from transformers import TrainingArguments, set_seed

    set_seed(sft.seed)
    tok, base = load_base(model_path, hardware)
    data, dropped = encode_examples(tok, examples, sft.max_length)
    if not data:
        raise ValueError(f"no training example fits max_length={sft.max_length}")
    model = with_lora(base, lora)
    steps = planned_steps(len(data), hardware, sft)
    with tempfile.TemporaryDirectory(prefix="sft-") as work:
        rem = hardware.rem
        args = TrainingArguments(
            output_dir=work, per_device_train_batch_size=rem.per_device_batch_size,
            gradient_accumulation_steps=rem.grad_accumulation, max_steps=steps,
            learning_rate=sft.learning_rate, warmup_steps=sft.warmup_steps,
            lr_scheduler_type="linear", bf16=resolve_bf16(hardware),
            activation_checkpointing=rem.gradient_checkpointing,
            logging_steps=sft.logging_steps, save_strategy="no", report_to=[],
            seed=sft.seed, data_seed=sft.seed, use_cpu=(hardware.device == "cpu"),
            dataloader_num_workers=0, remove_unused_columns=False, disable_tqdm=False,
            # batches of similar length pad little (the collator pads to the longest)
            train_sampling_strategy="group_by_length" if rem.group_by_length
            else "random")
        trainer = _answer_only_trainer()(
            model=model, args=args, train_dataset=data,
            data_collator=AnswerOnlyCollator(tok, padding_side="left"))
        t0 = time.perf_counter()
        trainer.train()
        runtime = time.perf_counter() - t0
        losses = [{"step": h["step"], "loss": h["loss"]} for h in trainer.state.log_history
                  if "loss" in h]
    model.peft_config["default"].base_model_name_or_path = portable_path(model_path)
    save_adapter(model, out_dir, task_card)
    return TrainResult(Path(out_dir), len(data), dropped, trainer.state.global_step, runtime,
                       losses)


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
