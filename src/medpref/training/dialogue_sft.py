"""SFT of the policy (the doctor) on dialogues, with the loss on doctor turns only.

PLPF's first training step (§2.4): fine-tune the base model on medical dialogues before
preference learning; NoteChat (§3.2) trains only on the physician's utterances. Each
doctor turn that answers a patient becomes one trl *prompt-completion* example (the
earlier turns as chat messages → the doctor turn), and ``SFTTrainer`` with
``completion_only_loss`` learns the completion alone. LoRA wraps the modules the recipe
names for the architecture; the adapter is what DPO starts from and uses as reference.

Which dialogues: the written split (``shared.split``, :mod:`medpref.data.split`) decides
for the corpus it covers: its ``train`` dialogues are trained on, its ``dev`` dialogues
give the development loss, its ``eval`` dialogues are never read. A source the split
does not cover at all (NoteChat's dialogues, generated from notes; a licensed set)
trains whole; a source the split covers in part is an error, so a new dialogue cannot
slip into training unlisted (:func:`split_corpus`).

How long: up to the SFT recipe's ``num_train_epochs``; after each epoch the development loss
(completion-only, as the training loss) is measured, training stops once it has not
fallen for ``patience`` epochs, and the adapter of the epoch with the lowest development
loss is the one saved (:func:`chosen_epoch`, :class:`DevLossEpochs`).
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medpref.contracts import Dialogue, read_jsonl
from medpref.data.split import DialogueSplit
from medpref.finetune.hardware import Hardware
from medpref.finetune.recipe import Recipe, trainer_arguments
from medpref.finetune.runs import (
    FitResult,
    finish_checkpoints,
    fit,
    run_key,
    save_trained_adapter,
)
from medpref.finetune.sft import (
    build_sft_trainer,
    drop_too_long,
    load_base,
    portable_path,
    with_lora,
)
from medpref.identity import content_id
from medpref.params import repo_path
from medpref.training.arguments import few_steps_warning
from medpref.training.config import SFTParams
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
    train: int = 0                   # dialogues trained on (all, if the split lists none)
    dev: int = 0                     # dialogues of the split's dev part: the development loss
    held_out: int = 0                # dialogues of the split's eval part: never read


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


@dataclass
class SFTCorpus:
    """The SFT dialogues by part of the split: ``train`` is trained on, ``dev`` gives the
    development loss; ``sources`` count them (and the eval dialogues left out) per source."""

    train: list[Dialogue]
    dev: list[Dialogue]
    sources: list[DialogueSource]


def source_parts(dialogues: Sequence[Dialogue], split: DialogueSplit, name: str) -> list[str]:
    """The part of each dialogue of one source: its part of the split, or ``train`` for
    every dialogue of a source the split lists none of (generated or licensed sets). A
    source the split covers in part is an error naming the source and the first unlisted
    dialogue: a new dialogue of a split corpus must be placed in the split first."""
    listed = [d.id in split.parts for d in dialogues]
    if not any(listed):
        return ["train"] * len(dialogues)
    if not all(listed):
        missing = next(d.id for d, ok in zip(dialogues, listed) if not ok)
        raise ValueError(f"{name}: dialogue {missing!r} is in no part of the split "
                         f"{split.path}, which lists other dialogues of this file (add it "
                         "to train, dev or eval)")
    return [split.parts[d.id] for d in dialogues]


def split_corpus(dialogues: list[Dialogue], sources: list[DialogueSource],
                 split: DialogueSplit) -> SFTCorpus:
    """Deal :func:`load_dialogues`' dialogues (the sources' dialogues in order) into the
    training and development parts; the eval part is dropped here, before any example
    exists. Fills each source's ``train``, ``dev`` and ``held_out`` counts."""
    train: list[Dialogue] = []
    dev: list[Dialogue] = []
    start = 0
    for source in sources:
        rows = dialogues[start:start + source.dialogues]
        start += source.dialogues
        parts = source_parts(rows, split, source.name)
        train += [d for d, part in zip(rows, parts) if part == "train"]
        dev += [d for d, part in zip(rows, parts) if part == "dev"]
        source.train, source.dev = parts.count("train"), parts.count("dev")
        source.held_out = parts.count("eval")
    return SFTCorpus(train, dev, sources)


def clip_history(messages: list[dict[str, str]], max_turns: int | None) -> list[dict[str, str]]:
    """The system message (if any) and the last ``max_turns`` turns (``None``: all)."""
    if max_turns is None:
        return list(messages)
    head = messages[:1] if messages and messages[0]["role"] == "system" else []
    return head + messages[len(head):][-max_turns:]


def target_passes(context: list[dict[str, str]], target: str) -> bool:
    """The doctor turn passes the turn-quality checks (medpref.turns.turn_quality), the
    dialogue's earlier turns (``context``, system message aside) as what it may copy."""
    from medpref.turns.turn_quality import check_turn

    earlier = [m["content"] for m in context if m["role"] != "system"]
    return check_turn(target, "doctor", earlier).passes


def count_targets(dialogues: list[Dialogue], sources: list[DialogueSource],
                  turn_quality: bool) -> None:
    """Fill each source's ``targets``, ``failing_turn_quality`` (counted whether or not
    the filter is on, so the report shows what turning it on would drop) and ``kept``
    (before ``max_examples`` and the length limit), over its training dialogues.
    ``dialogues`` are the training dialogues in source order (``SFTCorpus.train``), each
    source holding ``source.train`` of them."""
    start = 0
    for source in sources:
        part = dialogues[start:start + source.train]
        start += source.train
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


# -- how many epochs: the development loss decides ------------------------------------------

def chosen_epoch(dev_losses: Sequence[float]) -> int:
    """The epoch (1-based) whose development loss is the lowest, the earliest of equal
    ones; a NaN loss never wins. ``dev_losses[i]`` is the loss after epoch ``i + 1``."""
    if not dev_losses:
        raise ValueError("no development loss to choose an epoch by")
    key = [math.inf if math.isnan(x) else x for x in dev_losses]
    return min(range(len(key)), key=lambda i: (key[i], i)) + 1


def stop_now(dev_losses: Sequence[float], patience: int) -> bool:
    """Whether to stop: the last ``patience`` epochs brought no development loss below
    the best one before them."""
    return bool(dev_losses) and len(dev_losses) - chosen_epoch(dev_losses) >= patience


BEST_DIR = "best-epoch"   # under the run's checkpoint folder: the best epoch's adapter


class DevLossEpochs:
    """Trainer callback: after each epoch's evaluation, record the development loss, save
    the adapter when it is the lowest so far (``<ckpt_dir>/best-epoch``, with the
    trainer's ``save_model``, which every process joins) and stop once ``patience``
    epochs have not lowered it. A resumed run reads the losses of its earlier epochs
    from the checkpoint's log history."""

    def __init__(self, trainer, best_dir: str | Path, patience: int):
        self.trainer, self.best_dir, self.patience = trainer, Path(best_dir), patience
        self.losses: list[float] = []
        self.wall_s: list[float] = []
        self._t0 = time.perf_counter()

    def callback(self):
        from transformers import TrainerCallback

        owner = self

        class _Callback(TrainerCallback):
            def on_train_begin(self, args, state, control, **kwargs):
                owner.losses = [h["eval_loss"] for h in state.log_history if "eval_loss" in h]
                owner.wall_s = [math.nan] * len(owner.losses)  # epochs of a killed run
                owner._t0 = time.perf_counter()

            def on_evaluate(self, args, state, control, metrics=None, **kwargs):
                owner.record(float((metrics or {}).get("eval_loss", math.nan)), control)

        return _Callback()

    def record(self, loss: float, control) -> None:
        self.losses.append(loss)
        now = time.perf_counter()
        self.wall_s.append(now - self._t0)
        self._t0 = now
        if chosen_epoch(self.losses) == len(self.losses):
            self.trainer.save_model(str(self.best_dir))
        if stop_now(self.losses, self.patience):
            control.should_training_stop = True

    def restore_best(self, model) -> None:
        """Load the saved best epoch's adapter weights into ``model`` (the trained one)."""
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        self.trainer.accelerator.wait_for_everyone()
        set_peft_model_state_dict(model, load_file(str(self.best_dir /
                                                       "adapter_model.safetensors")))


@dataclass
class EpochCurve:
    """Per epoch: the development loss (epoch 0: before training, the base model), the
    mean logged training loss, the epoch's wall seconds (training and its evaluation),
    and which epoch's adapter was kept (None: no development examples, the last)."""

    dev_loss: list[float]          # [epoch 0, epoch 1, ...]
    train_loss: list[float]        # [epoch 1, ...]
    wall_s: list[float]            # [epoch 1, ...]
    chosen: int | None
    dev_examples: int = 0

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for epoch, dev in enumerate(self.dev_loss):
            out.append({"epoch": epoch, "dev_loss": dev,
                        "train_loss": self.train_loss[epoch - 1] if epoch else None,
                        "wall_s": self.wall_s[epoch - 1] if epoch else None,
                        "chosen": epoch == self.chosen})
        return out


def epoch_train_losses(log_history: list[dict[str, Any]], epochs: int) -> list[float]:
    """Mean of the logged training losses within each whole epoch (a step logged at
    epoch e ∈ (k − 1, k] belongs to epoch k)."""
    sums, counts = [0.0] * epochs, [0] * epochs
    for h in log_history:
        if "loss" in h and "train_runtime" not in h and h.get("epoch"):
            k = min(epochs, max(1, math.ceil(h["epoch"] - 1e-9))) - 1
            sums[k] += h["loss"]
            counts[k] += 1
    return [s / c if c else math.nan for s, c in zip(sums, counts)]


# -- the run -----------------------------------------------------------------------------------

@dataclass
class SFTRun:
    adapter_dir: Path
    n_examples: int
    n_dropped: int
    fit: FitResult
    card: dict[str, Any] = field(default_factory=dict)
    warning: str = ""              # few optimizer steps (see ``few_steps_warning``)
    curve: EpochCurve | None = None


def sft_config(recipe: Recipe, hardware: Hardware, ckpt_dir: str | Path, seed: int,
               evaluate: bool = False):
    """At most the SFT recipe's ``num_train_epochs`` whole epochs (or its ``max_steps``);
    with ``evaluate``, the development loss after every epoch. Batches are padded, or
    flattened into one sequence per batch when the hardware sets ``padding_free``
    (transformers keeps the examples apart by their position ids)."""
    from trl import SFTConfig

    kwargs = trainer_arguments(recipe, hardware.policy, hardware, ckpt_dir, seed, SFTConfig)
    if kwargs["padding_free"]:  # trl refuses padding-free with a max_length it would not
        kwargs["max_length"] = None  # enforce; examples above it are dropped (drop_too_long)
    return SFTConfig(**kwargs, packing=False, eval_strategy="epoch" if evaluate else "no",
                     completion_only_loss=True)  # loss on the doctor turn (the completion)


def train_dialogue_sft(base_path: str | Path, examples: list[dict[str, Any]],
                       out_dir: str | Path, ckpt_dir: str | Path, recipe: Recipe,
                       hardware: Hardware, seed: int, keep_checkpoints: bool = False,
                       task_card: dict[str, Any] | None = None,
                       callbacks: tuple = (), check_yield=None,
                       warn_below_steps: int = 1,
                       dev_examples: list[dict[str, Any]] | None = None,
                       patience: int = 1) -> SFTRun:
    """LoRA SFT with ``SFTTrainer`` (completion-only loss) over the examples that fit;
    the adapter goes to ``out_dir``. With ``dev_examples`` it trains at most
    ``recipe.num_train_epochs`` epochs, stops when the development loss has not fallen for
    ``patience`` epochs and saves the adapter of the epoch with the lowest development
    loss; without them, every epoch, the last one saved. A killed run resumes from its
    last checkpoint in ``ckpt_dir``. A run planned with fewer than ``warn_below_steps``
    optimizer steps logs a warning (and returns it)."""
    from transformers import set_seed

    set_seed(seed)
    tok, base = load_base(base_path, hardware, device="cpu")
    data, dropped = drop_too_long(tok, examples, recipe.max_length, ("completion",))
    if check_yield is not None:  # the stage's guard: too many dropped fails before training
        check_yield(len(data), len(examples))
    if not data:
        raise ValueError(f"no SFT example fits max_length={recipe.max_length}")
    dev = drop_too_long(tok, dev_examples or [], recipe.max_length, ("completion",))[0]
    model = with_lora(base, recipe.lora(base.config.model_type))
    trainer = build_sft_trainer(model, tok, data, sft_config(recipe, hardware, ckpt_dir, seed,
                                                             evaluate=bool(dev)),
                                callbacks, eval_data=dev,
                                compact_lm_head=hardware.policy.compact_lm_head)
    warning = few_steps_warning("SFT", len(data), hardware, recipe, warn_below_steps,
                                trainer.args.world_size)
    if warning:
        _log.warning(warning)
    key = run_key(kind="sft", recipe=recipe.model_dump(),
                  hardware=hardware.model_dump(exclude={"rem"}), seed=seed, data=data,
                  dev=dev, patience=patience, base=content_id(base_path))
    selection = None
    dev_loss0 = None
    if dev:
        if trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled:
            raise ValueError("choosing the SFT epoch by development loss restores the best "
                             "epoch's adapter, which sharded training (DeepSpeed, FSDP) does "
                             "not support here; run SFT on one process or DDP")
        dev_loss0 = trainer.evaluate()["eval_loss"]  # epoch 0: the base model (LoRA B = 0)
        selection = DevLossEpochs(trainer, Path(ckpt_dir) / BEST_DIR, patience)
        trainer.add_callback(selection.callback())
    result = fit(trainer, ckpt_dir, key)
    epochs_run = len(selection.losses) if selection else None
    chosen = chosen_epoch(selection.losses) if selection and selection.losses else None
    if selection is not None and chosen is not None and chosen != epochs_run:
        selection.restore_best(trainer.accelerator.unwrap_model(trainer.model))
    curve = None
    if selection is not None:
        curve = EpochCurve([dev_loss0, *selection.losses],
                           epoch_train_losses(result.log_history, epochs_run or 0),
                           selection.wall_s, chosen, len(dev))
    model.peft_config["default"].base_model_name_or_path = portable_path(base_path)
    card = {"kind": "policy_sft", "examples": len(data), "dropped_too_long": dropped,
            "max_epochs": recipe.num_train_epochs, "epochs_run": epochs_run,
            "chosen_epoch": chosen, "dev_examples": len(dev),
            "dev_loss": None if chosen is None else selection.losses[chosen - 1],
            "steps": result.steps, **(task_card or {})}
    save_trained_adapter(trainer, model, out_dir, card)
    if trainer.is_world_process_zero():
        finish_checkpoints(ckpt_dir, keep_checkpoints)
    return SFTRun(Path(out_dir), len(data), dropped, result, card, warning, curve)
