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
    """A root with the repository's code, notebooks, params and inputs and a copy of its
    dvc.yaml."""
    for name in ("src", "notebooks", "params.yaml", "configs", "data"):
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
    kw.setdefault("params", ["shared.seed"])
    return DvcStage("toy", notebook="01_sampling", outputs=outputs, **kw)


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


def test_a_dep_its_params_name_is_derived_and_may_not_be_typed_again():
    """A prompt or input file a params value names is a dep without being declared, noted
    with the key (and its why); typing it again in the declaration is an error."""
    spec = yaml.safe_load(dvcgen.render(Pipeline("", [_toy(params=["sampling"])])))
    deps = spec["stages"]["toy"]["deps"]
    assert "configs/prompts/trajectory_doctor.yaml" in deps
    assert "data/embedded/dialogues.jsonl" in deps
    lines = dvcgen.render_stage(_toy(params=["sampling"], why={"sampling.calls": "its calls"}),
                                REPO_ROOT)
    assert ("      - configs/prompts/trajectory_doctor.yaml   # "
            "sampling.calls.doctor_turn.prompt: its calls") in lines
    with pytest.raises(ValueError, match="named by its params"):
        dvcgen.render(Pipeline("", [_toy(params=["sampling"],
                                         deps=["data/embedded/dialogues.jsonl"])]))


def test_roles_its_params_name_join_its_params_and_unread_keys_name_no_dep():
    spec = yaml.safe_load(dvcgen.render(Pipeline("", [_toy(params=["sampling"])])))
    params = spec["stages"]["toy"]["params"]
    assert {"shared.llm.roles.annotator", "shared.llm.roles.patient",
            "shared.llm.roles.doctor"} <= set(params)
    unread = _toy(params=["notechat"], unread=["notechat.lexicon"])
    deps = yaml.safe_load(dvcgen.render(Pipeline("", [unread])))["stages"]["toy"]["deps"]
    assert "data/embedded/lexicon" not in deps
    assert "data/embedded/lexicon" in yaml.safe_load(dvcgen.render(Pipeline(
        "", [_toy(params=["notechat"])])))["stages"]["toy"]["deps"]


def test_a_path_changed_in_params_yaml_changes_the_generated_deps(checkout):
    """The generator reads params.yaml: point a stage's key at another input file and its
    deps follow (the committed dvc.yaml then differs, which the first test catches)."""
    (checkout / "params.yaml").unlink()
    text = (REPO_ROOT / "params.yaml").read_text(encoding="utf-8")
    moved = text.replace("  data: data/embedded/qa_human_scores.jsonl",
                         "  data: data/embedded/notes.jsonl", 1)
    assert moved != text
    (checkout / "params.yaml").write_text(moved, encoding="utf-8")
    stage = next(s for s in PIPELINE.stages if s.name == "imapscore")
    deps = yaml.safe_load(dvcgen.render(Pipeline("", [stage]), checkout))["stages"][
        "imapscore"]["deps"]
    assert "data/embedded/notes.jsonl" in deps
    assert "data/embedded/qa_human_scores.jsonl" not in deps


def test_unknown_params_key_is_an_error():
    with pytest.raises(ValueError, match="params key 'nope.x' is not in params.yaml"):
        dvcgen.render(Pipeline("", [_toy(params=["nope.x"])]))


def test_a_plot_must_name_a_file_the_stage_writes():
    from medpref.dvcgen import Plot

    with pytest.raises(ValueError, match="plots name files it does not write"):
        dvcgen.render(Pipeline("", [_toy(plots=[Plot("nothing.csv", "x", "y", "t")])]))


def test_a_comment_keeps_a_command_line_as_written():
    lines = dvcgen.comment("Rerun one:\n  dvc repro a@b\nThen commit.", 2)
    assert lines == ["  # Rerun one:", "  #   dvc repro a@b", "  # Then commit."]
    assert all(len(x) <= dvcgen.WIDTH for x in dvcgen.comment("word " * 60, 4))


def _untemplated(path: str) -> str:
    """A path up to its first ``${...}`` (a foreach/matrix stage's outputs and deps)."""
    return path.split("${", 1)[0]


def test_the_declarations_are_in_a_dependency_order():
    """A stage is declared after every stage whose outputs it reads (a dep equal to, inside
    or holding another stage's output), so medpref.pipeline.STAGES, which takes this
    order, rebuilds a stage's tables after the tables it reads."""
    from medpref.pipeline import STAGES as OUTPUTS

    spec = yaml.safe_load(dvcgen.render(PIPELINE))["stages"]
    names = list(spec)
    outs = {n: [_untemplated(next(iter(o)) if isinstance(o, dict) else o)
                for o in spec[n].get("do", spec[n]).get("outs", [])] for n in names}
    late = []
    for i, name in enumerate(names):
        for dep in spec[name].get("do", spec[name]).get("deps", []):
            d = _untemplated(next(iter(dep)) if isinstance(dep, dict) else dep)
            for j, other in enumerate(names):
                if other != name and j > i and any(
                        d == o or d.startswith(o.rstrip("/") + "/")
                        or o.startswith(d.rstrip("/") + "/") for o in outs[other] if o):
                    late.append(f"{name} reads {d}, written by {other} (declared after it)")
    assert not late, late
    assert list(OUTPUTS) == [s.outputs.stage for s in PIPELINE.stages if s.outputs]
    assert list(OUTPUTS)[-1] == "09_tables"
