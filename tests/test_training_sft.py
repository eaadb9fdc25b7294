"""LoRA SFT with trl's SFTTrainer, the one training path (src/medpref/finetune/sft.py):
the REM's trainer and its answer-only labels, step planning, a tiny real run."""

from __future__ import annotations

import json

import pytest

from conftest import make_tiny_llama
from medpref import REPO_ROOT
from medpref.finetune.hardware import load_hardware
from medpref.finetune.sft import (
    TASK_CARD,
    LoraSettings,
    build_sft_trainer,
    drop_too_long,
    load_base,
    read_task_card,
    with_lora,
)
from medpref.params import load_params
from medpref.rem import build_rem
from medpref.rem.build_rem import rem_sft_config, rem_steps

TOKENIZER = REPO_ROOT / "models" / "smollm2-135m-instruct"
PROMPT = [{"role": "system", "content": "Judge the rule."},
          {"role": "user", "content": "Doctor: Any fever?"}]
ANSWER = "Comment: asks about fever.\nScore: 2"


def example(answer: str = ANSWER, prompt=PROMPT) -> dict:
    """A trl prompt-completion conversation, the shape of the REM's examples."""
    return {"prompt": list(prompt), "completion": [{"role": "assistant", "content": answer}]}


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(TOKENIZER)


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory, tokenizer):
    return make_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), tokenizer, max_positions=1024)


def _with_rem(hardware, **update):
    """``hardware`` with some fields of its ``rem`` section changed."""
    return hardware.model_copy(update={"rem": hardware.rem.model_copy(update=update)})


def _rem_train(**update):
    """The committed ``rem.train`` with some fields of its recipe changed."""
    train = load_params().rem.train
    return train.model_copy(update={"recipe": train.recipe.model_copy(update=update)})


@pytest.fixture(scope="module")
def rem_trainer(tiny_model_dir, tmp_path_factory):
    """The REM's trainer (its ``SFTConfig`` from ``rem.train`` and the cpu hardware's
    ``rem`` section) on two examples, one with a short answer."""
    hw = load_hardware("cpu")
    tok, base = load_base(tiny_model_dir, hw, device="cpu")
    model = with_lora(base, LoraSettings(r=4, lora_alpha=8, lora_dropout=0.0))
    args = rem_sft_config(_rem_train(), hw, tmp_path_factory.mktemp("ckpt"), 0, steps=1)
    return build_sft_trainer(model, tok, [example(), example("Score: 1")], args)


def test_the_rem_trains_with_sft_trainer_on_the_hardware_settings(rem_trainer):
    from trl import SFTTrainer

    args = rem_trainer.args
    assert isinstance(rem_trainer, SFTTrainer)
    assert args.completion_only_loss is True and args.packing is False
    assert args.padding_free is False
    # trl's defaults (bf16, gradient checkpointing) would make CPU training ~12x slower
    assert args.bf16 is False and args.gradient_checkpointing is False
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (4, 2)
    assert args.train_sampling_strategy == "group_by_length"
    p = load_params().rem.train.recipe
    assert (args.learning_rate, args.warmup_steps, args.max_length) == (
        p.learning_rate, p.warmup_steps, p.max_length)
    assert (args.logging_steps, args.save_steps, args.max_steps) == (1, 10, 1)


def test_only_the_answer_carries_labels(rem_trainer, tokenizer):
    """The collated batch of the trainer: every prompt token (the assistant marker
    included) and the padding are -100; the answer and its end-of-turn token are kept."""
    rows = [rem_trainer.train_dataset[i] for i in range(2)]
    batch = rem_trainer.data_collator(rows)
    prompt_ids = tokenizer.apply_chat_template(PROMPT, tokenize=True, return_dict=True,
                                               add_generation_prompt=True)["input_ids"]
    for row, answer in enumerate((ANSWER, "Score: 1")):
        ids, labels = batch["input_ids"][row].tolist(), batch["labels"][row].tolist()
        n = int(batch["attention_mask"][row].sum())
        assert ids[:len(prompt_ids)] == prompt_ids
        assert labels[:len(prompt_ids)] == [-100] * len(prompt_ids)
        assert labels[len(prompt_ids):n] == ids[len(prompt_ids):n]
        assert set(labels[n:]) <= {-100}          # padding (the short row) is not learned
        learned = [t for t in labels if t != -100]
        assert tokenizer.decode(learned) == answer + "<|im_end|>\n"


def test_the_loss_is_the_mean_over_the_answer_tokens(rem_trainer):
    """The trainer's loss on a collated batch equals cross-entropy computed by hand from
    the model's full logits, averaged over the answer tokens only (what the custom
    trainer of before computed on the answer tail)."""
    import torch
    import torch.nn.functional as F

    batch = rem_trainer.data_collator([rem_trainer.train_dataset[i] for i in range(2)])
    model = rem_trainer.model.eval()
    with torch.no_grad():
        got = rem_trainer.compute_loss(model, dict(batch))
        logits = model(input_ids=batch["input_ids"],
                       attention_mask=batch["attention_mask"]).logits
    labels = batch["labels"][:, 1:]
    want = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels.reshape(-1),
                           ignore_index=-100)
    assert int((labels != -100).sum()) < int(batch["attention_mask"].sum()) // 2
    assert float(got) == pytest.approx(float(want), rel=1e-4)


def test_too_long_examples_are_dropped_not_truncated(tokenizer):
    kept, dropped = drop_too_long(tokenizer, [example(), example("word " * 400)], 128,
                                  ("completion",))
    assert (kept, dropped) == ([example()], 1)


def test_rem_steps_hand_computed():
    hw = _with_rem(load_hardware("cpu"), per_device_train_batch_size=4,
                   gradient_accumulation_steps=2, max_steps_cap=40)
    # 186 examples / 8 per step = 23.25 → 24 steps an epoch
    assert rem_steps(186, _rem_train(num_train_epochs=1.0), hw) == 24
    assert rem_steps(186, _rem_train(num_train_epochs=2.0), hw) == 40   # capped by the hardware
    assert rem_steps(186, _rem_train(num_train_epochs=2.0, max_steps=45), hw) == 45  # exact
    assert rem_steps(186, _rem_train(num_train_epochs=2.0),
                     _with_rem(hw, max_steps_cap=None)) == 48
    # the committed REM: 182 examples that fit, 2 epochs of ceil(182 / 8) = 23
    assert rem_steps(182, _rem_train(), load_hardware("cpu")) == 46


def test_hardware_files_validate(tmp_path):
    cpu, gpu = load_hardware("cpu"), load_hardware("gpu")
    assert cpu.bf16 is False and cpu.rem.gradient_checkpointing is False and cpu.device == "cpu"
    assert (cpu.rem.per_device_train_batch_size, cpu.rem.gradient_accumulation_steps,
            cpu.rem.max_steps_cap) == (4, 2, 60)
    assert gpu.bf16 == "auto" and gpu.device == "cuda" and gpu.rem.max_steps_cap is None
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO_ROOT / "configs/hardware/cpu.yaml").read_text().replace(
        "  max_steps_cap: 60", "  max_steps_cap: 60\n  batch: 4"))
    with pytest.raises(ValueError, match="'rem.batch': Extra inputs"):
        load_hardware(str(bad))
    old = tmp_path / "old.yaml"  # the flat file of before: one trainer's batch, no sections
    old.write_text("device: cpu\nper_device_batch_size: 4\nbf16: false\n")
    with pytest.raises(ValueError, match=r"old\.yaml: '"):    # refused, naming the file
        load_hardware(str(old))
    with pytest.raises(FileNotFoundError, match="known"):
        load_hardware("tpu")


@pytest.mark.slow
def test_a_few_rem_steps_change_a_loadable_adapter(tiny_model_dir, tmp_path, monkeypatch):
    """``train_rem`` on a tiny model: SFTTrainer trains 3 steps, the adapter folder has the
    weights (LoRA B moved off zero), the task card, fit.json and a canonical config, and
    peft loads it; the checkpoints are removed once it is saved."""
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    from trl import SFTTrainer

    made = []

    def recording(*args, **kwargs):
        made.append(build_sft_trainer(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(build_rem, "build_sft_trainer", recording)
    params = load_params().rem
    out, ckpt = tmp_path / "rem_lora", tmp_path / "ckpt"
    p = params.model_copy(update={"train": params.train.model_copy(update={
        "adapter_dir": str(out), "checkpoints_dir": str(ckpt),
        "recipe": params.train.recipe.model_copy(update={
            "max_steps": 3, "learning_rate": 1e-2, "r": 4, "lora_alpha": 8,
            "lora_dropout": 0.0})})})
    inputs = build_rem.load_inputs(p)
    few = build_rem.RemInputs(inputs.flowchart, inputs.split("train")[:6], [])
    result = build_rem.train_rem(p, few, str(tiny_model_dir), seed=0)

    assert len(made) == 1 and isinstance(made[0], SFTTrainer)
    assert result.steps == 3 and result.n_train + result.n_dropped == 6
    assert [r["step"] for r in result.losses] == [1, 2, 3]
    assert {f.name for f in out.iterdir()} >= {"adapter_model.safetensors", "adapter_config.json",
                                              TASK_CARD, "fit.json"}
    assert read_task_card(out) == build_rem.rem_task_card(p)
    fit = json.loads((out / "fit.json").read_text())
    assert fit["steps"] == 3 and fit["n_train"] == result.n_train
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["target_modules"] == sorted(config["target_modules"])
    assert not ckpt.exists()
    lora_b = {k: v for k, v in load_file(out / "adapter_model.safetensors").items()
              if "lora_B" in k}
    assert lora_b, "no LoRA B matrices saved"
    # PEFT starts every B at zero: any non-zero B means the optimizer moved the adapter
    assert all(float(v.abs().sum()) > 0 for v in lora_b.values())
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), out)
    assert model.peft_config["default"].r == 4


def test_task_card_tells_the_finetuned_rem_how_to_read(tmp_path):
    """A score-first REM is read in one pass; no card means PLPF's comment-first format."""
    from medpref.remscore.scorers import finetuned_settings

    assert read_task_card(tmp_path) == {}
    assert finetuned_settings(tmp_path) == {"comment": True, "detail": "short"}
    (tmp_path / TASK_CARD).write_text('{"answer_order": "score_first", "rule_detail": "full"}')
    assert finetuned_settings(tmp_path) == {"comment": False, "detail": "full"}
