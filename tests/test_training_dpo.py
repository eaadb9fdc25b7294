"""Stage 05 training: pairs → trl's conversational format, a few DPO steps of a tiny model
(every LoRA weight moves, the chosen-minus-rejected margin rises), kill-and-resume,
min_pairs skips, recipe + hardware → trainer arguments, the trained-policy registry."""

from __future__ import annotations

import json
import random

import pytest
import yaml

from conftest import make_tiny_llama
from medpref import REPO_ROOT
from medpref.contracts import Dialogue, PreferencePair, Turn, read_jsonl, write_jsonl
from medpref.finetune.hardware import load_hardware
from medpref.finetune.runs import read_run_card
from medpref.params import load_params
from medpref.training.dialogue_sft import sft_examples, train_dialogue_sft
from medpref.training.dpo import (
    build_dpo_trainer,
    dpo_config,
    pair_to_conversation,
    policy_model,
    train_dpo,
)

TOKENIZER = REPO_ROOT / "models" / "smollm2-135m-instruct"
SYSTEM = "You are a doctor."
GOOD = ["How long have you had it, and does anything make it better or worse?",
        "Let us check your blood pressure and do a few blood tests to find the cause.",
        "Is the pain sharp or dull, and does it spread anywhere?",
        "That sounds like a migraine; keeping a headache diary will help us confirm it."]
BAD = ["Take these pills.", "I do not know.", "Go away.", "Nothing to worry about."]


def _pairs(n: int = 4) -> list[PreferencePair]:
    dialogues = read_jsonl(REPO_ROOT / "data/embedded/dialogues.jsonl", Dialogue)
    return [PreferencePair(id=f"p-{i}", prompt=dialogues[i].turns[:1] if i % 2 else
                           dialogues[i].turns[:3], chosen=GOOD[i % 4], rejected=BAD[i % 4],
                           strategy="cai_dep") for i in range(n)]


def _with_policy(hardware, **update):
    """``hardware`` with some fields of its ``policy`` section changed."""
    return hardware.model_copy(update={"policy": hardware.policy.model_copy(update=update)})


def _tuned(policy, sft: dict | None = None, dpo: dict | None = None, **both):
    """A policy recipe with fields of its SFT and DPO recipes changed (``both``: in each)."""
    return policy.model_copy(update={
        "sft": policy.sft.model_copy(update={**both, **(sft or {})}),
        "dpo": policy.dpo.model_copy(update={**both, **(dpo or {})})})


@pytest.fixture(scope="module")
def recipe():
    """The tiny recipe with short, fast, lively settings for a model built from a config."""
    return _tuned(load_params().training.recipes["tiny"], sft={"max_steps": 2},
                  dpo={"max_steps": 4, "num_train_epochs": 10}, learning_rate=5e-3,
                  max_length=256)


@pytest.fixture(scope="module")
def hardware():
    """The CPU hardware (batch 1 × 1), a checkpoint every 2 steps, a log line every step."""
    return _with_policy(load_hardware("cpu"), save_steps=2, logging_steps=1)


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(TOKENIZER)
    return make_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), tok)


@pytest.fixture(scope="module")
def sft_adapter(tiny_model_dir, recipe, hardware, tmp_path_factory):
    """SFT of the tiny model on a few embedded dialogues (the DPO starting point)."""
    work = tmp_path_factory.mktemp("sft")
    dialogues = read_jsonl(REPO_ROOT / "data/embedded/dialogues.jsonl", Dialogue)[:3]
    run = train_dialogue_sft(tiny_model_dir, sft_examples(dialogues, SYSTEM, 6, 0),
                             work / "adapter", work / "ckpt", recipe.sft, hardware, seed=0)
    assert run.fit.steps == 2 and (work / "adapter" / "adapter_model.safetensors").exists()
    assert not (work / "ckpt").exists()  # keep_checkpoints false: removed when done
    return work / "adapter"


def _adapter_weights(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "adapter_model.safetensors"))


def _mean_margin(model, tok, examples) -> float:
    """Mean log-prob gap (chosen − rejected), computed by the held-out module, not trl."""
    from medpref.training.heldout import completion_logp

    return sum(completion_logp(model, tok, ex["prompt"], ex["chosen"])
               - completion_logp(model, tok, ex["prompt"], ex["rejected"])
               for ex in examples) / len(examples)


def _load_policy(base, adapter):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), str(adapter))
    return model.eval(), AutoTokenizer.from_pretrained(base)


def test_pair_becomes_conversational_with_the_chat_template_applied_once(
        tiny_model_dir, recipe, hardware, tmp_path):
    pair = _pairs(4)[2]  # a history of three turns: patient, doctor, patient
    ex = pair_to_conversation(pair, SYSTEM)
    assert [m["role"] for m in ex["prompt"]] == ["system", "user", "assistant", "user"]
    assert [m["content"] for m in ex["prompt"][1:]] == [t.text for t in pair.prompt]
    assert ex["chosen"] == [{"role": "assistant", "content": pair.chosen}]
    assert ex["rejected"] == [{"role": "assistant", "content": pair.rejected}]
    assert not any("<|im_start|>" in m["content"] for m in ex["prompt"] + ex["chosen"])
    # what trl tokenizes: one system block, the template's markers once per message
    tok, model = policy_model(tiny_model_dir, None, hardware)
    args = dpo_config(recipe.dpo, hardware, tmp_path / "ckpt", 0)
    trainer = build_dpo_trainer(model, tok, [ex], [], args, recipe.dpo)
    row = trainer.train_dataset[0]
    prompt_text = tok.decode(row["prompt_ids"])
    assert prompt_text.count("<|im_start|>system") == 1
    assert prompt_text.count("<|im_start|>") == len(ex["prompt"]) + 1  # + generation prompt
    assert prompt_text.endswith("<|im_start|>assistant\n")
    assert tok.decode(row["chosen_ids"]) == pair.chosen + "<|im_end|>\n"
    assert tok.decode(row["rejected_ids"]) == pair.rejected + "<|im_end|>\n"


@pytest.mark.slow
def test_dpo_steps_move_every_lora_weight_and_raise_the_margin(
        tiny_model_dir, sft_adapter, recipe, hardware, tmp_path):
    examples = [pair_to_conversation(p, SYSTEM) for p in _pairs(4)]
    run = train_dpo(tiny_model_dir, sft_adapter, examples, tmp_path / "dpo", tmp_path / "ckpt",
                    recipe.dpo, hardware, seed=0)
    assert run.fit.steps == 4 and run.n_pairs == 4
    before, after = _adapter_weights(sft_adapter), _adapter_weights(tmp_path / "dpo")
    assert before.keys() == after.keys() and len(after) > 0
    unchanged = [k for k in after if (after[k] - before[k]).abs().max() == 0]
    assert not unchanged, f"LoRA weights not trained: {unchanged}"
    sft_model, tok = _load_policy(tiny_model_dir, sft_adapter)
    dpo_model, _ = _load_policy(tiny_model_dir, tmp_path / "dpo")
    m_sft, m_dpo = _mean_margin(sft_model, tok, examples), _mean_margin(dpo_model, tok, examples)
    assert m_dpo > m_sft
    # trl's reward margin is beta × the change of that log-prob margin (reference = SFT)
    assert run.evaluation["rewards/margins"] == pytest.approx(0.1 * (m_dpo - m_sft), rel=0.05)
    assert run.evaluation["rewards/accuracies"] > 0.5
    card = json.loads((tmp_path / "dpo" / "medpref_task.json").read_text())
    assert card["kind"] == "policy_dpo" and card["steps"] == 4
    assert not (tmp_path / "dpo" / "ref").exists()  # the frozen reference is not saved


class _Killed(RuntimeError):
    pass


@pytest.mark.slow
def test_killed_run_resumes_from_its_last_checkpoint(tiny_model_dir, sft_adapter, recipe,
                                                     hardware, tmp_path):
    from transformers import TrainerCallback

    class KillAfter(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 3:
                raise _Killed("killed at step 3")

    examples = [pair_to_conversation(p, SYSTEM) for p in _pairs(4)]
    kw = {"seed": 0}
    with pytest.raises(_Killed):
        train_dpo(tiny_model_dir, sft_adapter, examples, tmp_path / "a", tmp_path / "ckpt",
                  recipe.dpo, hardware, callbacks=(KillAfter(),), **kw)
    assert (tmp_path / "ckpt" / "checkpoint-2").exists() and not (tmp_path / "a").exists()
    resumed = train_dpo(tiny_model_dir, sft_adapter, examples, tmp_path / "a",
                        tmp_path / "ckpt", recipe.dpo, hardware, **kw)
    assert resumed.fit.resumed_from == 2 and resumed.fit.steps == 4
    logged = [h["step"] for h in resumed.fit.train_logs()]
    assert logged[0] <= 2 and logged[-1] == 4  # history carried over from the checkpoint
    straight = train_dpo(tiny_model_dir, sft_adapter, examples, tmp_path / "b",
                         tmp_path / "ckpt-b", recipe.dpo, hardware, **kw)
    assert straight.fit.resumed_from is None
    a, b = _adapter_weights(tmp_path / "a"), _adapter_weights(tmp_path / "b")
    assert all(float((a[k] - b[k]).abs().max()) < 1e-5 for k in a)


def test_changed_run_does_not_resume_a_stale_checkpoint(tmp_path):
    from medpref.finetune.runs import prepare_checkpoints

    assert prepare_checkpoints(tmp_path / "c", "key-1") is None
    (tmp_path / "c" / "checkpoint-5").mkdir()
    (tmp_path / "c" / "checkpoint-5" / "trainer_state.json").write_text("{}")
    assert prepare_checkpoints(tmp_path / "c", "key-1").endswith("checkpoint-5")
    assert prepare_checkpoints(tmp_path / "c", "key-2") is None
    assert not (tmp_path / "c" / "checkpoint-5").exists()


# -- the stage: min_pairs skip, summary, policy roles ---------------------------------------

def _stage(tmp_path, runs: dict[str, str], min_pairs: int = 4):
    """Stage 05 before a part is opened: the test edits its params, then opens its parts
    with ``open_part`` (what ``open_stage("05_training", part=..., run=...)`` calls)."""
    from medpref.params import load_params
    from medpref.stagekit import Stage
    from medpref.training import stage as training_stage

    stage = Stage(name="05_training", params=load_params())
    p = stage.p
    p.dpo.heldout_runs, p.dpo.heldout_folds = None, 0   # a test turns it on where it checks it
    stage.params.annotation.strategies = []   # the runs are exactly `runs`
    p.dpo.runs = runs
    p.dpo.min_pairs = min_pairs
    p.dpo.output_dir = str(tmp_path / "dpo")
    p.sft.output_dir = str(tmp_path / "sft")
    p.reports = str(tmp_path / "reports")
    p.checkpoints_dir = str(tmp_path / "ckpt")
    return stage, training_stage


def test_runs_with_too_few_pairs_or_no_file_are_skipped_with_their_reason(tmp_path):
    write_jsonl(tmp_path / "few.jsonl", _pairs(2))
    runs = {"few": str(tmp_path / "few.jsonl"), "none": str(tmp_path / "absent.jsonl"),
            "control_process": str(tmp_path / "few.jsonl")}   # a control's run (issue 32)
    stage, training_stage = _stage(tmp_path, runs, min_pairs=4)
    for name in runs:
        part = training_stage.open_part(stage, "dpo", name)
        out = training_stage.run(part)  # no model is loaded, nothing raises
        assert out.metrics["trained"] == 0
        card = read_run_card(tmp_path / "dpo" / name)
        assert card["status"] == "skipped"
        # the run's DVC outs exist: its folder and an empty log history (header only)
        assert (tmp_path / "reports" / "dpo" / name / "log_history.csv").read_text() \
            .startswith("step,epoch,loss")
    assert read_run_card(tmp_path / "dpo" / "few")["reason"] == "2 pairs < min_pairs 4"
    assert read_run_card(tmp_path / "dpo" / "none")["reason"].startswith("no pairs file")
    summary = training_stage.run(training_stage.open_part(stage, "summary"))
    assert summary.metrics == {"runs": 3, "trained": 0, "trainings": 0, "skipped": 3,
                               "controls": 1, "few_steps": 0, "policies": 0}
    assert list(summary.table["reason"]) == ["2 pairs < min_pairs 4",
                                             f"no pairs file {tmp_path / 'absent.jsonl'}",
                                             "2 pairs < min_pairs 4"]
    assert list(summary.table["control"]) == [False, False, True]
    # the summary wrote its records, and its tables are the ones the records rebuild
    from medpref.training.outputs import SUMMARY_OUTPUTS

    reports = tmp_path / "reports" / "summary"
    rows = SUMMARY_OUTPUTS.load_records(reports)["run_rows"]
    assert [(r["run"], r["status"]) for r in rows] == [(n, "skipped") for n in runs]
    assert SUMMARY_OUTPUTS.differences(reports, stage.params, tmp_path / "rebuilt") == []


def test_a_strategy_that_made_no_pair_is_skipped_not_a_crash(tmp_path):
    """Stage 04 writes an empty pairs file for a strategy with no pair (every item tied or
    unparsable): its DPO run is skipped with "0 pairs", as for too few."""
    (tmp_path / "empty.jsonl").write_text("")
    stage, training_stage = _stage(tmp_path, {"empty": str(tmp_path / "empty.jsonl")})
    out = training_stage.run(training_stage.open_part(stage, "dpo", "empty"))
    assert out.metrics["trained"] == 0
    assert read_run_card(tmp_path / "dpo" / "empty")["reason"] == "0 pairs < min_pairs 4"


@pytest.mark.slow
def test_identical_pairs_files_train_once_and_share_the_adapter(
        tiny_model_dir, sft_adapter, recipe, hardware, tmp_path, monkeypatch, caplog):
    """Run b's pairs file has run a's content: b copies a's adapter (it does not train),
    and runs.csv says so; a changed beta or a tampered adapter is not shared."""
    import logging
    import shutil

    import pandas as pd

    from medpref.training import reuse

    write_jsonl(tmp_path / "a.jsonl", _pairs(4))
    write_jsonl(tmp_path / "b.jsonl", _pairs(4))  # the same pairs under another name
    runs = {"a": str(tmp_path / "a.jsonl"), "b": str(tmp_path / "b.jsonl"),
            "c": str(tmp_path / "a.jsonl")}
    stage, training_stage = _stage(tmp_path, runs)
    p = stage.p
    p.recipes[p.recipe] = recipe.model_copy(deep=True)  # 4 steps (its dpo.max_steps)
    (tmp_path / "hardware.yaml").write_text(yaml.safe_dump(hardware.model_dump()))
    p.hardware = str(tmp_path / "hardware.yaml")  # a path works as well as a name
    p.warn_below_steps = 5
    p.dpo.heldout_folds, p.dpo.heldout_runs = 2, ["a", "b"]   # c: not cross-fitted
    roles = stage.params.shared.llm.roles
    roles["policy"] = roles["policy"].model_copy(update={"model": str(tiny_model_dir)})
    shutil.copytree(sft_adapter, tmp_path / "sft" / "adapter")
    with caplog.at_level(logging.WARNING):
        first = training_stage.run(training_stage.open_part(stage, "dpo", "a"))
    assert "DPO: 4 optimizer steps < warn_below_steps 5" in caplog.text
    assert first.metrics["steps"] == 4 and first.metrics["shared"] == 0

    def no_training(*args, **kwargs):
        raise AssertionError("trained")

    monkeypatch.setattr(training_stage, "train_dpo", no_training)
    second = training_stage.run(training_stage.open_part(stage, "dpo", "b"))
    dpo = tmp_path / "dpo"
    card_a, card_b = read_run_card(dpo / "a"), read_run_card(dpo / "b")
    assert card_a["reused_from"] is None and card_b["reused_from"] == "a"
    assert card_b["adapter_sha"] == card_a["adapter_sha"] == reuse.adapter_sha(dpo / "b" /
                                                                               "adapter")
    assert card_b["pairs_sha"] == card_a["pairs_sha"] == reuse.pairs_sha(tmp_path / "b.jsonl")
    assert card_b["steps"] == 4 and card_b["steps_warning"] == card_a["steps_warning"] != ""
    assert second.metrics["shared"] == 1 and second.metrics["eval"] == first.metrics["eval"]
    task = json.loads((dpo / "b" / "adapter" / "medpref_task.json").read_text())
    assert task["run"] == "b" and task["pairs_file"] == runs["b"]
    logs = tmp_path / "reports" / "dpo"
    assert (logs / "b" / "log_history.csv").read_text() == \
        (logs / "a" / "log_history.csv").read_text()
    training_stage.run(training_stage.open_part(stage, "summary"))
    table = pd.read_csv(tmp_path / "reports" / "summary" / "runs.csv", keep_default_na=False)
    assert list(table["shares_training_of"]) == ["", "a", ""]
    assert list(table["status"]) == ["trained", "trained", "not run"]
    from medpref.training.outputs import SUMMARY_OUTPUTS

    records = SUMMARY_OUTPUTS.load_records(tmp_path / "reports" / "summary")
    assert [r["run"] for r in records["policy_roles"]] == ["a", "b"]
    assert {r["run"] for r in records["margin_curves"]} == {"a", "b"}
    assert SUMMARY_OUTPUTS.differences(tmp_path / "reports" / "summary", stage.params,
                                       tmp_path / "rebuilt") == []
    assert table.loc[0, "adapter_sha"] == table.loc[1, "adapter_sha"] != ""
    assert table.loc[0, "pairs_sha"] == table.loc[1, "pairs_sha"]
    assert table.loc[1, "steps_warning"].startswith("DPO: 4 optimizer steps")
    # the held-out reward: computed for a (every pair once), copied for b, which shares it
    acc = [float(table.loc[0, c]) for c in ("heldout_acc_lo", "heldout_acc", "heldout_acc_hi")]
    assert float(table.loc[0, "heldout_pairs"]) == 4 and 0 <= acc[0] <= acc[1] <= acc[2] <= 1
    assert table.loc[1, "heldout_margin"] == table.loc[0, "heldout_margin"]
    assert table.loc[2, "heldout_pairs"] == ""
    rows_a = pd.read_csv(logs / "a" / "heldout.csv")
    assert sorted(rows_a["pair"]) == [0, 1, 2, 3] and set(rows_a["fold"]) == {0, 1}
    assert (logs / "b" / "heldout.csv").read_text() == (logs / "a" / "heldout.csv").read_text()
    # the same pairs with another beta is another training; so is a tampered adapter
    p.recipes[p.recipe].dpo.beta = 0.2
    with pytest.raises(AssertionError, match="trained"):
        training_stage.run(training_stage.open_part(stage, "dpo", "c"))
    p.recipes[p.recipe].dpo.beta = 0.1
    (dpo / "a" / "adapter" / "adapter_model.safetensors").write_bytes(b"tampered")
    (dpo / "b" / "run.json").unlink()
    with pytest.raises(AssertionError, match="trained"):
        training_stage.run(training_stage.open_part(stage, "dpo", "c"))


def test_trained_policies_are_backend_roles_with_their_adapters(tmp_path):
    from medpref.finetune import policies

    stage, _ = _stage(tmp_path, {"cai_dep": "x.jsonl", "agent": "y.jsonl"})
    for run, status in [("sft", "trained"), ("cai_dep", "trained"), ("agent", "skipped")]:
        folder = policies.run_dir(stage.params, run)
        folder.mkdir(parents=True)
        name = "skipped.json" if status == "skipped" else "run.json"
        (folder / name).write_text(json.dumps({"run": run, "status": status}))
    found = policies.register_policy_roles(stage.params)
    assert [p.role for p in found] == ["policy_sft", "policy_cai_dep"]
    role = stage.params.shared.llm.roles["policy_cai_dep"]
    base = stage.params.shared.llm.roles["policy"]
    assert role.backend == "hf" and role.model == base.model
    assert role.adapter == str(tmp_path / "dpo" / "cai_dep" / "adapter")
    assert base.adapter is None  # the base role is untouched


def test_unknown_run_or_part_fails_with_the_known_names():
    from medpref.stagekit import open_stage

    with pytest.raises(ValueError, match="no DPO run 'nope'.*gpt4_rank"):
        open_stage("05_training", part="dpo", run="nope")
    with pytest.raises(ValueError, match="part must be one of"):
        open_stage("05_training", part="train")
    summary = open_stage("05_training", part="summary")
    assert summary.reports_dir.parts[-2:] == ("05_training", "summary")


# -- recipes and hardware --------------------------------------------------------------------

def test_paper_recipe_on_gpu_hardware_is_plpf_appendix_c():
    paper, gpu = load_params().training.recipes["paper"], load_hardware("gpu")
    for recipe in (paper.sft, paper.dpo):
        assert (recipe.r, recipe.lora_alpha, recipe.learning_rate) == (64, 16, 1e-4)
        assert recipe.target_modules["baichuan"] == ["W_pack", "o_proj"]
        assert recipe.target_modules["qwen"] == ["c_attn", "c_proj", "w1", "w2"]
    assert (gpu.policy.per_device_train_batch_size,
            gpu.policy.gradient_accumulation_steps) == (2, 16)
    assert gpu.policy.gradient_checkpointing is True and gpu.bf16 == "auto"


def test_the_default_reaches_trl_and_peft_with_the_committed_values(tmp_path):
    """What the embedded default (the tiny recipe on the cpu hardware) hands trl and peft:
    the values the pipeline trained with before recipe and hardware were split (issue 23;
    resolved field by field against f369f24's tiny profile, the same)."""
    from medpref.training.dialogue_sft import sft_config

    params = load_params().training
    recipe, hardware = params.active_recipe(), params.active_hardware()
    assert (params.recipe, params.hardware) == ("tiny", "cpu")
    common = {"learning_rate": 5e-4, "warmup_steps": 0.0, "lr_scheduler_type": "linear",
              "per_device_train_batch_size": 1, "per_device_eval_batch_size": 1,
              "gradient_accumulation_steps": 1, "max_steps": -1,
              "max_length": 256, "bf16": False, "fp16": False, "gradient_checkpointing": False,
              "use_cpu": True, "seed": 13, "data_seed": 13, "logging_steps": 1,
              "save_steps": 10, "save_total_limit": 1}
    sft_args = sft_config(recipe.sft, hardware, tmp_path, 13).to_dict()
    dpo_args = dpo_config(recipe.dpo, hardware, tmp_path, 13).to_dict()
    for args in (sft_args, dpo_args):
        assert {k: args[k] for k in common} == common
    # SFT: at most 2 epochs, the development loss picks one; DPO: one epoch over the pairs
    assert (sft_args["num_train_epochs"], dpo_args["num_train_epochs"]) == (2, 1)
    assert (dpo_args["beta"], dpo_args["loss_type"], dpo_args["precompute_ref_log_probs"]) == (
        0.1, ["sigmoid"], False)
    assert recipe.sft.lora("llama") == recipe.sft.lora("other") == recipe.dpo.lora("llama")
    lora = recipe.sft.lora("llama")
    assert (lora.r, lora.lora_alpha, lora.lora_dropout, lora.target_modules) == (
        8, 16, 0.0, ("q_proj", "v_proj"))
    assert (hardware.device, hardware.num_threads) == ("cpu", 2)


def test_any_recipe_runs_on_any_hardware(tmp_path):
    """What is trained comes from the recipe, where and how fast from the hardware: the
    paper recipe on the CPU hardware, the tiny recipe on the GPU hardware."""
    from medpref.finetune.hardware import bf16_supported
    from medpref.training.dialogue_sft import sft_config

    recipes = load_params().training.recipes
    cpu, gpu = load_hardware("cpu"), load_hardware("gpu")
    paper_cpu = dpo_config(recipes["paper"].dpo, cpu, tmp_path, 0)
    assert (paper_cpu.learning_rate, paper_cpu.warmup_steps, paper_cpu.max_length) == (
        1e-4, 0.03, 2048)
    assert (paper_cpu.per_device_train_batch_size, paper_cpu.gradient_accumulation_steps,
            paper_cpu.save_steps) == (1, 1, 10)
    assert paper_cpu.use_cpu and not paper_cpu.bf16 and not paper_cpu.gradient_checkpointing
    tiny_gpu = sft_config(recipes["tiny"].sft, gpu, tmp_path, 0)
    assert (tiny_gpu.learning_rate, tiny_gpu.num_train_epochs, tiny_gpu.max_length) == (
        5e-4, 2, 256)
    assert (tiny_gpu.per_device_train_batch_size, tiny_gpu.gradient_accumulation_steps,
            tiny_gpu.save_steps) == (2, 16, 50)
    assert tiny_gpu.gradient_checkpointing is True and tiny_gpu.bf16 is bf16_supported()


def test_old_profile_keys_are_unknown_keys():
    from medpref.params import ParamsError, parse_params

    raw = yaml.safe_load((REPO_ROOT / "params.yaml").read_text(encoding="utf-8"))

    def parsed_with(**training):
        return parse_params({**raw, "training": {**raw["training"], **training}})

    with pytest.raises(ParamsError, match=r"unknown key 'training.profile'"):
        parsed_with(profile="tiny")
    with pytest.raises(ParamsError, match=r"unknown key 'training.profiles'"):
        parsed_with(profiles=raw["training"]["recipes"])
    tiny = raw["training"]["recipes"]["tiny"]
    for key in ("per_device_batch_size", "save_steps", "bf16"):   # the hardware file's now
        with pytest.raises(ParamsError, match=f"unknown key 'training.recipes.tiny.{key}'"):
            parsed_with(recipes={"tiny": {**tiny, key: 1}})
    with pytest.raises(ValueError, match="training.recipe 'paperr' is not in training.recipes"):
        parsed_with(recipe="paperr").training.active_recipe()
    with pytest.raises(FileNotFoundError, match="no hardware 'tpu'"):
        parsed_with(hardware="tpu").training.active_hardware()


def test_hardware_sets_precision_checkpointing_and_progress(tmp_path):
    import torch

    from medpref.finetune.hardware import resolve_bf16
    tiny, cpu = load_params().training.recipes["tiny"].dpo, load_hardware("cpu")
    args = dpo_config(tiny, cpu, tmp_path, 0)
    gpu_bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    assert args.bf16 is False and args.use_cpu  # trl's default (True) is overridden
    assert args.gradient_checkpointing is False and args.disable_tqdm is False
    assert args.padding_free is False and args.precompute_ref_log_probs is False
    # whole epochs, counted by the Trainer; a recipe's max_steps is an explicit override
    assert args.num_train_epochs == tiny.num_train_epochs and tiny.max_steps is None
    assert args.max_steps == -1 and args.save_steps == cpu.policy.save_steps
    capped = dpo_config(tiny.model_copy(update={"max_steps": 3}), cpu, tmp_path, 0)
    assert capped.max_steps == 3
    auto = cpu.model_copy(update={"bf16": "auto", "device": "auto"})
    assert dpo_config(tiny, auto, tmp_path, 0).bf16 is gpu_bf16
    if not gpu_bf16:
        with pytest.raises(ValueError, match="bf16"):
            resolve_bf16(cpu.model_copy(update={"bf16": True}))
    assert tiny.modules_for("llama") == ("q_proj", "v_proj")
    assert tiny.modules_for("mistral") == tuple(tiny.target_modules["default"])


def test_steps_follow_epochs_and_the_override():
    from medpref.training.arguments import optimizer_steps

    hw = _with_policy(load_hardware("cpu"), per_device_train_batch_size=2,
                      gradient_accumulation_steps=3)  # 6 pairs a step
    assert optimizer_steps(7, hw, 1, None) == 2
    assert optimizer_steps(7, hw, 2, None) == 4
    assert optimizer_steps(100, hw, 1, 5) == 5
    assert optimizer_steps(3, hw, 1, 5) == 5  # an override is exact, not a cap
    assert optimizer_steps(12, hw, 1, None, world_size=2) == 1
    assert optimizer_steps(13, hw, 3, None, world_size=2) == 6


@pytest.mark.slow
def test_epochs_are_whole_passes_with_the_trainers_step_count(tiny_model_dir, sft_adapter,
                                                             recipe, hardware, tmp_path):
    """No step cap: 2 epochs over 5 pairs at batch 1 × accumulation 2 are 2 × ceil(5/2) = 6
    optimizer steps (the last step of an epoch takes the leftover pair), and SFT's one
    epoch over 5 examples at batch 2 is ceil(5/2) = 3 steps."""
    from medpref.training.arguments import optimizer_steps

    whole = _tuned(recipe, sft={"max_steps": None, "num_train_epochs": 1},
                   dpo={"max_steps": None, "num_train_epochs": 2})
    hw = _with_policy(hardware, per_device_train_batch_size=1, gradient_accumulation_steps=2)
    examples = [pair_to_conversation(p, SYSTEM) for p in _pairs(5)]
    run = train_dpo(tiny_model_dir, sft_adapter, examples, tmp_path / "dpo", tmp_path / "ck",
                    whole.dpo, hw, seed=0)
    assert run.n_pairs == 5 and run.fit.steps == 6 == optimizer_steps(5, hw, 2, None)
    assert run.fit.log_history[-1]["epoch"] == pytest.approx(2.0) and run.card["epochs"] == 2
    dialogues = read_jsonl(REPO_ROOT / "data/embedded/dialogues.jsonl", Dialogue)[:3]
    sft_hw = _with_policy(hw, per_device_train_batch_size=2, gradient_accumulation_steps=1)
    sft = train_dialogue_sft(tiny_model_dir, sft_examples(dialogues, SYSTEM, 5, 0, 2),
                             tmp_path / "sft", tmp_path / "ck-sft", whole.sft, sft_hw, seed=0)
    assert sft.n_examples == 5 and sft.fit.steps == 3 == optimizer_steps(5, sft_hw, 1, None)
    assert sft.fit.log_history[-1]["epoch"] == pytest.approx(1.0)


def test_paper_recipe_on_a_small_pairs_file_is_flagged_with_its_step_count():
    """The gpu hardware's batch 2 × accumulation 16 (PLPF's) is 32 pairs a step: a 21-pair
    file is one step of the paper recipe's one epoch."""
    from medpref.training.arguments import few_steps_warning

    params = load_params().training
    paper, tiny = params.recipes["paper"], params.recipes["tiny"]
    gpu, cpu = load_hardware("gpu"), load_hardware("cpu")
    message = few_steps_warning("DPO", 21, gpu, paper.dpo, params.warn_below_steps)
    assert message.startswith(f"DPO: 1 optimizer step < warn_below_steps {params.warn_below_steps}")
    assert "batch 2 × accumulation 16" in message and "ceil(21 / 32)" in message
    assert few_steps_warning("DPO", 32 * 10, gpu, paper.dpo, 10) == ""
    # the tiny default (batch 1): the smallest committed pairs file (7 pairs) passes
    assert few_steps_warning("DPO", 7, cpu, tiny.dpo, params.warn_below_steps) == ""


# -- the real model --------------------------------------------------------------------------

@pytest.mark.slow
def test_dpo_on_the_embedded_model_moves_every_weight_and_raises_the_margin(tmp_path):
    base = REPO_ROOT / "models" / "smollm2-135m-instruct"
    recipe = _tuned(load_params().training.recipes["tiny"], sft={"max_steps": 1},
                    dpo={"max_steps": 3, "num_train_epochs": 10}, max_length=256)
    cpu = load_hardware("cpu")
    dialogues = read_jsonl(REPO_ROOT / "data/embedded/dialogues.jsonl", Dialogue)[:2]
    sft = train_dialogue_sft(base, sft_examples(dialogues, SYSTEM, 2, 0, 2), tmp_path / "sft",
                             tmp_path / "ck1", recipe.sft, cpu, seed=0)
    examples = [pair_to_conversation(p, SYSTEM) for p in _pairs(2)]
    run = train_dpo(base, sft.adapter_dir, examples, tmp_path / "dpo", tmp_path / "ck2",
                    recipe.dpo, cpu, seed=0)
    before, after = _adapter_weights(tmp_path / "sft"), _adapter_weights(tmp_path / "dpo")
    assert not [k for k in after if (after[k] - before[k]).abs().max() == 0]
    sft_model, tok = _load_policy(base, tmp_path / "sft")
    dpo_model, _ = _load_policy(base, tmp_path / "dpo")
    assert _mean_margin(dpo_model, tok, examples) > _mean_margin(sft_model, tok, examples)
    assert run.evaluation["rewards/margins"] > 0


# -- SFT on dialogues ------------------------------------------------------------------------

def test_sft_learns_only_the_doctor_turn(tiny_model_dir, recipe, hardware, tmp_path):
    from medpref.finetune.sft import load_base, with_lora
    from medpref.training.dialogue_sft import build_sft_trainer, sft_config

    dialogue = Dialogue(id="d", turns=[Turn(role="patient", text="My knee hurts."),
                                       Turn(role="doctor", text="Since when?"),
                                       Turn(role="patient", text="Two days."),
                                       Turn(role="doctor", text="Did you fall?")])
    examples = sft_examples([dialogue], SYSTEM, None, 0, history_max_turns=2)
    assert [ex["completion"][0]["content"] for ex in examples] == ["Since when?", "Did you fall?"]
    assert [m["role"] for m in examples[1]["prompt"]] == ["system", "assistant", "user"]
    tok, base = load_base(tiny_model_dir, hardware, device="cpu")
    model = with_lora(base, recipe.sft.lora("llama"))
    trainer = build_sft_trainer(model, tok, examples,
                                sft_config(recipe.sft, hardware, tmp_path, 0))
    row = trainer.train_dataset[1]
    batch = trainer.data_collator([row])  # what the loss sees: -100 outside the answer
    ids, labels = batch["input_ids"][0].tolist(), batch["labels"][0].tolist()
    learned = [t for t, lab in zip(ids, labels) if lab != -100]
    assert tok.decode(learned) == "Did you fall?<|im_end|>\n"
    assert tok.decode(row["input_ids"]).count("<|im_start|>system") == 1


def test_sft_corpus_notes_a_missing_file_and_reads_real_sets_when_present(tmp_path):
    from medpref.data.adapters import shared_data_dir
    from medpref.training.config import RealDialogues
    from medpref.training.dialogue_sft import load_dialogues

    p = load_params().training.sft.model_copy(update={
        "dialogues": ["data/embedded/dialogues.jsonl", str(tmp_path / "absent.jsonl")]})
    dialogues, sources = load_dialogues(p)
    assert sources[0].dialogues == len(dialogues) > 0
    assert sources[1].dialogues == 0 and sources[1].note.startswith("absent")
    if shared_data_dir() is None:
        pytest.skip("../shared/data is absent")
    real = p.model_copy(update={"dialogues": [], "real": [
        RealDialogues(source="mts_dialog", split="train", limit=5)]})
    dialogues, sources = load_dialogues(real)
    assert len(dialogues) == 5 and sources[0].name == "mts_dialog:train"


# -- held-out implicit reward by cross-fitting ------------------------------------------------

def test_folds_are_dealt_evenly_and_seeded():
    from medpref.training.heldout import deal_folds

    folds = deal_folds(10, 3, seed=1)
    assert sorted(folds.count(f) for f in range(3)) == [3, 3, 4]
    assert folds == deal_folds(10, 3, seed=1) and folds != deal_folds(10, 3, seed=2)
    with pytest.raises(ValueError, match="2 <= folds <= pairs"):
        deal_folds(2, 3, seed=0)


def test_margin_is_beta_times_the_change_of_the_log_prob_gap():
    from medpref.training.heldout import margins, summarise

    # policy gap (−1) − (−3) = 2, reference gap (−2) − (−2) = 0 → 0.1 × 2
    assert margins([(-1.0, -3.0)], [(-2.0, -2.0)], beta=0.1) == [pytest.approx(0.2)]
    rows = [{"pair": i, "fold": i % 2, "chosen_source": "sampled" if i < 3 else "generated",
             "margin": m, "correct": int(m > 0)} for i, m in enumerate([0.5, 0.2, -0.1, 0.3])]
    s = summarise(rows, n_boot=200)
    assert s["heldout_pairs"] == 4 and s["heldout_acc"] == 0.75
    assert s["heldout_acc_sampled"] == pytest.approx(2 / 3, abs=1e-4)
    assert s["heldout_pairs_generated"] == 1
    assert s["heldout_acc_lo"] <= 0.75 <= s["heldout_acc_hi"]
    assert s["heldout_margin"] == pytest.approx(0.225)


@pytest.mark.slow
def test_crossfit_finds_a_learnable_preference_and_not_shuffled_labels(
        tiny_model_dir, sft_adapter, recipe, hardware, tmp_path):
    from medpref.training.heldout import crossfit, summarise

    # one answer preferred to another whatever the history: learnable from 8 pairs
    pairs = [p.model_copy(update={"chosen": GOOD[0], "rejected": BAD[0]}) for p in _pairs(12)]
    learnable = [pair_to_conversation(p, SYSTEM) for p in pairs]
    coin = random.Random(0)
    shuffled = [ex if coin.random() < 0.5 else
                {**ex, "chosen": ex["rejected"], "rejected": ex["chosen"]} for ex in learnable]
    sources = ["sampled" if i % 2 else "generated" for i in range(12)]
    results = {}
    lively = recipe.dpo.model_copy(update={"max_steps": 8})
    for label, examples in (("learnable", learnable), ("shuffled", shuffled)):
        rows = crossfit(tiny_model_dir, sft_adapter, examples, sources, tmp_path / label,
                        lively, hardware, folds=3, seed=0)
        assert sorted(r["pair"] for r in rows) == list(range(12))   # each pair scored once
        assert {r["fold"] for r in rows} == {0, 1, 2}
        assert not (tmp_path / label).exists()                    # fold policies removed
        results[label] = summarise(rows, n_boot=200)
    good, noise = results["learnable"], results["shuffled"]
    assert good["heldout_acc"] >= 0.75 and good["heldout_margin_lo"] > 0, good
    assert noise["heldout_acc"] < good["heldout_acc"], (good, noise)
    assert abs(noise["heldout_margin"]) < good["heldout_margin"], (good, noise)
