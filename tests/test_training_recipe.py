"""Recipes in trl's and peft's own names (issue 34 item 5): the trainer arguments built from
the committed params equal, field by field, those main built before the rename.

``fixtures/trainer_args_before_recipes.json`` holds ``SFTConfig``/``DPOConfig.to_dict()``
as main's code (commit 508e5f6) built them from the committed params on the cpu hardware,
made once by ``fixtures/trainer_args_before_recipes.py``; the LoRA settings beside them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medpref.finetune.hardware import load_hardware
from medpref.finetune.recipe import Recipe
from medpref.params import ParamsError, load_params, parse_params
from medpref.rem.build_rem import rem_sft_config
from medpref.training.dialogue_sft import sft_config
from medpref.training.dpo import dpo_config

BEFORE = json.loads((Path(__file__).parent / "fixtures" / "trainer_args_before_recipes.json")
                    .read_text(encoding="utf-8"))
#: fields whose value differs from main's and why it changes nothing the run does
REM_INERT = {"num_train_epochs": "the REM's run length is max_steps (rem_steps, from these "
                                 "epochs); trl ignores num_train_epochs when max_steps > 0"}


def _plain(args) -> dict:
    return json.loads(json.dumps(args.to_dict(), default=str))


def _differences(before: dict, after: dict) -> dict:
    keys = set(before) | set(after)
    return {k: (before.get(k, "<absent>"), after.get(k, "<absent>")) for k in sorted(keys)
            if before.get(k, "<absent>") != after.get(k, "<absent>")}


@pytest.fixture(scope="module")
def committed():
    return load_params(), load_hardware("cpu")


@pytest.mark.parametrize("name", ["tiny", "paper"])
def test_policy_trainer_arguments_are_mains(committed, name):
    params, cpu = committed
    recipe = params.training.recipes[name]
    assert _differences(BEFORE[f"sft/{name}"],
                        _plain(sft_config(recipe.sft, cpu, "OUT", 0, evaluate=True))) == {}
    assert _differences(BEFORE[f"dpo/{name}"],
                        _plain(dpo_config(recipe.dpo, cpu, "OUT", 0))) == {}
    for kind in ("sft", "dpo"):
        lora = getattr(recipe, kind).lora("llama")
        assert {"r": lora.r, "lora_alpha": lora.lora_alpha, "lora_dropout": lora.lora_dropout,
                "target_modules": list(lora.target_modules)} == BEFORE[f"lora/{name}"]
    assert recipe.history_max_turns == BEFORE[f"history_max_turns/{name}"]


def test_rem_trainer_arguments_are_mains(committed):
    params, cpu = committed
    train = params.rem.train
    after = _plain(rem_sft_config(train, cpu, "OUT", 0, BEFORE["rem_steps"]))
    assert _differences(BEFORE["sft/rem"], after) == {
        "num_train_epochs": (3.0, train.recipe.num_train_epochs)}  # REM_INERT
    assert after["max_steps"] == BEFORE["rem_steps"] > 0
    lora = train.recipe.lora("llama")
    assert {"r": lora.r, "lora_alpha": lora.lora_alpha, "lora_dropout": lora.lora_dropout,
            "target_modules": list(lora.target_modules)} == BEFORE["lora/rem"]


def test_the_pins_hold_what_was_committed():
    """The pinned "before" is main's: the values the committed runs trained with."""
    assert (BEFORE["sft/tiny"]["learning_rate"], BEFORE["sft/tiny"]["num_train_epochs"],
            BEFORE["dpo/tiny"]["beta"], BEFORE["dpo/tiny"]["loss_type"]) == (
        5e-4, 2, 0.1, ["sigmoid"])
    assert (BEFORE["sft/rem"]["warmup_steps"], BEFORE["sft/rem"]["learning_rate"],
            BEFORE["sft/paper"]["warmup_steps"]) == (2, 1e-3, 0.03)


def _raw():
    import yaml

    from medpref.params import repo_path

    return yaml.safe_load(repo_path("params.yaml").read_text(encoding="utf-8"))


@pytest.mark.parametrize(("where", "old", "new"), [
    (("training", "recipes", "tiny"), "sft_epochs", "sft.num_train_epochs"),
    (("training", "recipes", "tiny"), "lora_r", "sft.r and dpo.r"),
    (("training", "recipes", "tiny"), "warmup_ratio", "sft.warmup_steps and dpo.warmup_steps"),
    (("training", "recipes", "tiny", "sft"), "lora_r", "'r'"),
    (("training", "recipes", "tiny", "dpo"), "dpo_epochs", "dpo.num_train_epochs"),
    (("training", "dpo"), "beta", "training.recipes.<name>.dpo.beta"),
    (("training", "dpo"), "loss_type", "training.recipes.<name>.dpo.loss_type"),
    (("rem", "train"), "epochs", "rem.train.recipe.num_train_epochs"),
    (("rem", "train"), "lora_r", "rem.train.recipe.r"),
    (("rem", "train"), "warmup_steps", "rem.train.recipe.warmup_steps"),
])
def test_a_key_of_an_earlier_layout_is_an_unknown_key_naming_it(where, old, new):
    """No migration shims: a key that moved (to ``new``) is refused like a misspelling,
    by its dotted path."""
    raw = _raw()
    section = raw
    for part in where:
        section = section[part]
    section[old] = 1
    with pytest.raises(ParamsError, match=f"unknown key '{'.'.join([*where, old])}'"):
        parse_params(raw)


def test_beta_belongs_to_dpo_recipes_only():
    raw = _raw()
    raw["training"]["recipes"]["tiny"]["sft"]["beta"] = 0.1
    with pytest.raises(ParamsError, match="SFT recipe"):
        parse_params(raw)
    raw = _raw()
    del raw["training"]["recipes"]["tiny"]["dpo"]["beta"]
    with pytest.raises(ParamsError, match="DPO recipe"):
        parse_params(raw)
    raw = _raw()
    raw["rem"]["train"]["recipe"]["loss_type"] = "sigmoid"
    with pytest.raises(ParamsError, match="SFT recipe"):
        parse_params(raw)


def test_warmup_steps_is_a_share_below_one_and_a_count_from_one():
    base = load_params().rem.train.recipe.model_dump()
    assert Recipe.model_validate(base | {"warmup_steps": 0.03}).warmup_steps == 0.03
    assert Recipe.model_validate(base | {"warmup_steps": 5}).warmup_steps == 5
    with pytest.raises(ValueError, match="whole number of steps"):
        Recipe.model_validate(base | {"warmup_steps": 1.5})


@pytest.mark.parametrize(("old", "new"), [
    ("per_device_batch_size", "per_device_train_batch_size"),
    ("grad_accumulation", "gradient_accumulation_steps"),
    ("group_by_length", "train_sampling_strategy"),
    ("max_steps", "max_steps_cap")])
def test_an_old_hardware_key_is_refused_naming_it(tmp_path, old, new):
    import yaml

    from medpref.params import repo_path

    data = yaml.safe_load(repo_path("configs/hardware/cpu.yaml").read_text(encoding="utf-8"))
    data["rem"][old] = 1
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ValueError, match=f"'rem.{old}': Extra inputs") as err:
        load_hardware(str(path))      # trl's name for it is ``new``
    assert str(path) in str(err.value)
