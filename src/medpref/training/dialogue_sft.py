"""SFT of the policy (the doctor) on dialogues, with the loss on doctor turns only.

PLPF's first training step (§2.4): fine-tune the base model on medical dialogues before
preference learning; NoteChat (§3.2) trains only on the physician's utterances. Each
doctor turn that answers a patient becomes one trl *prompt-completion* example (the
earlier turns as chat messages → the doctor turn), and ``SFTTrainer`` with
``completion_only_loss`` learns the completion alone. LoRA wraps the modules the recipe
names for the architecture; the adapter is what DPO starts from and uses as reference.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medpref.contracts import Dialogue, read_jsonl
from medpref.identity import content_id
from medpref.params import repo_path
from medpref.training.arguments import few_steps_warning, lora_settings, trainer_kwargs
from medpref.training.config import SFTParams, TrainingRecipe
from medpref.training.hardware import Hardware
from medpref.training.runs import (
    FitResult,
    finish_checkpoints,
    fit,
    run_key,
    save_trained_adapter,
)
from medpref.training.sft import (
    build_sft_trainer,
    drop_too_long,
    load_base,
    portable_path,
    with_lora,
)
from medpref.training.sft_data import dialogues_to_sft_examples, split_target

_log = logging.getLogger(__name__)


@dataclass
class DialogueSource:
    """One place dialogues came from and how many (or why none)."""

    name: str
    dialogues: int
    note: str = ""
    targets: int = 0                 # answering doctor turns (SFT targets) before filtering
    failing_turn_quality: int = 0    # targets that fail the turn-quality checks
    kept: int = 0                    # targets trained on (failing ones go when the filter is on)


def _real_dialogues(source: str, split: str, limit: int | None) -> list[Dialogue]:
    from medpref.data import adapters

    read = {"mts_dialog": adapters.mts_dialogues, "aci_bench": adapters.aci_dialogues}[source]
    return read(split, limit=limit)


def load_dialogues(p: SFTParams) -> tuple[list[Dialogue], list[DialogueSource]]:
    """The SFT corpus: every listed contract file that exists (NoteChat's output exists
    once stage 02 ran) and the licensed sets in ``p.real`` (when ../shared/data has them)."""
    dialogues: list[Dialogue] = []
    sources: list[DialogueSource] = []
    for path in p.dialogues:
        full = repo_path(path)
        if not full.exists():
            sources.append(DialogueSource(path, 0, "absent: skipped"))
            continue
        rows = read_jsonl(full, Dialogue)
        dialogues += rows
        sources.append(DialogueSource(path, len(rows)))
    for real in p.real:
        name = f"{real.source}:{real.split}"
        try:
            rows = _real_dialogues(real.source, real.split, real.limit)
        except FileNotFoundError as exc:
            sources.append(DialogueSource(name, 0, f"absent: {exc}"))
            continue
        dialogues += rows
        sources.append(DialogueSource(name, len(rows)))
    return dialogues, sources


def clip_history(messages: list[dict[str, str]], max_turns: int | None) -> list[dict[str, str]]:
    """The system message (if any) and the last ``max_turns`` turns (``None``: all)."""
    if max_turns is None:
        return list(messages)
    head = messages[:1] if messages and messages[0]["role"] == "system" else []
    return head + messages[len(head):][-max_turns:]


def target_passes(context: list[dict[str, str]], target: str) -> bool:
    """The doctor turn passes the turn-quality checks (medpref.notechat.turn_quality), the
    dialogue's earlier turns (``context``, system message aside) as what it may copy."""
    from medpref.notechat.turn_quality import check_turn

    earlier = [m["content"] for m in context if m["role"] != "system"]
    return check_turn(target, "doctor", earlier).passes


def count_targets(dialogues: list[Dialogue], sources: list[DialogueSource],
                  turn_quality: bool) -> None:
    """Fill each source's ``targets``, ``failing_turn_quality`` (counted whether or not
    the filter is on, so the report shows what turning it on would drop) and ``kept``
    (before ``max_examples`` and the length limit). ``dialogues`` are the sources'
    dialogues in order, as :func:`load_dialogues` returns them."""
    start = 0
    for source in sources:
        part = dialogues[start:start + source.dialogues]
        start += source.dialogues
        pairs = [split_target(ex) for ex in dialogues_to_sft_examples(part, "")]
        source.targets = len(pairs)
        source.failing_turn_quality = sum(not target_passes(c, t) for c, t in pairs)
        source.kept = source.targets - (source.failing_turn_quality if turn_quality else 0)


def sft_examples(dialogues: list[Dialogue], system_prompt: str, max_examples: int | None,
                 seed: int, history_max_turns: int | None = None, turn_quality: bool = False
                 ) -> list[dict[str, list[dict[str, str]]]]:
    """trl prompt-completion examples, one per answering doctor turn (a seeded subset of
    ``max_examples`` when set): ``{"prompt": [messages], "completion": [assistant]}``;
    the context is the last ``history_max_turns`` turns.

    With ``turn_quality`` a doctor turn that fails the turn-quality checks is not a
    target; it stays in the context of the dialogue's later targets (the loss never falls
    on context, and cutting it out would leave the patient answering a missing turn)."""
    examples = []
    for ex in dialogues_to_sft_examples(dialogues, system_prompt):
        context, target = split_target(ex)
        if turn_quality and not target_passes(context, target):
            continue
        examples.append({"prompt": clip_history(context, history_max_turns),
                         "completion": [{"role": "assistant", "content": target}]})
    if max_examples is not None and len(examples) > max_examples:
        examples = random.Random(seed).sample(examples, max_examples)
    return examples


@dataclass
class SFTRun:
    adapter_dir: Path
    n_examples: int
    n_dropped: int
    fit: FitResult
    card: dict[str, Any] = field(default_factory=dict)
    warning: str = ""              # few optimizer steps (see ``few_steps_warning``)


def sft_config(recipe: TrainingRecipe, hardware: Hardware, ckpt_dir: str | Path, seed: int):
    """``recipe.sft_epochs`` whole epochs (or the ``sft_max_steps`` override)."""
    from trl import SFTConfig

    return SFTConfig(**trainer_kwargs(recipe, hardware, ckpt_dir, seed, recipe.sft_epochs,
                                      recipe.sft_max_steps), packing=False,
                     completion_only_loss=True)  # loss on the doctor turn (the completion)


def train_dialogue_sft(base_path: str | Path, examples: list[dict[str, Any]],
                       out_dir: str | Path, ckpt_dir: str | Path, recipe: TrainingRecipe,
                       hardware: Hardware, seed: int, keep_checkpoints: bool = False,
                       task_card: dict[str, Any] | None = None,
                       callbacks: tuple = (), check_yield=None,
                       warn_below_steps: int = 1) -> SFTRun:
    """LoRA SFT with ``SFTTrainer`` (completion-only loss) for ``recipe.sft_epochs``
    whole epochs over the examples that fit; the adapter goes to ``out_dir``. A killed run
    resumes from its last checkpoint in ``ckpt_dir``. A run planned with fewer than
    ``warn_below_steps`` optimizer steps logs a warning (and returns it)."""
    from transformers import set_seed

    set_seed(seed)
    tok, base = load_base(base_path, hardware, device="cpu")
    data, dropped = drop_too_long(tok, examples, recipe.max_length, ("completion",))
    if check_yield is not None:  # the stage's guard: too many dropped fails before training
        check_yield(len(data), len(examples))
    if not data:
        raise ValueError(f"no SFT example fits max_length={recipe.max_length}")
    model = with_lora(base, lora_settings(recipe, base.config.model_type))
    trainer = build_sft_trainer(model, tok, data, sft_config(recipe, hardware, ckpt_dir, seed),
                                callbacks, compact_lm_head=hardware.policy.compact_lm_head)
    warning = few_steps_warning("SFT", len(data), hardware, recipe.sft_epochs,
                                recipe.sft_max_steps, warn_below_steps, trainer.args.world_size)
    if warning:
        _log.warning(warning)
    key = run_key(kind="sft", recipe=recipe.model_dump(),
                  hardware=hardware.model_dump(exclude={"rem"}), seed=seed, data=data,
                  base=content_id(base_path))
    result = fit(trainer, ckpt_dir, key)
    model.peft_config["default"].base_model_name_or_path = portable_path(base_path)
    card = {"kind": "policy_sft", "examples": len(data), "dropped_too_long": dropped,
            "epochs": recipe.sft_epochs, "steps": result.steps, **(task_card or {})}
    save_trained_adapter(trainer, model, out_dir, card)
    if trainer.is_world_process_zero():
        finish_checkpoints(ckpt_dir, keep_checkpoints)
    return SFTRun(Path(out_dir), len(data), dropped, result, card, warning)
