"""The hardware's ``compact_lm_head`` (src/medpref/finetune/hardware.py): trl's fused LM
head on the learned positions only, on a CPU too. It must run the head on fewer rows,
give the plain path's loss and training curve, and leave trl as it was afterwards."""

from __future__ import annotations

import pytest

from conftest import make_tiny_llama
from medpref import REPO_ROOT
from medpref.finetune import hardware as lm_head
from medpref.finetune.hardware import load_hardware
from medpref.finetune.sft import LoraSettings, build_sft_trainer, load_base, with_lora
from medpref.params import load_params
from medpref.rem.build_rem import rem_sft_config

TOKENIZER = REPO_ROOT / "models" / "smollm2-135m-instruct"
PROMPT = [{"role": "system", "content": "Judge whether the doctor follows the rule."},
          {"role": "user", "content": "Patient: I have had a cough for two weeks.\n"
                                      "Doctor: Any fever or night sweats? How is your sleep?"}]


def example(answer: str) -> dict:
    return {"prompt": list(PROMPT), "completion": [{"role": "assistant", "content": answer}]}


DATA = [example("Score: 2\nComment: asks about fever."), example("Score: 1"),
        example("Score: 0\nComment: no question about the cough's course."),
        example("Score: 2\nComment: asks about sleep and sweats.")]


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(TOKENIZER)
    return make_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), tok, max_positions=1024)


def trainer(model_dir, out, compact: bool, steps: int = 1):
    """The REM's trainer (cpu hardware, rem.train recipe) on DATA, from one seed."""
    from transformers import set_seed

    hw = load_hardware("cpu")
    set_seed(0)
    tok, base = load_base(model_dir, hw, device="cpu")
    model = with_lora(base, LoraSettings(r=4, lora_alpha=8, lora_dropout=0.0))
    train = load_params().rem.train
    train = train.model_copy(update={"recipe": train.recipe.model_copy(
        update={"learning_rate": 1e-2})})
    args = rem_sft_config(train, hw, out, 0, steps=steps)
    return build_sft_trainer(model, tok, DATA, args, compact_lm_head=compact)


def head_rows(monkeypatch) -> list[int]:
    """Rows each call of trl's chunked log-prob function gets (what the LM head projects)."""
    import trl.trainer.utils as trl_utils

    rows: list[int] = []
    real = trl_utils._ChunkedLogProbFunction

    class Spy:
        @staticmethod
        def apply(hidden, *args):
            rows.append(hidden.shape[0])
            return real.apply(hidden, *args)

    monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction", Spy)
    return rows


def test_the_compact_head_projects_the_answer_only_and_keeps_the_loss(tiny_model_dir,
                                                                       tmp_path, monkeypatch):
    import torch

    t = trainer(tiny_model_dir, tmp_path, compact=False)
    batch = dict(t.data_collator([t.train_dataset[i] for i in range(len(DATA))]))
    rows = head_rows(monkeypatch)
    model = t.model.eval()
    with torch.no_grad():
        plain = float(t.compute_loss(model, dict(batch)))
        with lm_head.compact_lm_head():
            compact = float(t.compute_loss(model, dict(batch)))
    labels = batch["labels"][:, 1:]
    learned = int((labels != -100).sum())
    assert rows == [labels.numel(), learned]           # every position, then the answers only
    assert learned < labels.numel() // 3
    assert compact == pytest.approx(plain, rel=1e-6, abs=1e-6)


@pytest.mark.slow
def test_a_compact_run_follows_the_plain_run(tiny_model_dir, tmp_path):
    """Three optimizer steps from one seed: the loss curves and the trained adapters agree
    to float32 round-off; trl's switch is its own again after the compact run."""
    import torch
    import trl.trainer.utils as trl_utils

    original = trl_utils._use_triton
    runs = {}
    for compact in (False, True):
        t = trainer(tiny_model_dir, tmp_path / str(compact), compact=compact, steps=3)
        t.train()
        runs[compact] = (
            [h["loss"] for h in t.state.log_history if "loss" in h and "train_runtime" not in h],
            {k: v.detach().clone() for k, v in t.model.named_parameters() if "lora_B" in k})
    assert trl_utils._use_triton is original
    (plain_loss, plain_w), (compact_loss, compact_w) = runs[False], runs[True]
    assert len(plain_loss) == 3 and plain_loss[0] != plain_loss[-1]   # it trained
    assert compact_loss == pytest.approx(plain_loss, rel=1e-4)
    assert all(float(plain_w[k].abs().sum()) > 0 for k in plain_w)
    for k in plain_w:
        assert torch.allclose(compact_w[k], plain_w[k], rtol=1e-3, atol=1e-5), k


def test_the_switch_is_restored_after_an_error_and_counts_nesting():
    import trl.trainer.utils as trl_utils

    original = trl_utils._use_triton
    with pytest.raises(KeyError), lm_head.compact_lm_head():
        with lm_head.compact_lm_head():
            assert trl_utils._use_triton is lm_head._always_compact
        assert trl_utils._use_triton is lm_head._always_compact   # the outer one holds
        raise KeyError("boom")
    assert trl_utils._use_triton is original
    with lm_head.compact_lm_head(enabled=False):
        assert trl_utils._use_triton is original


def test_a_trl_without_the_switch_is_a_clear_error(monkeypatch):
    import trl.trainer.utils as trl_utils

    monkeypatch.delattr(trl_utils, "_use_triton")
    with pytest.raises(RuntimeError, match="compact_lm_head: false"), lm_head.compact_lm_head():
        pass


def test_the_hardware_files_say_where_it_is_on(tmp_path):
    """On for the REM on a CPU (Table 5 held: docs/speed.md); the policy has its own key,
    off on a CPU; every section must set it."""
    cpu, gpu = load_hardware("cpu"), load_hardware("gpu")
    assert (cpu.rem.compact_lm_head, cpu.policy.compact_lm_head) == (True, False)
    assert gpu.rem.compact_lm_head and gpu.policy.compact_lm_head
    text = (REPO_ROOT / "configs/hardware/cpu.yaml").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text("\n".join(line for line in text.splitlines()
                             if not line.startswith("  compact_lm_head: true")))
    with pytest.raises(ValueError, match="'rem.compact_lm_head': Field required"):
        load_hardware(str(bad))
