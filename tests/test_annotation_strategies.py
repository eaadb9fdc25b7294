"""One list, ``annotation.strategies``, drives stage 04, the DPO runs and the paper rows.

A strategy registered here (a module-level function, no model call) and added to the list
by a params overlay is planned and run by stage 04 (its pairs file written), is a DPO run
on that file, becomes an SP-test doctor once trained, and is a row of the follow-up's
yield table. An unknown name fails with the param and the known names. dvc.yaml, expanded
by DVC from params.yaml, still declares today's outputs and DPO stages for the default list.
"""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from medpref import REPO_ROOT
from medpref.annotation.pairs import decision_for, pair_from_winner
from medpref.annotation.stage import strategy_plan
from medpref.annotation.strategies import StrategyResult, register_strategy
from medpref.params import ParamsError, parse_params
from test_stage_runs import _stage04, raw_params, scripted_models  # noqa: F401  (fixtures)

FAKE = "always_sampled"
PAPERS = ["gpt4_rank", "cai_avg", "cai_dep", "agent"]   # the papers' four, in today's order
DEFAULT = [*PAPERS, "control_process"]   # today's list: + the DPO control (issue 32)
GRID = [f"grid_{w}_{n}" for w in ("avg", "dep") for n in (1, 2, 3)]


@register_strategy(FAKE)
def always_sampled(inputs) -> list[StrategyResult]:
    """Prefers the sampled candidate of every item (a test strategy: no model call)."""
    decisions, pairs = [], []
    for item in inputs.items:
        sampled = next(i for i, c in enumerate(item.candidates) if c.source == "sampled")
        decision = decision_for(item, FAKE, str(sampled + 1), 1.0)
        decisions.append(decision)
        pairs.append(pair_from_winner(item, decision))
    return [StrategyResult(FAKE, decisions, pairs)]


@pytest.fixture
def with_fake(raw_params):  # noqa: F811
    raw = copy.deepcopy(raw_params)
    raw["annotation"]["strategies"] = [*raw["annotation"]["strategies"], FAKE]
    return raw


def test_the_default_list_is_the_papers_four_in_their_order_then_the_control():
    raw = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    assert raw["annotation"]["strategies"] == DEFAULT
    assert [name for name, _ in strategy_plan(DEFAULT)] == DEFAULT


def test_a_new_strategy_is_one_function_and_one_list_entry(with_fake, tmp_path, monkeypatch,
                                                           scripted_models):  # noqa: F811
    from medpref.annotation import stage as annotation_stage
    from medpref.finetune.policies import dpo_runs, heldout_runs, trained_policies
    from medpref.finetune.runs import RUN_CARD
    from medpref.papertables.build import build_table
    from medpref.papertables.spec import load_registry

    stage = _stage04(with_fake, tmp_path, monkeypatch)
    # stage 04: planned after the papers' four (their model calls keep their order) ...
    assert [name for name, _ in strategy_plan(stage.p.strategies)] == [*DEFAULT, FAKE]
    out = annotation_stage.run(stage)
    assert list(out.results) == [*DEFAULT, FAKE]
    assert [p.chosen_source for p in out.results[FAKE].pairs] == ["sampled"] * 5
    written = tmp_path / "data/04_annotation/pairs"
    assert sorted(p.name for p in written.iterdir()) == sorted(f"{s}.jsonl" for s in
                                                               [*DEFAULT, FAKE])
    # ... stage 05: its DPO run reads that file, after the strategies and before the grid
    params = parse_params(with_fake)
    runs = dpo_runs(params)
    assert list(runs) == [*DEFAULT, FAKE, *GRID]
    assert runs[FAKE] == f"data/04_annotation/pairs/{FAKE}.jsonl"
    assert FAKE in heldout_runs(params)
    # ... stage 06: trained, it is a doctor of the SP test (the rows of follow-up Table 3)
    params.training.dpo.output_dir = str(tmp_path / "dpo")
    (tmp_path / "dpo" / FAKE).mkdir(parents=True)
    (tmp_path / "dpo" / FAKE / RUN_CARD).write_text(json.dumps({"status": "trained"}))
    assert [p.run for p in trained_policies(params, include_sft=False)] == [FAKE]
    # ... stage 09: a row of the follow-up's yield table, read from stage 04's summary
    spec = next(a for a in load_registry(REPO_ROOT / "configs/paper_tables.yaml").artefacts
                if a.id == "followup_pairs")
    rows = list(build_table(spec, tmp_path).table.query("source == 'ours'")["row"])
    assert [r for r in rows if r in (*PAPERS, FAKE)] == [*PAPERS, FAKE]
    assert "control_process" not in rows       # a control: no row of a paper table


def test_an_unknown_strategy_names_the_param_and_the_known_ones(raw_params, tmp_path,  # noqa: F811
                                                                  monkeypatch, scripted_models):  # noqa: F811
    from medpref.annotation import stage as annotation_stage

    raw_params["annotation"]["strategies"] = ["gpt4_rank", "no_such_strategy"]
    stage = _stage04(raw_params, tmp_path, monkeypatch)
    with pytest.raises(ValueError, match=r"annotation.strategies: no annotation strategy "
                                         r"'no_such_strategy' \(known: .*cai_dep.*\)"):
        annotation_stage.run(stage)
    assert not scripted_models, "a model was loaded before the plan was checked"


@pytest.mark.parametrize("names, message", [
    (["cai_dep", "cai_dep"], "listed twice"),
    (["Cai-Dep"], "must match"),
])
def test_strategy_names_are_checked_with_the_params(raw_params, names, message):  # noqa: F811
    raw_params["annotation"]["strategies"] = names
    with pytest.raises(ParamsError, match=rf"annotation.strategies.*{message}"):
        parse_params(raw_params)


def test_a_run_named_in_both_lists_is_refused(raw_params):  # noqa: F811
    from medpref.finetune.policies import dpo_runs

    raw_params["training"]["dpo"]["runs"]["cai_dep"] = "x.jsonl"
    with pytest.raises(ValueError, match=r"training.dpo.runs: \['cai_dep'\] already"):
        dpo_runs(parse_params(raw_params))


# -- dvc.yaml, as DVC expands it ---------------------------------------------------------------

TODAY_ANNOTATION_OUTS = [
    *(f"data/04_annotation/pairs/{s}.jsonl" for s in DEFAULT),
    "data/04_annotation/decisions.jsonl", "data/04_annotation/raw_answers.jsonl",
    "data/04_annotation/state_scores.jsonl", "data/cache/llm/04_annotation.sqlite",
    "reports/notebooks/04_annotation.ipynb",
    *(f"reports/04_annotation/records/{name}.jsonl"
      for name in ("strategies", "decisions", "pairs", "state_scores", "answers")),
    "reports/04_annotation/unparsable.jsonl",
    *(f"reports/04_annotation/{stem}.{ext}" for stem in ("summary", "source_preferences",
                                                          "margins", "threshold_sweep")
      for ext in ("csv", "md", "png") if (stem, ext) not in {("summary", "png"),
                                                             ("threshold_sweep", "png")}),
    *(f"reports/04_annotation/{name}.json" for name in ("provenance", "ledger", "timings",
                                                          "metrics"))]
TODAY_PAIRS = {**{s: f"data/04_annotation/pairs/{s}.jsonl" for s in DEFAULT},
               **{g: f"data/04_annotation/grid/{g[5:]}/pairs.jsonl" for g in GRID}}


def dpo_outs(run: str) -> list[str]:
    return [f"data/05_training/dpo/{run}", f"reports/notebooks/05_training/dpo_{run}.ipynb",
            *(f"reports/05_training/dpo/{run}/{f}" for f in (
                "log_history.json", "heldout.csv", "provenance.json", "timings.json",
                "metrics.json", "log_history.csv"))]


@pytest.fixture(scope="module")
def dvc_stages() -> dict:
    """Every stage of dvc.yaml as DVC resolves it: name → (outs, deps)."""
    from dvc.repo import Repo

    with Repo(str(REPO_ROOT)) as repo:
        return {s.addressing: ([o.def_path for o in s.outs], [d.def_path for d in s.deps])
                for s in repo.index.stages}


def test_dvc_expands_todays_annotation_outs_from_the_default_list(dvc_stages):
    strategies = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())["annotation"][
        "strategies"]
    outs, _ = dvc_stages["annotation"]
    folder = "data/04_annotation/pairs"
    expanded = [f for o in outs for f in ([f"{folder}/{s}.jsonl" for s in strategies]
                                          if o == folder else [o])]
    assert expanded == TODAY_ANNOTATION_OUTS


def test_dvc_expands_todays_dpo_runs_from_the_default_list(dvc_stages):
    dpo = {name.split("@")[1]: name for name in dvc_stages
           if name.startswith(("training_dpo@", "training_dpo_grid@"))}
    assert list(dpo) == [*DEFAULT, *GRID]
    assert all(dpo[s] == f"training_dpo@{s}" for s in DEFAULT)   # the names dvc.lock knows
    code = {}
    for run, name in dpo.items():
        outs, deps = dvc_stages[name]
        assert outs == dpo_outs(run)
        assert TODAY_PAIRS[run] in deps
        code[name.split("@")[0]] = [d for d in deps if d != TODAY_PAIRS[run]]
    # the strategies' runs and the grid's are one recipe: the same code and model deps
    assert code["training_dpo"] == code["training_dpo_grid"]
