"""dvc.yaml is generated (``medpref dvc-yaml``) from each stage's one declaration
(src/medpref/dvcstages.py), its outputs list and the import closure of its code: the file
in the repository must be the generator's output, line for line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from medpref import REPO_ROOT, dvcgen
from medpref.dvcgen import Dep, DvcStage, Pipeline
from medpref.dvcstages import PIPELINE
from medpref.importwalk import stage_code
from medpref.outputs import Data, Records, StageOutputs, Table


def test_dvc_yaml_is_the_generators_output():
    diff = dvcgen.differences(PIPELINE)
    assert not diff, ("dvc.yaml differs from its declaration (src/medpref/dvcstages.py); "
                      "run `make dvc-yaml` and commit it:\n" + "".join(diff[:80]))


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A root with the repository's code and notebooks and a copy of its dvc.yaml."""
    for name in ("src", "notebooks"):
        (tmp_path / name).symlink_to(REPO_ROOT / name)
    (tmp_path / "dvc.yaml").write_text(dvcgen.render(PIPELINE), encoding="utf-8")
    return tmp_path


def test_the_check_prints_the_difference_and_the_write_removes_it(checkout, capsys):
    from medpref.cli import main

    text = (checkout / "dvc.yaml").read_text(encoding="utf-8")
    edited = text.replace("      - src/medpref/medqa\n", "", 1)
    assert edited != text
    (checkout / "dvc.yaml").write_text(edited, encoding="utf-8")
    assert main(["--root", str(checkout), "dvc-yaml", "--check"]) == 1
    out = capsys.readouterr().out
    assert "+      - src/medpref/medqa\n" in out and out.startswith("--- dvc.yaml")
    assert main(["--root", str(checkout), "dvc-yaml"]) == 0
    assert (checkout / "dvc.yaml").read_text(encoding="utf-8") == text
    assert main(["--root", str(checkout), "dvc-yaml", "--check"]) == 0


def _declared_deps(stage: dict) -> list[Path]:
    return [REPO_ROOT / (next(iter(d)) if isinstance(d, dict) else d) for d in stage["deps"]]


@pytest.mark.parametrize("stage", PIPELINE.stages, ids=lambda s: s.name)
def test_generated_code_deps_cover_what_the_stage_runs(stage):
    """Every file of the import closure of the stage's cmd is a dep or under a dep folder
    (the folders the generator lists hold only closure files: see the next test)."""
    spec = yaml.safe_load(dvcgen.render(Pipeline("", [stage])))["stages"][stage.name]
    body = spec.get("do", spec)
    deps = _declared_deps(body)
    missing = [p for p in stage_code(body["cmd"])
               if not any(p == d or d in p.parents for d in deps)]
    assert not missing


def test_a_folder_is_listed_only_when_all_its_modules_are_imported(tmp_path):
    pkg = tmp_path / "src/medpref"
    for rel in ("__init__.py", "a/__init__.py", "a/x.py", "a/y.py", "b/__init__.py", "b/z.py"):
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text("")
    files = {f"src/medpref/{r}" for r in ("__init__.py", "a/__init__.py", "a/x.py", "a/y.py",
                                          "b/__init__.py")}
    assert dvcgen._folders(files, tmp_path) == [
        "src/medpref/__init__.py", "src/medpref/a", "src/medpref/b/__init__.py"]


def test_a_by_name_package_brings_every_module_and_its_imports():
    stage = next(s for s in PIPELINE.stages if s.name == "annotation")
    deps = dvcgen.code_deps(stage, REPO_ROOT)
    assert "src/medpref/annotation" in deps
    assert "src/medpref/echo.py" in deps   # imported by annotation/control.py only


def _toy(**kw) -> DvcStage:
    outputs = StageOutputs("99_toy", (Records("items"), Table("counts", lambda r, p: None),
                                      Data("data/99_toy/out.jsonl", persist=True)))
    return DvcStage("toy", notebook="01_sampling", outputs=outputs, params=["toy"], **kw)


def test_outputs_come_from_the_list_with_their_flags():
    outs = dict(_toy(llm=True).outs())
    assert outs == {
        "data/99_toy/out.jsonl": {"persist": True},
        "data/cache/llm/01_sampling.sqlite": {"persist": True},
        "reports/notebooks/01_sampling.ipynb": {},
        **{f"reports/99_toy/{f}": {"cache": False} for f in (
            "records/items.jsonl", "counts.csv", "counts.md", "provenance.json",
            "ledger.json", "timings.json", "metrics.json")}}
    assert "reports/99_toy/ledger.json" not in dict(_toy().outs())


def test_a_dep_declared_twice_or_also_imported_is_an_error():
    with pytest.raises(ValueError, match="declared twice"):
        dvcgen.render(Pipeline("", [_toy(deps=["src/medpref/sampling"])]))
    with pytest.raises(ValueError, match="declared twice"):
        dvcgen.render(Pipeline("", [_toy(deps=["a.yaml", Dep("a.yaml", "why")])]))
    with pytest.raises(ValueError, match="stages declared twice"):
        dvcgen.render(Pipeline("", [_toy(), _toy()]))


def test_a_plot_must_name_a_file_the_stage_writes():
    from medpref.dvcgen import Plot

    with pytest.raises(ValueError, match="plots name files it does not write"):
        dvcgen.render(Pipeline("", [_toy(plots=[Plot("nothing.csv", "x", "y", "t")])]))


def test_a_comment_keeps_a_command_line_as_written():
    lines = dvcgen.comment("Rerun one:\n  dvc repro a@b\nThen commit.", 2)
    assert lines == ["  # Rerun one:", "  #   dvc repro a@b", "  # Then commit."]
    assert all(len(x) <= dvcgen.WIDTH for x in dvcgen.comment("word " * 60, 4))
