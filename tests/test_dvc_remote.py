"""Outputs travel by DVC's own remote: after `dvc push` to a local folder remote, a fresh
clone's `dvc pull` makes `dvc repro` a no-op.

The pipeline here has the project's kinds of outputs: a DVC-cached data file, a folder (an
adapter), an LLM cache marked `persist`, and a committed report (`cache: false`) beside
the one metrics file. Its command logs every execution outside the repository, so the test
sees whether the clone ran anything.

The LLM caches travel the same way, like every other output: a stage's cache file is a
DVC output (``persist: true``, so a rerun keeps it and its answers), so ``dvc push``
carries it, ``dvc pull`` brings it back and dvc.lock records its hash. The second part
below has a stage answer its calls with a scripted backend through the project's own
cache and client, as a real stage does, and log how many calls it made (outside the
repository, so the log survives what the test deletes).
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
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

TOY_STAGE = """\
stages:
  toy:
    cmd: python stage.py
    deps: [stage.py]
    params: [n]
    outs:
"""

DVC_YAML = TOY_STAGE + """\
      - data/items.jsonl
      - data/adapter
      - data/cache/llm/toy.sqlite:
          persist: true
      - reports/table.csv:
          cache: false
    metrics:
      - reports/metrics.json:
          cache: false
"""


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
            "CALL_LOG": str(tmp_path / "calls.log"), "DVC_NO_ANALYTICS": "1",
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


# -- the LLM cache: pushed, lost, pulled back, replayed ------------------------------------

N_QUESTIONS = 5
CACHE, ANSWERS = "data/cache/llm/toy.sqlite", "data/answers.jsonl"

CACHE_STAGE = textwrap.dedent("""\
    import json, os, pathlib
    from medpref.llm.cache import ResponseCache
    from medpref.llm.client import LLMClient
    from medpref.llm.ledger import Ledger
    from medpref.llm.scripted import ScriptedBackend
    from medpref.llm.types import CallSpec, GenerationParams

    n = int(pathlib.Path("params.yaml").read_text().split(":")[-1])
    backend = ScriptedBackend(lambda r: "answer to " + r.messages[-1]["content"])
    cache = ResponseCache("data/cache/llm/toy.sqlite")
    client = LLMClient("judge", backend, GenerationParams(), cache=cache, ledger=Ledger("toy"))
    prompts = [[{"role": "user", "content": f"question {i}"}] for i in range(n)]
    answers = client.chat_many(prompts, CallSpec("judge", "", 8))
    cache.close()   # as Stage.finish does: the answers are folded into the one file
    pathlib.Path("data/answers.jsonl").write_text(
        "".join(json.dumps({"i": i, "text": c.text}) + "\\n" for i, c in enumerate(answers)))
    with open(os.environ["CALL_LOG"], "a") as log:
        log.write(f"{len(backend.requests)}\\n")
""")

CACHE_DVC_YAML = TOY_STAGE + """\
      - data/answers.jsonl
      - data/cache/llm/toy.sqlite:
          persist: true
"""


def calls_made(tmp_path: Path) -> list[int]:
    """Model calls each run of the stage made, in order."""
    return [int(n) for n in (tmp_path / "calls.log").read_text().split()]


def cached_answers(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT COUNT(*) FROM completions").fetchone()[0]
    finally:
        conn.close()


def published_run(tmp_path: Path, env: dict) -> tuple[Path, dict[str, bytes]]:
    """A repository whose stage ran, committed and pushed to a folder remote; returns it
    and its outputs' bytes."""
    repo, remote = tmp_path / "repo", tmp_path / "remote"
    repo.mkdir()
    run(["git", "init", "-q"], repo, env)
    run(["dvc", "init", "-q"], repo, env)
    (repo / "stage.py").write_text(CACHE_STAGE)
    (repo / "params.yaml").write_text(f"n: {N_QUESTIONS}\n")
    (repo / "dvc.yaml").write_text(CACHE_DVC_YAML)
    run(["dvc", "repro", "-q"], repo, env)
    assert calls_made(tmp_path) == [N_QUESTIONS]
    # every answer is in the file DVC hashed, none left behind in a WAL beside it
    assert cached_answers(repo / CACHE) == N_QUESTIONS
    assert not (repo / f"{CACHE}-wal").exists()
    run(["dvc", "remote", "add", "-d", "shared", str(remote)], repo, env)
    run(["git", "add", "-A"], repo, env)
    run(["git", "commit", "-qm", "a run"], repo, env)
    run(["dvc", "push"], repo, env)
    assert sum(1 for p in remote.rglob("*") if p.is_file()) == 2   # the two outputs
    return repo, {rel: (repo / rel).read_bytes() for rel in (CACHE, ANSWERS)}


def lose_outputs_and_local_cache(repo: Path, env: dict) -> None:
    for rel in (CACHE, ANSWERS):
        (repo / rel).unlink()
    shutil.rmtree(repo / ".dvc" / "cache")
    status = run(["dvc", "status"], repo, env)   # dvc sees both gone from the cache too
    assert all(re.search(rf"not in cache:\s+{re.escape(rel)}", status)
               for rel in (CACHE, ANSWERS)), status


def test_push_then_pull_brings_the_llm_cache_back_and_a_forced_rerun_replays_it(tmp_path,
                                                                                 env):
    repo, published = published_run(tmp_path, env)
    lose_outputs_and_local_cache(repo, env)

    run(["dvc", "pull"], repo, env)
    for rel, data in published.items():
        assert (repo / rel).read_bytes() == data, rel
    assert "Data and pipelines are up to date" in run(["dvc", "status"], repo, env)
    assert calls_made(tmp_path) == [N_QUESTIONS]   # pulling ran nothing

    # a reviewer recomputes the stage: it reruns, and the pulled cache answers every call
    run(["dvc", "repro", "-f", "-q"], repo, env)
    assert calls_made(tmp_path) == [N_QUESTIONS, 0]
    for rel, data in published.items():
        assert (repo / rel).read_bytes() == data, rel


def test_a_rerun_from_the_pulled_llm_cache_alone_makes_no_model_call(tmp_path, env):
    """A reviewer who wants to recompute rather than download the outputs pulls the
    stage's cache file alone (an output path is a `dvc pull` target) and reruns."""
    repo, published = published_run(tmp_path, env)
    lose_outputs_and_local_cache(repo, env)

    run(["dvc", "pull", CACHE], repo, env)
    assert (repo / CACHE).read_bytes() == published[CACHE]
    assert not (repo / ANSWERS).exists()
    run(["dvc", "repro", "-q"], repo, env)
    assert calls_made(tmp_path) == [N_QUESTIONS, 0]   # it ran again, every answer cached
    assert (repo / ANSWERS).read_bytes() == published[ANSWERS]
    assert "Data and pipelines are up to date" in run(["dvc", "status"], repo, env)
