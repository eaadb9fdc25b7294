"""LoRA SFT (src/medpref/training): answer-only loss mask, step planning, a tiny real run."""

from __future__ import annotations

import pytest

from conftest import make_tiny_llama
from medpref import REPO_ROOT
from medpref.training.hardware import load_hardware
from medpref.training.sft import (
    IGNORE_INDEX,
    TASK_CARD,
    AnswerOnlyCollator,
    LoraSettings,
    SFTExample,
    SFTSettings,
    answer_only_loss,
    answer_width,
    encode_examples,
    planned_steps,
    read_task_card,
    train_lora,
)

TOKENIZER = REPO_ROOT / "models" / "smollm2-135m-instruct"
EXAMPLE = SFTExample([{"role": "system", "content": "Judge the rule."},
                      {"role": "user", "content": "Doctor: Any fever?"}],
                     "Comment: asks about fever.\nScore: 2")


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(TOKENIZER)


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory, tokenizer):
    return make_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), tokenizer, max_positions=256)


def test_loss_mask_covers_only_the_answer(tokenizer):
    data, dropped = encode_examples(tokenizer, [EXAMPLE], max_length=512)
    assert dropped == 0
    batch = AnswerOnlyCollator(tokenizer)(data)
    ids, labels = batch["input_ids"][0].tolist(), batch["labels"][0].tolist()
    learned = [t for t, lab in zip(ids, labels) if lab != IGNORE_INDEX]
    assert tokenizer.decode(learned) == EXAMPLE.answer + "<|im_end|>\n"
    prompt_ids = tokenizer(tokenizer.apply_chat_template(
        EXAMPLE.messages, tokenize=False, add_generation_prompt=True),
        add_special_tokens=False)["input_ids"]
    assert labels[:len(prompt_ids)] == [IGNORE_INDEX] * len(prompt_ids)
    assert labels[len(prompt_ids):] == ids[len(prompt_ids):]


def test_padding_is_masked_and_attention_off(tokenizer):
    short = SFTExample(EXAMPLE.messages, "Score: 1")
    data, _ = encode_examples(tokenizer, [EXAMPLE, short], max_length=512)
    batch = AnswerOnlyCollator(tokenizer)(data)
    n_short = len(data[1]["input_ids"])
    assert batch["attention_mask"][1].tolist()[n_short:] == [0] * (batch["input_ids"].shape[1]
                                                                   - n_short)
    assert set(batch["labels"][1].tolist()[n_short:]) == {IGNORE_INDEX}
    learned = [t for t, lab in zip(batch["input_ids"][1].tolist(), batch["labels"][1].tolist())
               if lab != IGNORE_INDEX]
    assert tokenizer.decode(learned) == "Score: 1<|im_end|>\n"


def test_left_padding_ends_every_answer_at_the_last_position(tokenizer):
    short = SFTExample(EXAMPLE.messages, "Score: 1")
    data, _ = encode_examples(tokenizer, [EXAMPLE, short], max_length=512)
    batch = AnswerOnlyCollator(tokenizer, padding_side="left")(data)
    n_short, width = len(data[1]["input_ids"]), batch["input_ids"].shape[1]
    assert batch["attention_mask"][1].tolist() == [0] * (width - n_short) + [1] * n_short
    assert batch["input_ids"][1].tolist()[width - n_short:] == data[1]["input_ids"]
    # positions count from each row's first real token
    assert batch["position_ids"][1].tolist()[width - n_short:] == list(range(n_short))
    learned = [t for t, lab in zip(batch["input_ids"][1].tolist(), batch["labels"][1].tolist())
               if lab != IGNORE_INDEX]
    assert tokenizer.decode(learned) == "Score: 1<|im_end|>\n"
    # the widest answer (the long one) starts answer_width positions from the end
    n_answer = len(tokenizer(EXAMPLE.answer + "<|im_end|>\n",
                             add_special_tokens=False)["input_ids"])
    assert answer_width(batch["labels"]) == n_answer


def test_answer_only_loss_equals_the_models_own_loss(tokenizer, tiny_model_dir):
    """The LM head on the answer tail of a left-padded batch gives the loss the model
    computes on the whole right-padded batch (mean over answer tokens)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    examples = [EXAMPLE, SFTExample(EXAMPLE.messages, "Score: 1"),
                SFTExample([{"role": "user", "content": "Doctor: Hi. Any cough at night?"}],
                           "Comment: asks one question.\nScore: 2")]
    data, _ = encode_examples(tokenizer, examples, max_length=512)
    right = AnswerOnlyCollator(tokenizer)(data)
    left = AnswerOnlyCollator(tokenizer, padding_side="left")(data)
    with torch.no_grad():
        want = model(**right).loss
        got = answer_only_loss(model, left)
        n = int((right["labels"][:, 1:] != IGNORE_INDEX).sum())
        summed = answer_only_loss(model, left, num_items=2 * n)
    assert float(got) == pytest.approx(float(want), rel=1e-4)
    assert float(summed) == pytest.approx(float(want) / 2, rel=1e-4)


def test_sequence_without_marker_is_an_error(tokenizer):
    ids = tokenizer("no chat template here", add_special_tokens=False)["input_ids"]
    with pytest.raises(ValueError, match="marker"):
        AnswerOnlyCollator(tokenizer)([{"input_ids": ids}])


def test_too_long_examples_are_dropped_not_truncated(tokenizer):
    data, dropped = encode_examples(tokenizer, [EXAMPLE, SFTExample(EXAMPLE.messages,
                                                                    "word " * 400)], 128)
    assert (len(data), dropped) == (1, 1)


def _with_rem(hardware, **update):
    """``hardware`` with some fields of its ``rem`` section changed."""
    return hardware.model_copy(update={"rem": hardware.rem.model_copy(update=update)})


def test_planned_steps_hand_computed():
    hw = _with_rem(load_hardware("cpu"), per_device_batch_size=4, grad_accumulation=2,
                   max_steps=40)
    # 186 examples / 8 per step = 23.25 → 24 steps an epoch
    assert planned_steps(186, hw, SFTSettings(epochs=1)) == 24
    assert planned_steps(186, hw, SFTSettings(epochs=2)) == 40      # capped by the hardware
    assert planned_steps(186, hw, SFTSettings(epochs=2, max_steps=45)) == 45  # explicit wins
    assert planned_steps(186, _with_rem(hw, max_steps=None), SFTSettings(epochs=2)) == 48


def test_hardware_files_validate(tmp_path):
    cpu, gpu = load_hardware("cpu"), load_hardware("gpu")
    assert cpu.bf16 is False and cpu.rem.gradient_checkpointing is False and cpu.device == "cpu"
    assert (cpu.rem.per_device_batch_size, cpu.rem.grad_accumulation, cpu.rem.max_steps) == (
        4, 2, 60)
    assert gpu.bf16 == "auto" and gpu.device == "cuda" and gpu.rem.max_steps is None
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO_ROOT / "configs/hardware/cpu.yaml").read_text().replace(
        "  max_steps: 60", "  max_steps: 60\n  batch: 4"))
    with pytest.raises(ValueError, match="'rem.batch': Extra inputs"):
        load_hardware(str(bad))
    old = tmp_path / "old.yaml"  # the flat file of before: one trainer's batch, no sections
    old.write_text("device: cpu\nper_device_batch_size: 4\nbf16: false\n")
    with pytest.raises(ValueError, match="'per_device_batch_size' is now "
                                         "'rem.per_device_batch_size'"):
        load_hardware(str(old))
    with pytest.raises(FileNotFoundError, match="known"):
        load_hardware("tpu")


@pytest.mark.slow
def test_a_few_lora_steps_change_the_adapter(tiny_model_dir, tmp_path):
    from safetensors.torch import load_file

    cpu = load_hardware("cpu")
    hw = _with_rem(cpu.model_copy(update={"num_threads": 1}), per_device_batch_size=2,
                   grad_accumulation=1, group_by_length=True)
    out = tmp_path / "adapter"
    result = train_lora(tiny_model_dir, [EXAMPLE] * 4, out, hw,
                        SFTSettings(max_steps=3, learning_rate=1e-2, max_length=256,
                                    logging_steps=1),
                        LoraSettings(r=4, alpha=8, dropout=0.0),
                        task_card={"task": "rem", "answer_order": "score_first"})
    assert read_task_card(out) == {"task": "rem", "answer_order": "score_first"}
    assert result.steps == 3 and result.n_train == 4 and len(result.losses) == 3
    weights = load_file(out / "adapter_model.safetensors")
    lora_b = {k: v for k, v in weights.items() if "lora_B" in k}
    assert lora_b, "no LoRA B matrices saved"
    # PEFT starts every B at zero: any non-zero B means the optimizer moved the adapter
    assert all(float(v.abs().sum()) > 0 for v in lora_b.values())
    assert (out / "adapter_config.json").exists()


def test_task_card_tells_the_finetuned_rem_how_to_read(tmp_path):
    """A score-first REM is read in one pass; no card means PLPF's comment-first format."""
    from medpref.rem.scorers import finetuned_settings

    assert read_task_card(tmp_path) == {}
    assert finetuned_settings(tmp_path) == {"comment": True, "detail": "short"}
    (tmp_path / TASK_CARD).write_text('{"answer_order": "score_first", "rule_detail": "full"}')
    assert finetuned_settings(tmp_path) == {"comment": False, "detail": "full"}
