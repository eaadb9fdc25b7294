"""The LLM caches travel by DVC's own remote, like every other output.

A stage's cache file is a DVC output (``persist: true``, so a rerun keeps it and its
answers), so ``dvc push`` carries it to a remote, ``dvc pull`` brings it back and dvc.lock
records its hash. Here a stage answers its calls with a scripted backend through the
project's own cache and client, as a real stage does, and logs how many calls it made
(outside the repository, so the log survives what the test deletes).
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
N_QUESTIONS = 5
CACHE, ANSWERS = "data/cache/llm/toy.sqlite", "data/answers.jsonl"

STAGE = textwrap.dedent("""\
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

DVC_YAML = textwrap.dedent("""\
    stages:
      toy:
        cmd: python stage.py
        deps: [stage.py]
        params: [n]
        outs:
          - data/answers.jsonl
          - data/cache/llm/toy.sqlite:
              persist: true
""")


def run(cmd: list[str], cwd: Path, env: dict) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(cmd)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture
def env(tmp_path):
    if not (BIN / "dvc").exists() and shutil.which("dvc") is None:
        pytest.skip("dvc is not installed")
    return {**os.environ, "CALL_LOG": str(tmp_path / "calls.log"),
            "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "DVC_NO_ANALYTICS": "1",
            "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}


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
    (repo / "stage.py").write_text(STAGE)
    (repo / "params.yaml").write_text(f"n: {N_QUESTIONS}\n")
    (repo / "dvc.yaml").write_text(DVC_YAML)
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
