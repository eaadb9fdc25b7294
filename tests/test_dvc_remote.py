"""Outputs travel by DVC's own remote: after `dvc push` to a local folder remote, a fresh
clone's `dvc pull` makes `dvc repro` a no-op.

The pipeline here has the project's kinds of outputs: a DVC-cached data file, a folder (an
adapter), an LLM cache marked `persist`, and a committed report (`cache: false`) beside
the one metrics file. Its command logs every execution outside the repository, so the test
sees whether the clone ran anything.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent

STAGE = textwrap.dedent("""\
    import json, os, pathlib, sqlite3, sys
    with open(os.environ["RUN_LOG"], "a") as log:
        log.write("ran\\n")
    n = int(pathlib.Path("params.yaml").read_text().split(":")[-1])
    for d in ("data/adapter", "data/cache/llm", "reports"):
        pathlib.Path(d).mkdir(parents=True, exist_ok=True)
    pathlib.Path("data/items.jsonl").write_text("".join(json.dumps({"i": i}) + "\\n"
                                                         for i in range(n)))
    pathlib.Path("data/adapter/weights.bin").write_bytes(bytes(range(n)) * 100)
    db = sqlite3.connect("data/cache/llm/toy.sqlite")
    db.execute("create table if not exists answers (k text primary key, v text)")
    db.execute("insert or replace into answers values ('q', 'a')")
    db.commit(); db.close()
    pathlib.Path("reports/table.csv").write_text(f"n\\n{n}\\n")
    pathlib.Path("reports/metrics.json").write_text(json.dumps({"n": n}))
""")

DVC_YAML = textwrap.dedent("""\
    stages:
      toy:
        cmd: python stage.py
        deps: [stage.py]
        params: [n]
        outs:
          - data/items.jsonl
          - data/adapter
          - data/cache/llm/toy.sqlite:
              persist: true
          - reports/table.csv:
              cache: false
        metrics:
          - reports/metrics.json:
              cache: false
""")


def run(cmd: list[str], cwd: Path, env: dict) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(cmd)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture
def env(tmp_path):
    dvc = BIN / "dvc"
    if not dvc.exists() and shutil.which("dvc") is None:
        pytest.skip("dvc is not installed")
    return {**os.environ, "RUN_LOG": str(tmp_path / "runs.log"),
            "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
            "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}


def test_push_then_a_fresh_clone_pulls_and_has_nothing_to_reproduce(tmp_path, env):
    origin, remote, clone = tmp_path / "origin", tmp_path / "remote", tmp_path / "clone"
    origin.mkdir()
    run(["git", "init", "-q"], origin, env)
    run(["dvc", "init", "-q"], origin, env)
    run(["dvc", "config", "core.analytics", "false"], origin, env)
    (origin / "stage.py").write_text(STAGE)
    (origin / "params.yaml").write_text("n: 7\n")
    (origin / "dvc.yaml").write_text(DVC_YAML)
    run(["dvc", "repro", "-q"], origin, env)
    run(["dvc", "remote", "add", "-d", "shared", str(remote)], origin, env)
    run(["git", "add", "-A"], origin, env)
    run(["git", "commit", "-qm", "a run"], origin, env)
    pushed = run(["dvc", "push"], origin, env)
    assert "pushed" in pushed.lower(), pushed
    assert (tmp_path / "runs.log").read_text() == "ran\n"

    run(["git", "clone", "-q", str(origin), str(clone)], tmp_path, env)
    assert not (clone / "data" / "items.jsonl").exists()   # git carries no DVC outputs
    assert (clone / "reports" / "table.csv").exists()        # ... but the committed reports
    run(["dvc", "pull"], clone, env)
    for rel in ("data/items.jsonl", "data/adapter/weights.bin", "data/cache/llm/toy.sqlite"):
        assert (clone / rel).read_bytes() == (origin / rel).read_bytes(), rel
    assert "up to date" in run(["dvc", "status"], clone, env)
    repro = run(["dvc", "repro"], clone, env)
    assert "didn't change" in repro, repro
    assert (tmp_path / "runs.log").read_text() == "ran\n"    # the clone ran nothing

    # the same clone reruns the stage when a param changes: the remote is no replay
    (clone / "params.yaml").write_text("n: 9\n")
    run(["dvc", "repro", "-q"], clone, env)
    assert (tmp_path / "runs.log").read_text() == "ran\nran\n"
    assert (clone / "reports" / "table.csv").read_text() == "n\n9\n"
