"""Runs that fail loudly or recover the right way, against a fault-injecting local
OpenAI-compatible server on 127.0.0.1 (``medpref.llm.stub_server``): stage 01 with every
call failing, refused credentials, a kill during option scoring, unpriced and
overspending models, ``Retry-After``, a key echoed by the server, failed option calls,
empty answers, two servers, no log-probs, ignored temperature, the assistant prefix."""

from __future__ import annotations

import logging
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import run_stage01, stage01_on_server
from medpref import REPO_ROOT
from medpref.contracts import Turn
from medpref.llm.cache import ResponseCache
from medpref.llm.client import LLMClient
from medpref.llm.errors import BackendError, BudgetExceededError, UnpricedModelError
from medpref.llm.ledger import Ledger, Price
from medpref.llm.openai_backend import OpenAIBackend
from medpref.llm.redact import redact, url_without_credentials
from medpref.llm.session import LLMSession
from medpref.llm.stub_server import StubServer
from medpref.llm.types import CallSpec, GenerationParams
from medpref.params import RoleConfig, ServerConfig, load_params
from medpref.stagekit import Stage, StageFailed

SECRET = "-".join(["medpref", "fake", "credential", "for", "leak", "tests"])
URL_ENV, KEY_ENV = "MEDPREF_FAULT_URL", "MEDPREF_FAULT_KEY"
LOGPROBS = {"0": math.log(0.1), "1": math.log(0.2), "2": math.log(0.6)}
GOOD = "Any red flags? Patient: none\nDoctor: Then we watch and wait."

CALL = CallSpec("judge", "", 256)  # the client's default budget, no prefix


def _env(monkeypatch, server: StubServer | None) -> None:
    if server is None:
        monkeypatch.delenv(URL_ENV, raising=False)
    else:
        monkeypatch.setenv(URL_ENV, server.base_url)
    monkeypatch.setenv(KEY_ENV, SECRET)


def _backend(server, monkeypatch, **kw) -> OpenAIBackend:
    _env(monkeypatch, server)
    kw.setdefault("backoff_s", 0.01)
    return OpenAIBackend("stub-model", base_url_env=URL_ENV, api_key_env=KEY_ENV, **kw)


def _msgs(n: int, tag: str = "question") -> list[list[dict]]:
    return [[{"role": "user", "content": f"{tag} {i}"}] for i in range(n)]


# -- stage 01 against the server ------------------------------------------------------------
def _stage01(tmp_path, monkeypatch, server, n_items=4, guard=None, **server_kw) -> Stage:
    _env(monkeypatch, server)
    return stage01_on_server(tmp_path, monkeypatch, "stub-model", URL_ENV, KEY_ENV,
                             n_items=n_items, guard=guard, rounds=False, backoff_s=0.01,
                             **server_kw)


@pytest.mark.slow
def test_all_503_fails_stage01_with_one_line_and_writes_nothing(tmp_path, monkeypatch):
    with StubServer(always_fail=503) as server:
        stage = _stage01(tmp_path, monkeypatch, server, max_retries=1)
        with pytest.raises(StageFailed) as exc:
            run_stage01(stage)
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith("stage sampling failed: 0 of 4 items produced")
    assert "role 'annotator' failed 8 of 8 calls" in msg  # 4 items x 2 attempts
    assert "first error: gave up after 2 attempts" in msg and "503" in msg
    assert not (tmp_path / "data" / "unlabeled.jsonl").exists()
    assert not (tmp_path / "reports").exists()


@pytest.mark.slow
def test_401_fails_stage01_at_once_naming_role_and_server(tmp_path, monkeypatch):
    with StubServer(always_fail=401, echo_key=True) as server:
        stage = _stage01(tmp_path, monkeypatch, server, max_retries=3, max_concurrency=1)
        with pytest.raises(StageFailed) as exc:
            run_stage01(stage)
        n_requests = len(server.requests)
    msg = str(exc.value)
    assert n_requests == 1  # no retry, no further call
    assert msg.startswith("stage sampling failed: role 'annotator': server 'test' (http://127.0.0.1")
    assert "HTTP 401" in msg and f"${KEY_ENV}" in msg and "\n" not in msg
    assert SECRET not in msg and "***" in msg  # the echoed key is redacted
    assert not (tmp_path / "data" / "unlabeled.jsonl").exists()


@pytest.mark.slow
def test_echoed_key_reaches_no_file_the_run_writes(tmp_path, monkeypatch, caplog):
    """Some calls fail with a body that quotes the key; the stage completes and writes its
    outputs, ledger and cache; the key is in none of them, nor in the log."""
    caplog.set_level(logging.DEBUG)
    from medpref.stagekit import GuardParams

    with StubServer(fail_with=[400, 400, 400], echo_key=True, reply=GOOD) as server:
        stage = _stage01(tmp_path, monkeypatch, server, max_concurrency=1,
                         guard=GuardParams(min_yield=0.0, max_failure_rate=1.0))
        out = run_stage01(stage)
        stage.finish(out.metrics)
    rejected = (tmp_path / "reports" / "records" / "rejected.jsonl").read_text()
    assert rejected.count("***") == 3 and "stub error 400" in rejected
    files = [f for f in tmp_path.rglob("*") if f.is_file()]
    assert len(files) >= 6
    for f in files:
        assert SECRET.encode() not in f.read_bytes(), f"key leaked into {f.name}"
    assert SECRET not in caplog.text


def test_redaction_of_keys_and_url_credentials():
    text = f"failed at https://bob:hunter22@host:8000/v1 with key {SECRET}"
    assert redact(text, [SECRET]) == "failed at https://***@host:8000/v1 with key ***"
    assert url_without_credentials("http://u:p@127.0.0.1:8000/v1/") == "http://127.0.0.1:8000/v1"


# -- option scoring: killed, failed, counted ---------------------------------------------
_KILL_CHILD = """
import sys
from medpref.llm.cache import ResponseCache
from medpref.llm.client import LLMClient
from medpref.llm.openai_backend import OpenAIBackend
from medpref.llm.types import GenerationParams
backend = OpenAIBackend("stub-model", base_url_env="{url}", api_key_env="{key}",
                        max_concurrency=2)
client = LLMClient("rem", backend, GenerationParams(), cache=ResponseCache(sys.argv[1]))
prompts = [[{{"role": "user", "content": f"state {{i}}"}}] for i in range(40)]
client.option_scores(prompts, ("0", "1", "2"), "Score: ")
"""


@pytest.mark.slow
def test_sigkill_during_option_scoring_repeats_at_most_the_calls_in_flight(tmp_path,
                                                                           monkeypatch):
    cache_path = tmp_path / "rem.sqlite"
    with StubServer(latency_s=0.05, reply="Score: 2", option_logprobs=LOGPROBS) as server:
        _env(monkeypatch, server)
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src"), "MEDPREF_PROGRESS": "0"}
        child = subprocess.Popen([sys.executable, "-c", _KILL_CHILD.format(url=URL_ENV,
                                                                          key=KEY_ENV),
                                  str(cache_path)], env=env)
        deadline = time.monotonic() + 60
        while len(server.requests) < 12 and time.monotonic() < deadline:
            time.sleep(0.01)
        child.send_signal(signal.SIGKILL)
        child.wait()
        first = [r["messages"][-1]["content"] for r in server.requests]
        assert 12 <= len(first) < 40
        backend = _backend(server, monkeypatch, max_concurrency=2)
        client = LLMClient("rem", backend, GenerationParams(),
                           cache=ResponseCache(cache_path))
        prompts = [[{"role": "user", "content": f"state {i}"}] for i in range(40)]
        scores = client.option_scores(prompts, ("0", "1", "2"), "Score: ")
        second = [r["messages"][-1]["content"] for r in server.requests[len(first):]]
    assert all(s.ok for s in scores) and len(scores) == 40
    repeated = set(first) & set(second)
    assert len(repeated) <= 2, f"{len(repeated)} calls repeated (2 were in flight at most)"
    assert set(first) | set(second) == {f"state {i}" for i in range(40)}


@pytest.mark.slow
def test_failed_option_call_is_recorded_and_the_scorer_skips_it(tmp_path, monkeypatch):
    from medpref.remscore.scorers import build_scorer
    from medpref.rules import load_rules

    flowchart = load_rules(REPO_ROOT / "configs" / "rules" / "plpf_flowchart.yaml")
    states = [[Turn(role="patient", text=f"I have had a cough for {d} days."),
               Turn(role="doctor", text="Any fever?")] for d in ("two", "nine", "four")]
    cache = ResponseCache(tmp_path / "c.sqlite")
    ledger = Ledger("03_rem")
    with StubServer(reply="Score: 2", option_logprobs=LOGPROBS, fail_when="nine days",
                    fail_status=500) as server:
        client = LLMClient("rem", _backend(server, monkeypatch, max_retries=1),
                           GenerationParams(), cache=cache, ledger=ledger)
        scorer = build_scorer("expected", client, flowchart, [], comment=False,
                              call=CallSpec("rem", "rem_judge", 64, "Comment:"))
        out = scorer.score_states(states, [flowchart["A"]])
    assert [j["A"].score is None for j in out] == [False, True, False]
    assert out[0]["A"].score == pytest.approx((0.2 + 2 * 0.6) / 0.9)
    tally = ledger.totals()["roles"]["rem"]
    assert tally["calls"] == 3 and tally["failures"] == 1
    assert tally["tokens_in"] > 0 and tally["tokens_out"] > 0 and tally["latency_s"] > 0
    assert "gave up after 2 attempts" in ledger.first_error("rem")
    assert len(cache) == 2  # the failure is not cached


@pytest.mark.slow
def test_server_without_logprobs_is_detected_once_with_the_mode_to_use(monkeypatch):
    with StubServer(reply="Score: 2", logprobs=False) as server:
        client = LLMClient("rem", _backend(server, monkeypatch), GenerationParams())
        with pytest.raises(BackendError, match=r"no log-probs.*annotation\.rem_scorer: a "
                                                 r"rem\.scorers entry with mode: sampled"
                                                 r".*relation_mode: generate"):
            client.option_scores(_msgs(5), ("0", "1", "2"), "Score: ")
        assert len(server.requests) == 1


# -- the budget guard ----------------------------------------------------------------------
def test_unpriced_model_on_a_paid_server_is_refused_unless_priced_or_free(monkeypatch):
    _env(monkeypatch, None)  # no base URL: OpenAI's own API
    params = load_params()
    llm = params.shared.llm
    llm.servers["paid"] = ServerConfig(base_url_env=URL_ENV, api_key_env=KEY_ENV)
    llm.roles["judge"] = RoleConfig(backend="openai", model="gpt-4o-2024-08-06", server="paid")
    with pytest.raises(UnpricedModelError, match=r"role 'judge': model 'gpt-4o-2024-08-06'"
                                                 r".*api\.openai\.com.*shared\.llm\.prices"):
        LLMSession("t", params.shared).role("judge")
    llm.roles["judge"] = llm.roles["judge"].model_copy(update={"free": True})
    assert LLMSession("t", params.shared).role("judge").price == Price()
    llm.roles["judge"] = llm.roles["judge"].model_copy(update={"free": False})
    llm.prices["gpt-4o-2024-08-06"] = llm.prices["gpt-4o"]
    assert LLMSession("t", params.shared).role("judge").price.input_per_1m == 2.5


@pytest.mark.slow
def test_local_server_needs_no_price(monkeypatch):
    with StubServer() as server:
        _env(monkeypatch, server)
        params = load_params()
        params.shared.llm.servers["local"] = ServerConfig(base_url_env=URL_ENV,
                                                          api_key_env=KEY_ENV)
        params.shared.llm.roles["judge"] = RoleConfig(backend="openai", model="x",
                                                      server="local")
        assert LLMSession("t", params.shared).role("judge").price == Price()


@pytest.mark.slow
def test_billed_usage_overspend_stops_the_next_call(monkeypatch, tmp_path):
    """Each call is estimated at a few tokens but billed 1M input tokens ($1): after two
    calls the server-reported spend ($2) is over the $1.5 budget and the third never goes."""
    cache = ResponseCache(tmp_path / "c.sqlite")
    ledger = Ledger("t", max_cost_usd=1.5)
    with StubServer(usage=(1_000_000, 0)) as server:
        client = LLMClient("judge", _backend(server, monkeypatch, max_concurrency=1),
                           GenerationParams(), cache=cache, ledger=ledger,
                           price=Price(input_per_1m=1.0, output_per_1m=1.0))
        with pytest.raises(BudgetExceededError, match=r"\$2\.0000 charged.*\$1\.50"):
            client.chat_many(_msgs(5), CALL.but(max_new_tokens=8))
        assert len(server.requests) == 2
    assert ledger.totals()["total"]["cost_usd"] == pytest.approx(2.0)
    assert len(cache) == 2  # what was paid for is kept


def test_cjk_prompt_is_estimated_near_a_token_per_character():
    from medpref.llm.client import estimate_tokens

    assert estimate_tokens([{"role": "user", "content": "咳嗽两周了" * 20}]) >= 100


# -- retries and answers -----------------------------------------------------------------
@pytest.mark.slow
def test_retry_after_is_waited_for(monkeypatch):
    with StubServer(fail_with=[429], retry_after=2) as server:
        client = LLMClient("judge", _backend(server, monkeypatch, max_retries=2),
                           GenerationParams())
        comp = client.chat(_msgs(1)[0], CALL)
    assert comp.ok
    gap = server.request_times[1] - server.request_times[0]
    assert 2.0 <= gap < 4.0, gap  # the backoff alone would be ~0.01 s


@pytest.mark.slow
def test_one_deadline_bounds_a_call_and_its_retries(monkeypatch):
    with StubServer(always_fail=503, latency_s=0.1) as server:
        backend = _backend(server, monkeypatch, max_retries=20, backoff_s=0.2, deadline_s=1.0)
        t0 = time.monotonic()
        comp = LLMClient("judge", backend, GenerationParams()).chat(_msgs(1)[0], CALL)
        elapsed = time.monotonic() - t0
    assert not comp.ok and "deadline 1s" in comp.error
    assert elapsed < 1.5 and len(server.requests) < 8


@pytest.mark.slow
@pytest.mark.parametrize("reply", ["", None])
def test_empty_or_null_completion_is_a_failure_never_cached(monkeypatch, tmp_path, reply):
    cache = ResponseCache(tmp_path / "c.sqlite")
    ledger = Ledger("t")
    with StubServer(reply=reply) as server:
        client = LLMClient("judge", _backend(server, monkeypatch), GenerationParams(),
                           cache=cache, ledger=ledger)
        comp = client.chat(_msgs(1)[0], CALL)
    assert not comp.ok and "empty completion" in comp.error
    assert len(cache) == 0 and ledger.totals()["total"]["failures"] == 1


@pytest.mark.slow
def test_cache_key_includes_the_server(monkeypatch, tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    with StubServer(reply="from A") as a, StubServer(reply="from B") as b:
        first = LLMClient("judge", _backend(a, monkeypatch), GenerationParams(),
                          cache=cache).chat(_msgs(1)[0], CALL)
        second = LLMClient("judge", _backend(b, monkeypatch), GenerationParams(),
                           cache=cache).chat(_msgs(1)[0], CALL)
    assert first.text.startswith("from A") and second.text.startswith("from B")
    assert not second.cached and len(b.requests) == 1


@pytest.mark.slow
def test_identical_sampled_answers_are_warned_about(monkeypatch, caplog):
    with StubServer() as server:  # answers the same whatever the temperature
        client = LLMClient("judge", _backend(server, monkeypatch), GenerationParams())
        reqs = [client.request(_msgs(1)[0], CALL, temperature=0.7, seed=s) for s in range(3)]
        with caplog.at_level(logging.WARNING):
            client.complete(reqs)
    assert "identical" in caplog.text and "temperature" in caplog.text


@pytest.mark.slow
@pytest.mark.parametrize("continue_prefix", [False, True])
def test_the_answer_prefix_is_sent_like_the_hf_backend(monkeypatch, continue_prefix):
    with StubServer(reply="Doctor: How long?") as server:
        client = LLMClient("annotator", _backend(server, monkeypatch,
                                                 continue_prefix=continue_prefix),
                           GenerationParams())
        comp = client.chat(_msgs(1)[0], CALL.but(answer_prefix="Doctor:"))
    body = server.requests[0]
    if continue_prefix:  # pre-filled and continued, as hf renders it
        assert body["messages"][-1] == {"role": "assistant", "content": "Doctor:"}
        assert body["continue_final_message"] is True
    else:                # asked to start with it
        assert body["messages"][-1]["content"].endswith('Start your reply with "Doctor:".')
    assert comp.text.startswith("How long?")  # an echoed prefix is removed


@pytest.mark.slow
def test_a_batch_shows_a_progress_bar(monkeypatch, capsys):
    monkeypatch.setenv("MEDPREF_PROGRESS", "1")
    with StubServer() as server:
        client = LLMClient("judge", _backend(server, monkeypatch), GenerationParams())
        client.chat_many(_msgs(3), CALL)
        client.chat_many(_msgs(4), CALL)  # 3 hits... if cached; no cache here: 4 calls
    out = capsys.readouterr().out
    assert "judge · chat" in out and "calls=3" in out and "failed=0" in out
    assert "tok/s=" in out


@pytest.mark.slow
@pytest.mark.parametrize("status, line", [
    (503, "StageFailed: stage sampling failed: 0 of 4 items produced (min_yield 0.5); "
          "role 'annotator' failed 8 of 8 calls"),
    (401, "StageFailed: stage sampling failed: role 'annotator': server 'stub' (http://"),
])
def test_papermill_run_of_stage01_exits_non_zero_and_writes_nothing(tmp_path, status, line):
    """The notebook as dvc runs it: a non-zero exit with the one line, no items written
    (the repository's data/01_sampling is left as it was)."""
    import yaml

    raw = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    raw["shared"]["llm"]["cache_dir"] = str(tmp_path / "cache")
    raw["shared"]["llm"]["servers"]["stub"] = {"base_url_env": URL_ENV, "api_key_env": KEY_ENV,
                                               "max_retries": 1, "backoff_s": 0.01}
    raw["shared"]["llm"]["roles"]["annotator"] = {"backend": "openai", "server": "stub",
                                                  "model": "stub-model"}
    raw["sampling"]["n_items"] = 4
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(raw))
    items = REPO_ROOT / "data" / "01_sampling" / "unlabeled.jsonl"
    before = items.stat().st_mtime_ns if items.exists() else None
    papermill = Path(sys.executable).with_name("papermill")
    with StubServer(always_fail=status, echo_key=True) as server:
        env = {**os.environ, URL_ENV: server.base_url, KEY_ENV: SECRET,
               "PYTHONPATH": str(REPO_ROOT / "src"), "MEDPREF_PROGRESS": "0"}
        run = subprocess.run([str(papermill), "--log-level", "WARNING",
                              str(REPO_ROOT / "notebooks" / "01_sampling.ipynb"),
                              str(tmp_path / "out.ipynb"), "-p", "params_path", str(params)],
                             cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                             timeout=600)
    assert run.returncode != 0
    assert line in run.stderr + run.stdout
    assert SECRET not in run.stderr + run.stdout + (tmp_path / "out.ipynb").read_text()
    assert (items.stat().st_mtime_ns if items.exists() else None) == before
