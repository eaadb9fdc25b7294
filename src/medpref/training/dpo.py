"""DPO from the SFT policy on one annotation strategy's pairs (PLPF Eq. 5).

Eq. 5 is trl's sigmoid DPO loss with λ = ``beta`` and the SFT model as π_sft. The policy
starts as base + SFT adapter (trainable); trl copies that adapter into a frozen ``ref``
adapter, so the reference log-probabilities are exactly the SFT model's. The trained
``default`` adapter alone is saved: base + adapter is the policy, which the ``hf``
backend loads through ``RoleConfig.adapter``.

Pairs (contract "Labeled preference pair") become trl's *conversational* format: the
history as chat messages (patient → user, doctor → assistant, after the policy's system
prompt) and each answer as one assistant message. trl applies the chat template once,
when it tokenizes; nothing here renders text.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medpref.contracts import PreferencePair, read_jsonl
from medpref.finetune.hardware import Hardware
from medpref.finetune.recipe import Recipe, trainer_arguments
from medpref.finetune.runs import (
    FitResult,
    finish_checkpoints,
    fit,
    last_logged,
    run_key,
    save_trained_adapter,
)
from medpref.finetune.sft import drop_too_long, load_base, portable_path
from medpref.identity import content_id
from medpref.training.arguments import few_steps_warning
from medpref.training.dialogue_sft import clip_history
from medpref.training.sft_data import turns_to_chat

_log = logging.getLogger(__name__)

#: the DPO numbers a run reports (trl's names)
REWARD_KEYS = ["loss", "rewards/chosen", "rewards/rejected", "rewards/margins",
               "rewards/accuracies", "logps/chosen", "logps/rejected"]


def pair_to_conversation(pair: PreferencePair, system_prompt: str,
                         history_max_turns: int | None = None) -> dict[str, Any]:
    """``{"prompt": [messages], "chosen": [assistant], "rejected": [assistant]}``; the
    prompt keeps the last ``history_max_turns`` turns of the pair's history."""
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return {"prompt": clip_history(system + turns_to_chat(pair.prompt), history_max_turns),
            "chosen": [{"role": "assistant", "content": pair.chosen}],
            "rejected": [{"role": "assistant", "content": pair.rejected}]}


def load_pairs(path: str | Path, max_pairs: int | None, seed: int) -> list[PreferencePair]:
    """The pairs of a file (a seeded subset of ``max_pairs`` when set). An empty file (a
    strategy that made no pair: stage 04 writes it all the same) has none."""
    pairs = read_jsonl(path, PreferencePair, allow_empty=True)
    if max_pairs is not None and len(pairs) > max_pairs:
        pairs = random.Random(seed).sample(pairs, max_pairs)
    return pairs


def skip_reason(path: Path, n_pairs: int | None, min_pairs: int) -> str | None:
    """Why a run cannot train (``None``: it can)."""
    if n_pairs is None:
        return f"no pairs file {path}"
    if n_pairs < min_pairs:
        return f"{n_pairs} pairs < min_pairs {min_pairs}"
    return None


@dataclass
class DPORun:
    adapter_dir: Path
    n_pairs: int
    n_dropped: int
    fit: FitResult
    final: dict[str, float]        # last logged training values
    evaluation: dict[str, float]   # one pass over (up to eval_pairs of) the training pairs
    card: dict[str, Any] = field(default_factory=dict)
    warning: str = ""              # few optimizer steps (see ``few_steps_warning``)


def policy_model(base_path: str | Path, sft_adapter: str | Path | None, hardware: Hardware):
    """Tokenizer and the model DPO trains: base + the SFT adapter (trainable), or the bare
    base when there is no SFT adapter (then trl adds a fresh LoRA and the reference is the
    base with the adapter disabled)."""
    from peft import PeftModel

    tok, base = load_base(base_path, hardware, device="cpu")
    if sft_adapter is None:
        return tok, base
    return tok, PeftModel.from_pretrained(base, str(sft_adapter), is_trainable=True)


def dpo_config(recipe: Recipe, hardware: Hardware, ckpt_dir: str | Path, seed: int):
    """The DPO recipe (``beta``, ``loss_type``, ``num_train_epochs`` whole epochs over the
    pairs or its ``max_steps``) under the hardware's ``policy`` section."""
    from trl import DPOConfig

    return DPOConfig(**trainer_arguments(recipe, hardware.policy, hardware, ckpt_dir, seed,
                                         DPOConfig)
                     | {"padding_free": False})  # trl 1.16 turns it off for DPO anyway


def build_dpo_trainer(model, tok, data: list[dict[str, Any]], eval_data: list[dict[str, Any]],
                      args, recipe: Recipe, callbacks: tuple = ()):
    from datasets import Dataset
    from peft import LoraConfig, PeftModel
    from trl import DPOTrainer

    peft_config = None
    if not isinstance(model, PeftModel):
        lora = recipe.lora(model.config.model_type)
        peft_config = LoraConfig(r=lora.r, lora_alpha=lora.lora_alpha,
                                 lora_dropout=lora.lora_dropout,
                                 target_modules=list(lora.target_modules), task_type="CAUSAL_LM")
    return DPOTrainer(model=model, args=args, train_dataset=Dataset.from_list(data),
                      eval_dataset=Dataset.from_list(eval_data) if eval_data else None,
                      processing_class=tok, peft_config=peft_config,
                      callbacks=list(callbacks))


def train_dpo(base_path: str | Path, sft_adapter: str | Path | None,
              examples: list[dict[str, Any]], out_dir: str | Path, ckpt_dir: str | Path,
              recipe: Recipe, hardware: Hardware, *, seed: int,
              eval_pairs: int | None = None, keep_checkpoints: bool = False,
              task_card: dict[str, Any] | None = None, callbacks: tuple = (),
              check_yield=None, warn_below_steps: int = 1) -> DPORun:
    """Train one DPO policy with the DPO ``recipe`` (its epochs over conversational
    ``examples``) and save its adapter to ``out_dir``; resumes from the last checkpoint in
    ``ckpt_dir`` of the same run. A run planned with fewer than ``warn_below_steps``
    optimizer steps logs a warning (and returns it)."""
    from transformers import set_seed

    set_seed(seed)
    tok, model = policy_model(base_path, sft_adapter, hardware)
    data, dropped = drop_too_long(tok, examples, recipe.max_length, ("chosen", "rejected"))
    if check_yield is not None:  # the stage's guard: too many dropped fails before training
        check_yield(len(data), len(examples))
    if not data:
        raise ValueError(f"no pair fits max_length={recipe.max_length}")
    eval_data = data[:eval_pairs] if eval_pairs is not None else data
    args = dpo_config(recipe, hardware, ckpt_dir, seed)
    trainer = build_dpo_trainer(model, tok, data, eval_data, args, recipe, callbacks)
    warning = few_steps_warning("DPO", len(data), hardware, recipe, warn_below_steps,
                                args.world_size)
    if warning:
        _log.warning(warning)
    key = run_key(kind="dpo", recipe=recipe.model_dump(),
                  hardware=hardware.model_dump(exclude={"rem"}), seed=seed, data=data,
                  base=content_id(base_path),
                  sft=content_id(sft_adapter) if sft_adapter else None)
    result = fit(trainer, ckpt_dir, key)
    evaluation = {k.removeprefix("eval_"): v for k, v in trainer.evaluate().items()
                  if k.removeprefix("eval_") in REWARD_KEYS}
    policy = trainer.accelerator.unwrap_model(trainer.model)
    if "ref" in policy.peft_config and not (trainer.is_deepspeed_enabled
                                            or trainer.is_fsdp_enabled):
        policy.delete_adapter("ref")  # the frozen SFT copy is not part of the policy
    policy.peft_config["default"].base_model_name_or_path = portable_path(base_path)
    card = {"kind": "policy_dpo", "pairs": len(data), "dropped_too_long": dropped,
            "epochs": recipe.num_train_epochs, "steps": result.steps, "beta": recipe.beta,
            "loss_type": recipe.loss_type,
            "sft_adapter": portable_path(sft_adapter) if sft_adapter else None,
            **(task_card or {})}
    save_trained_adapter(trainer, policy, out_dir, card)
    if trainer.is_world_process_zero():
        finish_checkpoints(ckpt_dir, keep_checkpoints)
    return DPORun(Path(out_dir), len(data), dropped, result,
                  last_logged(result.train_logs(), REWARD_KEYS), evaluation, card, warning)
