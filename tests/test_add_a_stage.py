"""Adding a stage, as docs/extending.md describes it, in a temporary copy of the repository:
its notebook, its package (whose section model names its params section), its params
section and its declaration in ``medpref.dvcstages``. Then
``medpref dvc-yaml`` writes its dvc stage, with the deps its params name and its outputs,
``dvc repro`` runs it through papermill, ``dvc status`` finds it up to date, and
``medpref tables --check`` rebuilds its table from its records. No other file is edited:
the test fails when a new stage needs one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from medpref import REPO_ROOT

#: what the copy needs to generate dvc.yaml and run a stage (the other stages' notebooks
#: are read for their import closures)
COPIED = ("src/medpref", "notebooks", "configs", "data/embedded", "params.yaml",
          ".dvcignore", "pyproject.toml")

CONFIG = '''"""The toy stage's params section."""

from typing import ClassVar

from medpref.params import StrictModel


class ToyParams(StrictModel):
    SECTION: ClassVar[str] = "toy"

    notes: str = "data/embedded/notes.jsonl"
    top: int = 3
'''

OUTPUTS = '''"""The toy stage's outputs: one record per note, a table of the longest."""

import pandas as pd

from medpref.outputs import Records, StageOutputs, Table


def longest(records, params) -> pd.DataFrame:
    rows = sorted(records["notes"], key=lambda r: (-r["words"], r["id"]))
    return pd.DataFrame(rows[: params.toy.top])


OUTPUTS = StageOutputs("99_toy", (Records("notes"), Table("longest", longest)))
'''

STAGE = '''"""The toy stage: count the words of each note."""

import json

from medpref.params import repo_path
from medpref.toy.outputs import OUTPUTS


def run(stage) -> dict:
    lines = repo_path(stage.p.notes).read_text(encoding="utf-8").splitlines()
    rows = [{"id": str(n), "words": len(json.dumps(json.loads(x)).split())}
            for n, x in enumerate(lines) if x.strip()]
    built = OUTPUTS.write(stage.reports_dir, {"notes": rows}, stage.params)
    return {"notes": len(rows), "longest": int(built["longest"]["words"].iloc[0])}
'''

DECLARATION = '''    DvcStage("toy", notebook="99_toy", outputs=TOY_OUTPUTS, params=["toy"]),
'''


def _notebook(path: Path) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('params_path = "params.yaml"')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell("# 99 · toy"), params,
                nbformat.v4.new_code_cell(
                    "from medpref.stagekit import open_stage\n"
                    "from medpref.toy import stage as toy_stage\n\n"
                    'stage = open_stage("99_toy", params_path)\n'
                    "metrics = toy_stage.run(stage)\n"
                    "stage.finish(metrics)")]
    nb.metadata["kernelspec"] = json.loads((REPO_ROOT / "notebooks/07_imapscore.ipynb")
                                           .read_text(encoding="utf-8"))["metadata"][
        "kernelspec"]
    nbformat.write(nb, path)


def _run(args: list[str], cwd: Path, env: dict) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(args)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{path}: '{old}' not found once"
    path.write_text(text.replace(old, new), encoding="utf-8")


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for rel in COPIED:
        src = REPO_ROOT / rel
        if src.is_dir():
            shutil.copytree(src, root / rel, ignore=shutil.ignore_patterns(
                "__pycache__", "*.egg-info", ".ipynb_checkpoints"))
        else:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, root / rel)
    (root / "reports/notebooks").mkdir(parents=True)   # a fresh clone's (its .gitignore'd files)
    (root / "models").mkdir()
    (root / "models/README").write_text("the toy stage reads no model\n")
    return root


def test_a_stage_is_added_in_its_notebook_package_params_and_declaration(copy):
    # the stage's command runs papermill from the interpreter's own environment
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                                  os.environ.get("PATH", "")]),
           "PYTHONPATH": str(copy / "src"), "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    py = [sys.executable]
    dvc = [sys.executable, "-m", "dvc"]
    _run(["git", "init", "-q"], copy, env)
    _run(dvc + ["init", "-q"], copy, env)
    _run(py + ["-m", "medpref", "dvc-yaml"], copy, env)
    _run(["git", "add", "-A"], copy, env)
    _run(["git", "commit", "-qm", "before the toy stage"], copy, env)

    # 1. the notebook, 2. the package (its config names the section), 3. the params
    # section, 4. the declaration
    _notebook(copy / "notebooks/99_toy.ipynb")
    pkg = copy / "src/medpref/toy"
    pkg.mkdir()
    for name, text in (("__init__.py", '"""A toy stage."""\n'), ("config.py", CONFIG),
                       ("outputs.py", OUTPUTS), ("stage.py", STAGE)):
        (pkg / name).write_text(text, encoding="utf-8")
    with open(copy / "params.yaml", "a", encoding="utf-8") as fh:
        fh.write("\ntoy:\n  notes: data/embedded/notes.jsonl\n  top: 3\n")
    decl = copy / "src/medpref/dvcstages.py"
    _edit(decl, "from medpref.rem.outputs import OUTPUTS as REM\n",
          "from medpref.rem.outputs import OUTPUTS as REM\n"
          "from medpref.toy.outputs import OUTPUTS as TOY_OUTPUTS\n")
    text = decl.read_text(encoding="utf-8")
    start = text.index("\nSTAGES = [\n")
    end = text.index("\n]\n", start)
    decl.write_text(text[:end + 1] + DECLARATION + text[end + 1:], encoding="utf-8")

    _run(py + ["-m", "medpref", "dvc-yaml"], copy, env)
    changed = _run(["git", "status", "--porcelain", "--untracked-files=all"], copy, env)
    touched = sorted({line[3:].split("/toy/")[0] + ("/toy/" if "/toy/" in line else "")
                      for line in changed.splitlines()})
    assert touched == ["dvc.yaml", "notebooks/99_toy.ipynb", "params.yaml",
                       "src/medpref/dvcstages.py", "src/medpref/toy/"], changed

    import yaml

    spec = yaml.safe_load((copy / "dvc.yaml").read_text(encoding="utf-8"))["stages"]["toy"]
    assert "data/embedded/notes.jsonl" in spec["deps"]   # named by toy.notes
    assert {"src/medpref/toy/stage.py", "src/medpref/toy/outputs.py"} <= set(spec["deps"])
    assert {"reports/99_toy/longest.csv", "reports/99_toy/records/notes.jsonl",
            "reports/99_toy/provenance.json"} <= {next(iter(o)) for o in spec["outs"]}

    _run(["git", "add", "-A"], copy, env)
    _run(["git", "commit", "-qm", "the toy stage"], copy, env)
    _run(dvc + ["repro", "toy"], copy, env)
    table = (copy / "reports/99_toy/longest.csv").read_text(encoding="utf-8").splitlines()
    notes = [x for x in (copy / "data/embedded/notes.jsonl").read_text(
        encoding="utf-8").splitlines() if x.strip()]
    assert table[0].split(",")[-2:] == ["id", "words"] and len(table) == 1 + min(3, len(notes))
    status = _run(dvc + ["status", "toy"], copy, env)
    assert "up to date" in status, status
    check = _run(py + ["-m", "medpref", "--root", str(copy), "tables", "--check", "99_toy"],
                 copy, env)   # exit 1 on any difference (_run asserts 0)
    assert "0 difference(s) in 99_toy" in check, check
