"""Stage 01 against a real OpenAI-compatible server: ``transformers serve`` on 127.0.0.1
serving the embedded SmolLM2-135M. Skipped only when the server's extra dependencies
(fastapi, uvicorn; pinned in requirements.lock) are missing."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import run_stage01, stage01_on_server

pytestmark = pytest.mark.slow
pytest.importorskip("fastapi", reason="transformers serve needs fastapi (requirements.lock)")
pytest.importorskip("uvicorn", reason="transformers serve needs uvicorn (requirements.lock)")

URL_ENV, KEY_ENV = "MEDPREF_SERVE_URL", "MEDPREF_SERVE_KEY"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served_model(embedded_llm_path, tmp_path_factory):
    """(base URL, model id) of a ``transformers serve`` process, stopped afterwards."""
    model = str(Path(embedded_llm_path).resolve())
    port = _free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    cli = Path(sys.executable).with_name("transformers")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    with open(log, "w") as fh:
        proc = subprocess.Popen([str(cli), "serve", model, "--host", "127.0.0.1", "--port",
                                 str(port), "--device", "cpu"], stdout=fh, stderr=fh, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=5) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"transformers serve did not start: {log.read_text()[-2000:]}")
            time.sleep(1)
        yield f"{base}/v1", model
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_stage01_against_transformers_serve(tmp_path, monkeypatch, served_model):
    from medpref.stagekit import GuardParams

    url, model = served_model
    monkeypatch.setenv(URL_ENV, url)
    monkeypatch.delenv(KEY_ENV, raising=False)
    # the README's recipe for a server that answers one request at a time
    stage = stage01_on_server(tmp_path, monkeypatch, model, URL_ENV, KEY_ENV, n_items=2,
                              guard=GuardParams(min_yield=0.5, max_failure_rate=0.0),
                              max_new_tokens=48, max_concurrency=1, timeout_s=600.0,
                              max_retries=1)
    out = run_stage01(stage)
    stage.finish(out.metrics, models=out.models, prompts=out.prompts)
    lines = (tmp_path / "data" / "unlabeled.jsonl").read_text().splitlines()
    assert len(lines) == out.metrics["items_written"] >= 1
    for line in lines:
        item = json.loads(line)
        sampled, generated = item["candidates"]
        assert sampled["source"] == "sampled" and generated["source"] == "generated"
        assert len(generated["response"].split()) >= 2
        assert item["history"][-1]["role"] == "patient"
    ledger = json.loads((tmp_path / "reports" / "ledger.json").read_text())
    tally = ledger["roles"]["annotator"]
    assert tally["calls"] >= 2 and tally["failures"] == 0
    assert tally["tokens_in"] > 100 and tally["tokens_out"] > 0  # the server's own usage
    assert out.models["annotator"] == f"openai:{model}"
