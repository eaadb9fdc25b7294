"""The reproducibility contract of the repository itself: notebooks, dvc.yaml, params."""

from __future__ import annotations

import ast
import json
import re

import pytest
import yaml

from medpref import REPO_ROOT

NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("*.ipynb"))
DVC = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text())
# Interactive notebooks a person runs in JupyterLab, not pipeline stages: no dvc stage runs
# them (they still must be clean, thin and parameterised). grade_by_hand: a clinician
# grades SP checklist items of stage 06's transcripts (medpref.simulation.handgrading).
INTERACTIVE = {"grade_by_hand.ipynb"}


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_clean_thin_and_parameterised(nb_path):
    nb = json.loads(nb_path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code), \
        "committed with outputs"
    assert any("parameters" in c.get("metadata", {}).get("tags", []) for c in code), \
        "no papermill `parameters` cell"
    assert nb["metadata"]["kernelspec"]["name"] == "medpref"
    for cell in code:
        src = "".join(cell["source"])
        tree = ast.parse(src)
        defs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        assert not defs, f"logic belongs in src/: {[d.name for d in defs]}"


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.name)
def test_papermill_reads_every_parameter(nb_path):
    """papermill infers a parameters cell's names line by line; a comment it cannot
    parse (quotes, ``==``) drops that name and turns a dvc-passed ``-p`` into an
    "unknown parameter" warning."""
    from papermill.translators import PythonTranslator

    nb = json.loads(nb_path.read_text())
    cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    src = "".join(cell["source"])
    assigned = [t.id for n in ast.parse(src).body if isinstance(n, ast.Assign)
                for t in n.targets if isinstance(t, ast.Name)]
    assert [p.name for p in PythonTranslator.inspect({"source": src})] == assigned


def _stages():
    yield from DVC["stages"].items()


def test_every_notebook_is_a_stage_and_every_stage_notebook_exists():
    cmds = " ".join(str(s.get("cmd", "")) for _, s in _stages())
    for nb in NOTEBOOKS:
        if nb.name in INTERACTIVE:
            assert f"notebooks/{nb.name}" not in cmds, f"{nb.name} is interactive, not a stage"
            continue
        assert f"notebooks/{nb.name}" in cmds, f"{nb.name} is not run by any dvc stage"
    assert INTERACTIVE <= {nb.name for nb in NOTEBOOKS}, "an allow-listed notebook is gone"
    for ref in re.findall(r"notebooks/[\w.-]+\.ipynb", cmds):
        assert (REPO_ROOT / ref).exists(), ref


def _outs(stage) -> list[str]:
    stage = stage.get("do", stage)  # a foreach stage keeps its definition under `do`
    out = []
    for key in ("outs", "metrics", "plots"):
        for o in stage.get(key, []) or []:
            out.append(next(iter(o)) if isinstance(o, dict) else o)
    return out


def test_stage_deps_exist_or_are_produced_by_a_stage():
    produced = {o for _, s in _stages() for o in _outs(s)}
    for name, stage in _stages():
        if "matrix" in stage or "foreach" in stage:
            continue  # templated paths are checked by dvc itself
        for dep in stage.get("deps", []):
            if dep == "models/manifest.json":
                continue  # written by `make setup`
            ok = (REPO_ROOT / dep).exists() or any(
                dep == o or dep.startswith(o.rstrip("/") + "/")  # inside an output folder
                or o.startswith(dep.rstrip("/") + "/")  # a folder of other stages' outputs
                for o in produced)
            assert ok, f"stage {name}: dep {dep} neither exists nor is produced"


def test_stage_params_name_existing_keys():
    params = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    for name, stage in _stages():
        for key in stage.get("params", []):
            if isinstance(key, dict):
                continue
            node = params
            for part in key.split("."):
                assert isinstance(node, dict) and part in node, f"stage {name}: no param {key}"
                node = node[part]
