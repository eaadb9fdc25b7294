"""Stage hand-offs (``medpref.handoffs``): the file stage 05 writes is the file stage 06
reads, and stage 06 reads the trained policies from it, not from stage 05's params."""

from __future__ import annotations

import json

import pytest

from medpref import REPO_ROOT
from medpref.contracts import ContractError
from medpref.handoffs import POLICY_ADAPTERS, POLICY_ROLES
from medpref.params import load_params
from medpref.simulation.doctors import trained_doctors


def test_the_policy_roles_hand_off_is_the_file_stage_05_writes_and_stage_06_depends_on():
    import yaml

    from medpref.training.outputs import SUMMARY_OUTPUTS

    written = next(r for r in SUMMARY_OUTPUTS.records if r.name == "policy_roles")
    assert written.path(SUMMARY_OUTPUTS.reports_dir(REPO_ROOT)) == REPO_ROOT / POLICY_ROLES
    dvc = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text())["stages"]
    deps = [d for d in dvc["simulation"]["deps"] if isinstance(d, str)]
    assert POLICY_ROLES in deps and all(a in deps for a in POLICY_ADAPTERS)
    outs = [next(iter(o)) if isinstance(o, dict) else o for o in dvc["training"]["outs"]]
    assert POLICY_ROLES in outs


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_stage_06_reads_the_policies_in_the_file_order_and_refuses_a_foreign_model(tmp_path):
    params = load_params()
    model = params.shared.llm.roles[params.training.base_role].model
    path = tmp_path / "policy_roles.jsonl"
    assert trained_doctors(params, path) == []            # stage 05 has not run
    _write(path, [{"run": "sft", "backend": "hf", "model": model, "adapter": "a/sft"},
                  {"run": "cai_dep", "backend": "hf", "model": model, "adapter": "a/dep"}])
    doctors = trained_doctors(params, path)
    assert [(d.name, d.role, d.adapter) for d in doctors] == [
        ("sft", params.training.base_role, "a/sft"),
        ("cai_dep", params.training.base_role, "a/dep")]
    _write(path, [{"run": "sft", "backend": "hf", "model": "other/model", "adapter": "a"}])
    with pytest.raises(ContractError, match=r"policy_roles.jsonl:1: field 'model'"):
        trained_doctors(params, path)
    _write(path, [{"run": "sft", "backend": "hf", "model": model}])
    with pytest.raises(ContractError, match=r":1: field 'adapter': missing"):
        trained_doctors(params, path)


def test_the_committed_hand_off_names_every_trained_policy_sft_first():
    doctors = trained_doctors(load_params())
    assert doctors[0].name == "sft" and {"cai_avg", "cai_dep"} <= {d.name for d in doctors}
    assert all(d.adapter.startswith(tuple(f"{a}/" for a in POLICY_ADAPTERS)) for d in doctors)
