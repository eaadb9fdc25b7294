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


def test_a_grid_cell_says_which_it_is_beside_its_pairs(tmp_path):
    from medpref.handoffs import GRID_CELL, grid_cell_of

    pairs = tmp_path / "cell" / "pairs.jsonl"
    pairs.parent.mkdir()
    pairs.write_text("")
    assert grid_cell_of(pairs) is None                    # no cell wrote these pairs
    (pairs.parent / GRID_CELL).write_text('{"trajectory": 2, "weighting": "dep"}\n')
    assert grid_cell_of(pairs) == {"weighting": "dep", "trajectory": 2}
    (pairs.parent / GRID_CELL).write_text('{"weighting": "dep"}\n')
    with pytest.raises(ValueError, match=r"cell\.json: a grid cell is"):
        grid_cell_of(pairs)


def test_stage_05_records_the_cell_of_the_pairs_a_run_trained_on_whatever_its_name(tmp_path):
    """Table 3 places a policy by the cell stage 05 recorded for it: a run of any name on a
    cell's pairs is that cell's, and a run on other pairs is in no cell."""
    import copy

    from medpref.finetune.policies import TrainedPolicy, policy_cell
    from medpref.handoffs import GRID_CELL
    from medpref.params import parse_params

    cell_dir, plain = tmp_path / "grid" / "dep_2", tmp_path / "plain"
    for folder in (cell_dir, plain):
        folder.mkdir(parents=True)
        (folder / "pairs.jsonl").write_text("")
    (cell_dir / GRID_CELL).write_text('{"trajectory": 2, "weighting": "dep"}\n')
    raw = copy.deepcopy(load_params().raw)
    raw["training"]["dpo"]["runs"] = {"my_run": str(cell_dir / "pairs.jsonl"),
                                      "other": str(plain / "pairs.jsonl")}
    params = parse_params(raw)
    assert policy_cell(params, TrainedPolicy("my_run", "policy_my_run", "a")) == {
        "cell": {"weighting": "dep", "trajectory": 2}}
    assert policy_cell(params, TrainedPolicy("other", "policy_other", "a")) == {}
    assert policy_cell(params, TrainedPolicy("sft", "policy_sft", "a")) == {}


def test_stage_06_reads_a_policys_cell_and_refuses_a_bad_one(tmp_path):
    params = load_params()
    model = params.shared.llm.roles[params.training.base_role].model
    path = tmp_path / "policy_roles.jsonl"
    _write(path, [{"run": "sft", "backend": "hf", "model": model, "adapter": "a/sft"},
                  {"run": "x", "backend": "hf", "model": model, "adapter": "a/x",
                   "cell": {"weighting": "avg", "trajectory": 3}}])
    sft, x = trained_doctors(params, path)
    assert sft.cell is None and (x.cell.weighting, x.cell.trajectory) == ("avg", 3)
    _write(path, [{"run": "x", "backend": "hf", "model": model, "adapter": "a/x",
                   "cell": {"weighting": "avg", "trajectory": 0}}])
    with pytest.raises(ContractError, match=r"policy_roles.jsonl:1: field 'cell'"):
        trained_doctors(params, path)


def test_the_committed_grid_policies_carry_their_cells():
    """Every trained run of training.dpo.runs (the grid cells) has its cell in stage 05's
    hand-off, and Table 3 shows each recorded cell."""
    import pandas as pd

    params = load_params()
    cells = {d.name: (d.cell.weighting, d.cell.trajectory)
             for d in trained_doctors(params) if d.cell}
    grid_runs = {d.name for d in trained_doctors(params)} & set(params.training.dpo.runs)
    assert grid_runs and set(cells) == grid_runs
    table = pd.read_csv(REPO_ROOT / "reports" / "06_sp_grading" / "table3_grid.csv")
    assert {(w, int(k)) for w, k in cells.values()} <= {
        (w, int(c.removeprefix("k="))) for w in table["weighting"] for c in table.columns
        if c.startswith("k=")}
