"""Stage 05's SFT on the written split (issue 32): the training part only, the development
part for the loss that picks the epoch, the evaluation part never; the epoch kept is the
one with the lowest development loss, and its adapter is the one saved."""

from __future__ import annotations

import json
import math

import pytest

from conftest import make_tiny_llama
from medpref import REPO_ROOT
from medpref.contracts import Dialogue, Turn, read_jsonl
from medpref.data.split import DialogueSplit, load_split
from medpref.finetune.hardware import load_hardware
from medpref.params import load_params, repo_path
from medpref.training.dialogue_sft import (
    DialogueSource,
    chosen_epoch,
    epoch_train_losses,
    sft_examples,
    source_parts,
    split_corpus,
    stop_now,
    train_dialogue_sft,
)

TOKENIZER = REPO_ROOT / "models" / "smollm2-135m-instruct"


def _dialogue(id_: str, *texts: str) -> Dialogue:
    roles = ["patient", "doctor"] * len(texts)
    return Dialogue(id=id_, turns=[Turn(role=r, text=t) for r, t in zip(roles, texts)])


# -- which dialogues ----------------------------------------------------------------------------

class _Captured(Exception):
    """Raised by the stand-in trainer once it has what the stage passed it."""


def test_the_stage_trains_on_train_dialogues_and_scores_dev_never_eval(monkeypatch):
    """``run_sft`` as the stage runs it: the examples it hands the trainer are doctor turns
    of the split's train dialogues (plus sources the split does not cover), the development
    examples those of its dev dialogues, and no turn of an eval dialogue is in either."""
    from medpref.stagekit import open_stage
    from medpref.training import stage as training_stage

    seen = {}

    def capture(base, examples, *args, dev_examples=None, **kwargs):
        seen["train"], seen["dev"] = examples, dev_examples
        raise _Captured

    monkeypatch.setattr(training_stage, "train_dialogue_sft", capture)
    stage = open_stage("05_training", "params.yaml", part="sft")
    with pytest.raises(_Captured):
        training_stage.run_sft(stage)
    params = load_params()
    split = load_split(repo_path(params.shared.split))
    embedded = read_jsonl(repo_path("data/embedded/dialogues.jsonl"), Dialogue)
    turns = {part: {t.text for d in split.select(embedded, part) for t in d.turns
                    if t.role == "doctor"} for part in ("train", "dev", "eval")}
    trained = {ex["completion"][0]["content"] for ex in seen["train"]}
    scored = {ex["completion"][0]["content"] for ex in seen["dev"]}
    context = {m["content"] for ex in seen["train"] + seen["dev"] for m in ex["prompt"]}
    eval_only = turns["eval"] - turns["train"] - turns["dev"]
    assert trained and scored
    assert not trained & (turns["eval"] | turns["dev"]) - turns["train"]
    assert not scored & (turns["eval"] | turns["train"]) - turns["dev"]
    assert not (trained | scored | context) & eval_only
    # every answering doctor turn of a train dialogue that passes the turn-quality check
    # is a target (max_examples is null: no subset)
    assert params.training.sft.max_examples is None
    assert len(trained) >= 0.9 * len(turns["train"] - {d.turns[0].text for d in embedded})


def test_a_source_the_split_does_not_cover_trains_whole_a_partly_listed_one_fails():
    split = DialogueSplit({"a": "train", "b": "dev", "c": "eval"}, "split.yaml")
    covered = [_dialogue(i, "hi", "ok?") for i in ("a", "b", "c")]
    assert source_parts(covered, split, "emb.jsonl") == ["train", "dev", "eval"]
    generated = [_dialogue(f"notechat-n-{i}", "hi", "ok?") for i in range(3)]
    assert source_parts(generated, split, "nc.jsonl") == ["train"] * 3
    with pytest.raises(ValueError, match=r"emb.jsonl: dialogue 'z' is in no part of the split "
                                         r"split.yaml"):
        source_parts([*covered, _dialogue("z", "hi", "ok?")], split, "emb.jsonl")
    sources = [DialogueSource("emb.jsonl", 3), DialogueSource("nc.jsonl", 3)]
    corpus = split_corpus(covered + generated, sources, split)
    assert [d.id for d in corpus.train] == ["a", *[d.id for d in generated]]
    assert [d.id for d in corpus.dev] == ["b"]
    assert [(s.train, s.dev, s.held_out) for s in sources] == [(1, 1, 1), (3, 0, 0)]


# -- which epoch --------------------------------------------------------------------------------

@pytest.mark.parametrize("losses, chosen, stop", [
    ([3.0], 1, False),
    ([3.0, 2.5, 2.6], 2, True),           # rose after epoch 2: stop, keep 2
    ([3.0, 2.5, 2.4], 3, False),          # still falling
    ([3.0, 2.5, 2.5], 2, True),           # equal is no improvement; the earlier one kept
    ([3.0, math.nan, 2.9], 3, False),     # a NaN never wins
    ([2.0, 2.1, 2.2, 1.9], 4, False),
])
def test_the_kept_epoch_is_the_argmin_of_the_development_loss(losses, chosen, stop):
    assert chosen_epoch(losses) == chosen
    assert stop_now(losses, patience=1) is stop


def test_patience_waits_that_many_epochs_without_a_lower_loss():
    assert not stop_now([3.0, 2.5, 2.6], patience=2)
    assert stop_now([3.0, 2.5, 2.6, 2.7], patience=2)
    assert not stop_now([3.0, 2.5, 2.6, 2.4], patience=2)
    with pytest.raises(ValueError, match="no development loss"):
        chosen_epoch([])


def test_training_loss_per_epoch_is_the_mean_of_its_logged_steps():
    logs = [{"loss": 4.0, "epoch": 0.5}, {"loss": 2.0, "epoch": 1.0}, {"eval_loss": 9.0,
            "epoch": 1.0}, {"loss": 1.0, "epoch": 1.5}, {"loss": 3.0, "epoch": 2.0},
            {"train_runtime": 1.0, "loss": 7.0, "epoch": 2.0}]
    assert epoch_train_losses(logs, 2) == [3.0, 2.0]


# -- a tiny model: the saved adapter is the kept epoch's -----------------------------------------

@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(TOKENIZER)
    return make_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), tok)


def _dev_loss(base, adapter, examples) -> float:
    """Mean completion-only loss of an adapter on examples, computed here (not by trl):
    cross-entropy over the answer tokens (and the end-of-turn), per example, averaged."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base),
                                      str(adapter)).eval()
    losses = []
    for ex in examples:
        head = tok.apply_chat_template(ex["prompt"], add_generation_prompt=True, tokenize=True,
                                       return_dict=True)["input_ids"]
        full = tok.apply_chat_template(ex["prompt"] + ex["completion"], tokenize=True,
                                       return_dict=True)["input_ids"]
        with torch.no_grad():
            logits = model(torch.tensor([full])).logits[0, :-1]
        target = torch.tensor(full[1:])
        start = len(head) - 1
        losses.append(float(torch.nn.functional.cross_entropy(logits[start:],
                                                              target[start:])))
    return sum(losses) / len(losses)


@pytest.mark.slow
def test_the_saved_adapter_is_the_epoch_with_the_lowest_development_loss(tiny_model_dir,
                                                                         tmp_path):
    """A tiny model trained hard on one kind of doctor turn while the development turns are
    another kind: the development loss falls, then rises; training stops one epoch after
    its lowest point and the adapter saved scores that epoch's development loss."""
    train = [_dialogue(f"t{i}", "My knee hurts.", "Did you fall or twist it?",
                       "No.", "Does it swell after walking?") for i in range(4)]
    dev = [_dialogue("v", "My knee hurts.", "I will prescribe a cream for it.")]
    examples = sft_examples(train, "You are a doctor.", None, 0, history_max_turns=2)
    dev_examples = sft_examples(dev, "You are a doctor.", None, 0, history_max_turns=2)
    recipe = load_params().training.recipes["tiny"].sft.model_copy(update={
        "num_train_epochs": 12, "max_steps": None, "learning_rate": 3e-2, "r": 8})
    hw = load_hardware("cpu")
    hw = hw.model_copy(update={"policy": hw.policy.model_copy(update={
        "per_device_train_batch_size": 2, "per_device_eval_batch_size": 2, "save_steps": 3,
        "logging_steps": 1})})
    run = train_dialogue_sft(tiny_model_dir, examples, tmp_path / "adapter", tmp_path / "ckpt",
                             recipe, hw, seed=0, dev_examples=dev_examples, patience=1)
    curve = run.curve
    assert curve is not None and len(curve.dev_loss) == run.card["epochs_run"] + 1
    losses = curve.dev_loss[1:]
    assert run.card["chosen_epoch"] == chosen_epoch(losses) == curve.chosen
    assert run.card["chosen_epoch"] < run.card["epochs_run"] <= 12, \
        f"the development loss never rose: {losses}"
    assert run.card["epochs_run"] - run.card["chosen_epoch"] == 1    # patience 1
    assert run.card["dev_loss"] == pytest.approx(min(losses))
    assert _dev_loss(tiny_model_dir, tmp_path / "adapter", dev_examples) == pytest.approx(
        min(losses), rel=1e-3)
    card = json.loads((tmp_path / "adapter" / "medpref_task.json").read_text())
    assert card["chosen_epoch"] == run.card["chosen_epoch"]
    assert [r["chosen"] for r in curve.rows()].count(True) == 1
