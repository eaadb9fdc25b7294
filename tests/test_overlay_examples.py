"""The worked overlays of docs/own-model-and-gpu.md, as real files under configs/overlays/.

``local-gpu`` keeps every role local and swaps the policy's base model and the hardware;
``served-vllm`` puts the chat roles on an OpenAI-compatible server. For each: the params
validate, ``dvc exp run -S`` (DVC's own override code, on a copy of params.yaml) accepts
every override and gives the same params, and ``medpref run --overlay NAME`` builds that
``dvc exp run`` command. The ``paper`` overlay goes through the same DVC check.
"""

from __future__ import annotations

import shutil

import pytest
import yaml

from medpref import REPO_ROOT, cli
from medpref.overlays import set_args, validate
from medpref.params import load_params, parse_params

EMBEDDED = "models/smollm2-135m-instruct"
CHAT_ROLES = ["annotator", "judge", "patient", "doctor", "planner", "ranker", "rethinker"]


def dump(params) -> dict:
    from medpref.params import SECTIONS

    return {name: getattr(params, name).model_dump(mode="json") for name in SECTIONS}


@pytest.mark.parametrize("name", ["local-gpu", "served-vllm", "paper"])
def test_dvc_exp_run_accepts_every_override_and_gives_the_validated_params(name, tmp_path):
    from dvc.utils.hydra import apply_overrides

    target = tmp_path / "params.yaml"
    shutil.copy(REPO_ROOT / "params.yaml", target)
    apply_overrides(target, set_args(name)[1::2])   # raises on a key params.yaml lacks
    applied = parse_params(yaml.safe_load(target.read_text(encoding="utf-8")), target)
    assert dump(applied) == dump(validate(name))
    assert dump(applied) != dump(load_params(REPO_ROOT / "params.yaml"))


def test_local_gpu_swaps_the_policy_and_the_hardware_and_keeps_every_other_role():
    default, params = load_params(REPO_ROOT / "params.yaml"), validate("local-gpu")
    roles = params.shared.llm.roles
    assert (roles["policy"].backend, roles["policy"].model) == ("hf", "models/policy-base")
    for role, cfg in roles.items():
        if role != "policy":
            assert cfg == default.shared.llm.roles[role], role
            assert (cfg.backend, cfg.model) == ("hf", EMBEDDED), role
    assert (params.training.hardware, params.rem.train.hardware) == ("gpu", "gpu")
    assert params.training.recipe == default.training.recipe
    assert (REPO_ROOT / "configs" / "hardware" / "gpu.yaml").is_file()


def test_served_vllm_serves_the_chat_roles_from_env_named_server_and_keeps_policy_and_rem():
    params = validate("served-vllm")
    roles, server = params.shared.llm.roles, params.shared.llm.servers["openai"]
    for role in CHAT_ROLES:
        assert (roles[role].backend, roles[role].server) == ("openai", "openai"), role
        assert roles[role].model == "Qwen/Qwen2.5-7B-Instruct", role
    assert roles["policy"].backend == roles["rem"].backend == "hf"
    # the URL and key come from variables the overlay names; never OpenAI's by accident
    assert (server.base_url_env, server.api_key_env) == ("VLLM_URL", "VLLM_KEY")
    assert "options" in params.simulation.grader.compare
    text = (REPO_ROOT / "configs" / "overlays" / "served-vllm.yaml").read_text()
    assert "sk-" not in text and "api_key:" not in text


@pytest.mark.parametrize("name", ["local-gpu", "served-vllm"])
def test_medpref_run_builds_the_dvc_exp_run_command(name, monkeypatch):
    calls = []
    monkeypatch.setattr(cli.subprocess, "call", lambda cmd, cwd=None: calls.append(cmd) or 0)
    assert cli.main(["run", "--overlay", name, "tables"]) == 0
    (cmd,) = calls
    assert cmd[1:5] == ["-m", "dvc", "exp", "run"]
    assert cmd[5:-1] == set_args(name) and cmd[-1] == "tables"
