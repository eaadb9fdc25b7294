"""The shared stage opening/closing: names, folders, the yield/failure guard, outputs."""

from __future__ import annotations

import json
import re

import pytest
from pydantic import ValidationError

from medpref import REPO_ROOT
from medpref.llm.ledger import Ledger, Price
from medpref.llm.types import CallSpec, Completion
from medpref.params import load_params
from medpref.stagekit import GuardParams, Stage, StageFailed, stage_key

CALL = CallSpec("annotator", "", 256)  # the client's default budget, no prefix


class _Session:
    def __init__(self):
        self.ledger = Ledger("01_sampling")
        self.closed = False

    def write_ledger(self, path):
        return self.ledger.write(path)

    def role_models(self):
        return {}

    def model_contents(self):
        return {}

    def close(self):
        self.closed = True


def _stage(tmp_path, monkeypatch) -> Stage:
    stage = Stage(name="01_sampling", params=load_params())
    monkeypatch.setattr(Stage, "reports_dir", property(lambda self: tmp_path / self.name))
    stage._llm = _Session()
    return stage


def test_stage_key_strips_the_number():
    assert stage_key("01_sampling") == "sampling"
    assert stage_key("07_imapscore") == "imapscore"
    assert stage_key("notechat_index") == "notechat_index"


def test_guard_fails_on_low_yield_naming_the_stage(tmp_path, monkeypatch):
    stage = _stage(tmp_path, monkeypatch)
    stage.check_yield(12, 24)  # exactly the default min_yield passes
    with pytest.raises(StageFailed, match=r"stage sampling failed: 0 of 24 items produced"):
        stage.check_yield(0, 24)


def test_guard_fails_on_failure_rate_with_role_and_first_error(tmp_path, monkeypatch):
    stage = _stage(tmp_path, monkeypatch)
    for i in range(4):
        err = None if i == 0 else f"HTTP 503 number {i}"
        stage._llm.ledger.record_call("annotator", Completion(text="x", error=err), Price())
    with pytest.raises(StageFailed) as exc:
        stage.check_yield(24, 24)
    msg = str(exc.value)
    assert "role 'annotator' failed 3 of 4 calls" in msg
    assert "first error: HTTP 503 number 1" in msg
    assert "\n" not in msg


def test_guard_params_are_strict():
    with pytest.raises(ValidationError, match="min_yeild"):
        GuardParams(min_yeild=0.1)
    with pytest.raises(ValidationError, match="less than or equal to 1"):
        GuardParams(min_yield=1.5)


def test_finish_writes_scores_timings_ledger_and_provenance_apart(tmp_path, monkeypatch):
    stage = _stage(tmp_path, monkeypatch)
    with stage.step("work"):
        pass
    stage.note_provenance(models={"annotator": "hf:x"})
    out = stage.finish({"items": 3})
    folder = tmp_path / "01_sampling"
    assert json.loads((folder / "metrics.json").read_text()) == {"items": 3}
    timings = json.loads((folder / "timings.json").read_text())
    assert "work" in timings["steps_s"] and "wall_s" in timings
    prov = json.loads((folder / "provenance.json").read_text())
    assert prov["stage"] == "sampling" and prov["models"] == {"annotator": "hf:x"}
    assert (folder / "ledger.json").exists()
    assert stage._llm.closed and out["metrics"] == {"items": 3}


def test_provenance_names_the_roles_that_called_and_the_prompts_loaded(tmp_path, monkeypatch):
    from medpref.prompts import load_prompt
    from scripted_stage import scripted_stage

    stage = scripted_stage("01_sampling", tmp_path, monkeypatch, lambda r: "an answer")
    load_prompt("trajectory_doctor")
    stage.role("annotator").chat([{"role": "user", "content": "hello"}], CALL)
    stage.role("annotator", batch_size=4).chat([{"role": "user", "content": "again"}], CALL)
    stage.role("judge")   # made but never called: not the provenance's business
    stage.note_provenance(models={"embedding": "minilm"}, prompts={"extra": "abc"})
    stage.finish({"items": 1})
    folder = tmp_path / "reports" / "01_sampling"
    prov = json.loads((folder / "provenance.json").read_text())
    ledger = json.loads((folder / "ledger.json").read_text())
    assert set(prov["roles"]) == set(ledger["roles"]) == {"annotator"}
    assert prov["roles"]["annotator"] == stage.role("annotator").model_id
    assert prov["models"] == {"embedding": "minilm"}
    assert prov["prompts"]["extra"] == "abc"
    assert prov["prompts"]["trajectory_doctor"] == load_prompt("trajectory_doctor").sha


def test_finish_takes_no_models_or_prompts_from_its_caller(tmp_path, monkeypatch):
    """The run notes them (Stage.note_provenance); a notebook passes none."""
    stage = _stage(tmp_path, monkeypatch)
    with pytest.raises(TypeError, match="models"):
        stage.finish({"items": 1}, models={"x": "y"})   # the old call, refused
    notebooks = sorted((REPO_ROOT / "notebooks" / "py").glob("*.py"))
    passing = [nb.name for nb in notebooks
               if re.search(r"\.finish\([^)]*\b(models|prompts)=", nb.read_text())]
    assert notebooks and not passing


def test_a_ledger_role_without_a_client_of_the_session_is_an_error():
    from medpref.llm.session import LLMSession

    session = LLMSession("01_sampling", load_params().shared, cache=None)
    session.ledger.record_call("ghost", Completion(text="x"), Price())
    with pytest.raises(RuntimeError, match="role 'ghost'.*no client"):
        session.role_models()


def test_a_run_rewriting_reports_and_dvc_lock_leaves_the_commit_clean(tmp_path):
    import subprocess

    from medpref.provenance import git_commit

    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@x", "PATH": __import__("os").environ["PATH"]}
    (tmp_path / "reports").mkdir()
    for rel in ("reports/table.csv", "dvc.lock", "code.py"):
        (tmp_path / rel).write_text("v1\n")
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "x"]):
        subprocess.run(cmd, cwd=tmp_path, env=env, check=True)
    clean = git_commit(tmp_path)
    assert len(clean) == 40 and "+dirty" not in clean
    (tmp_path / "reports" / "table.csv").write_text("v2\n")
    (tmp_path / "dvc.lock").write_text("v2\n")
    assert git_commit(tmp_path) == clean
    (tmp_path / "code.py").write_text("v2\n")
    assert git_commit(tmp_path) == clean + "+dirty"


def test_a_role_refuses_a_setting_that_is_not_a_role_setting():
    """A call's budget given to a role would be dropped without a word (roles have none)."""
    from medpref.llm.errors import BackendConfigError
    from medpref.llm.session import LLMSession

    session = LLMSession("04_annotation", load_params().shared, cache=None)
    with pytest.raises(BackendConfigError, match=r"\['max_new_tokens'\] are not role settings"):
        session.role("judge", max_new_tokens=24)


def test_one_opener_for_stages_grid_cells_and_training_parts():
    from medpref.annotation.grid import GridStage
    from medpref.stagekit import PIECES, open_stage
    from medpref.training.stage import RunStage

    cell = open_stage("04_annotation_grid", weighting="dep", trajectory=2)
    assert isinstance(cell, GridStage) and cell.name == "04_annotation_grid_dep_2"
    part = open_stage("05_training", part="dpo", run="cai_dep")
    assert isinstance(part, RunStage) and part.reports_dir.parts[-3:] == (
        "05_training", "dpo", "cai_dep")
    assert type(open_stage("01_sampling")) is Stage
    # a stage opened whole takes no keywords; a piece's keywords are checked by name
    with pytest.raises(TypeError, match="stage 01_sampling is opened whole: it takes no "
                                        r"\['part'\]"):
        open_stage("01_sampling", part="sft")
    with pytest.raises(TypeError, match=r"stage 04_annotation_grid: .*'trajectory'.*"
                                        r"\['weighting', 'trajectory'\]"):
        open_stage("04_annotation_grid", weighting="dep")
    with pytest.raises(TypeError, match=r"stage 05_training: .*'step'"):
        open_stage("05_training", part="sft", step=3)
    from medpref.simulation import grading_stage, heldout_stage, nextturn_stage  # noqa: F401
    from medpref.simulation.common import SectionStage

    for name in ("06_next_turn", "06_heldout", "06_sp_grading"):   # stage 06's later three
        opened = open_stage(name)
        assert isinstance(opened, SectionStage) and opened.key == "simulation"
        assert opened.reports_dir.parts[-2:] == ("reports", name)
    assert set(PIECES) == {"04_annotation_grid", "04_annotation_grid_table", "05_training",
                           "06_next_turn", "06_heldout", "06_sp_grading"}


def test_every_notebook_opens_its_stage_with_open_stage():
    """No notebook builds a Stage or calls a piece's function itself: one opener."""
    import ast

    from medpref import REPO_ROOT
    from medpref.annotation import grid  # noqa: F401  (registers its piece openers)
    from medpref.stagekit import PIECES
    from medpref.training import stage  # noqa: F401  (registers its piece opener)

    pieces = {opener.__name__ for opener in PIECES.values()}
    notebooks = sorted((REPO_ROOT / "notebooks" / "py").glob("0*.py"))
    assert len(notebooks) >= 11
    for path in notebooks:
        calls = [node.func for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                 if isinstance(node, ast.Call)]
        names = {f.id if isinstance(f, ast.Name) else getattr(f, "attr", "") for f in calls}
        assert "open_stage" in names, path.name
        assert not names & (pieces | {"Stage", "GridStage", "RunStage"}), path.name
