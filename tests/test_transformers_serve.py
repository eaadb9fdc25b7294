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

import pandas as pd
import pytest

from conftest import run_stage01, stage01_on_server
from medpref import REPO_ROOT
from medpref.llm.cache import ResponseCache

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
    roles = json.loads((tmp_path / "reports" / "provenance.json").read_text())["roles"]
    assert roles["annotator"] == f"openai:{model}"   # the round-by-round speakers stay hf


def test_stage06_with_doctor_patient_grader_and_gpd_judge_served(tmp_path, monkeypatch,
                                                                  served_model):
    """The SP test with every chat role it has on the server: the doctor under test, PLPF's
    LLM patient, the judge grader (generate mode: the server gives no log-probs) and the
    GPT-Distance judge. Proves their prompts, parsers and the fidelity bookkeeping on the
    served path."""
    from medpref.params import load_params
    from medpref.simulation import stage as sim_stage
    from medpref.simulation.config import DoctorConfig

    p = load_params().simulation
    section = p.model_copy(update={
        "case_ids": ["sp-0002"], "rounds": 2, "trained_policies": False, "rem_radar": False,
        "doctors": [DoctorConfig(name="served", role="served_doctor")],
        # the default loop controls stay on: the server's `loop_controls: false` leaves them
        # out of the requests (it answers 422 to them); the turn still ends at its question
        "doctor_decoding": p.doctor_decoding.model_copy(update={"max_new_tokens": 32}),
        # the 135M patient invents facts: record that, do not stop the run on it here
        "patient": p.patient.model_copy(update={"kind": "llm", "max_new_tokens": 32,
                                                "max_unsupported_share": 1.0}),
        # the judge grades the transcript; its 229-item validation is a long run of its own
        "grader": p.grader.model_copy(update={"mode": "generate", "compare": [],
                                              "graded_items": None}),
        "next_turn": p.next_turn.model_copy(update={"n_dialogues": 1, "max_new_tokens": 24})})
    stage = served_stage("06_simulation", tmp_path, monkeypatch, served_model,
                         ["served_doctor", "patient", "judge"], section=section)
    out = sim_stage.run(stage)
    stage.finish(out.metrics, models=out.model_ids, prompts=out.prompts)

    (consult,) = out.consultations
    assert consult.error is None and len(consult.turns) >= 3
    assert [t.role for t in consult.turns[:3]] == ["patient", "doctor", "patient"]
    assert all(t.text.strip() for t in consult.turns if t.role == "doctor")
    grades = [g for g in out.grades if g.doctor == "served"]
    assert len(grades) == 9 + 5 + 1     # sp-0002's checklist: symptoms, tests, diseases
    # every item was judged by the served judge or abstained (an unusable answer), and says so
    assert {g.method for g in grades} <= {"judge", "abstain", "none"}
    assert any(g.method == "judge" for g in grades)
    fidelity = pd.read_csv(tmp_path / "reports" / "patient_fidelity.csv")
    assert int(fidelity["patient_sentences"].sum()) >= 1
    roles = ledger_roles(tmp_path)
    for role in ("served_doctor", "patient", "judge"):
        assert roles[role]["calls"] >= 1 and roles[role]["failures"] == 0, (role, roles[role])
    assert out.model_ids["served"] == f"openai:{served_model[1]}"


def served_stage(name: str, tmp_path, monkeypatch, served, roles, section=None):
    """``name`` with each of ``roles`` on the ``transformers serve`` process (one request at
    a time, the README's recipe), its section replaced by ``section``, folders and LLM
    cache under ``tmp_path``."""
    from medpref.llm.session import LLMSession
    from medpref.params import Params, RoleConfig, ServerConfig, load_params
    from medpref.stagekit import Stage

    url, model = served
    monkeypatch.setenv(URL_ENV, url)
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.setattr(Stage, "data_dir", property(lambda self: tmp_path / "data"))
    monkeypatch.setattr(Stage, "reports_dir", property(lambda self: tmp_path / "reports"))
    params = load_params()
    if section is not None:
        params = Params({**params._sections, name.split("_", 1)[1]: section}, params.raw,
                        params.path)
    llm = params.shared.llm
    llm.servers["test"] = ServerConfig(base_url_env=URL_ENV, api_key_env=KEY_ENV,
                                       max_concurrency=1, timeout_s=600.0, max_retries=1,
                                       loop_controls=False)   # it answers 422 to them
    for role in roles:
        llm.roles[role] = RoleConfig(backend="openai", model=model, server="test")
    stage = Stage(name=name, params=params)
    stage._llm = LLMSession(name, params.shared,
                            cache=ResponseCache(tmp_path / "cache" / f"{name}.sqlite"))
    return stage


def ledger_roles(tmp_path) -> dict:
    return json.loads((tmp_path / "reports" / "ledger.json").read_text())["roles"]


def test_stage08_reader_and_pairwise_judge_served(tmp_path, monkeypatch, served_model):
    """MedicineQA: Distill (the native tool call an openai role gets by default, with the
    text fallback when the server answers in prose), Retrieve, Read and the two-order
    judge, all on the server."""
    from medpref.medqa import stage as s08
    from medpref.medqa.config import MedQAParams

    p = MedQAParams(n_distill_items=3, n_read_items=2, elo_shuffles=50, bootstrap=50,
                    distill_max_new_tokens=24, read_max_new_tokens=32,
                    embeddings_cache=str(tmp_path / "emb.npz"),
                    models=[{"name": "distilled", "role": "policy", "retrieval": "distilled"},
                            {"name": "closed_book", "role": "policy", "retrieval": "none"}])
    stage = served_stage("08_medqa", tmp_path, monkeypatch, served_model,
                         ["policy", "judge"], section=p)
    out = s08.run(stage)
    stage.finish(out.metrics, models=out.models, prompts=out.prompts)
    roles = ledger_roles(tmp_path)
    assert roles["policy"]["calls"] >= 3 + 2 * 2 and roles["policy"]["failures"] == 0
    assert roles["judge"]["calls"] >= 2 and roles["judge"]["failures"] == 0
    # each read item, both orders, one pair of models: every verdict is a usable game or is
    # recorded as unparsable (the 135M judge rarely answers in the asked form)
    verdicts = (tmp_path / "data" / "verdicts.jsonl").read_text().splitlines()
    unparsable = (tmp_path / "reports" / "unparsable_verdicts.jsonl").read_text().splitlines()
    assert len(verdicts) + len(unparsable) == 2 * 2 == out.metrics["judge_calls"]
    assert (tmp_path / "reports" / "table2_models.csv").exists()
    # every chat role on the server; the retriever's MiniLM stays local
    assert set(out.models.values()) == {f"openai:{served_model[1]}", "models/all-minilm-l6-v2"}


def test_stage07_imap_extraction_and_relations_served(tmp_path, monkeypatch, served_model):
    """imapScore with its judge on the server: sampled extraction (the default for an
    openai role) and generated relations (the server gives no log-probs)."""
    from medpref.imap import stage as s07
    from medpref.imap.config import ImapParams

    data = tmp_path / "qa.jsonl"        # one question, its three systems' answers
    rows = (REPO_ROOT / "data/embedded/qa_human_scores.jsonl").read_text().splitlines()
    data.write_text("\n".join(rows[:3]) + "\n")
    p = ImapParams(data=str(data), relation_mode="generate", max_new_tokens_question=32,
                   max_new_tokens_answer=32, link_min_similarity=None)
    stage = served_stage("07_imapscore", tmp_path, monkeypatch, served_model, ["judge"],
                         section=p)
    out = s07.run(stage)
    stage.finish(out.metrics, models=out.models, prompts=out.prompts)
    judge = ledger_roles(tmp_path)["judge"]
    assert judge["calls"] >= 3 and judge["failures"] == 0
