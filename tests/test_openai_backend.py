"""The openai backend against a local stub: retries, give-up bound, concurrency, secrets."""

from __future__ import annotations

import math

import pytest

from medpref.llm.cache import ResponseCache
from medpref.llm.client import LLMClient
from medpref.llm.errors import BackendConfigError
from medpref.llm.ledger import Ledger
from medpref.llm.openai_backend import OpenAIBackend
from medpref.llm.stub_server import StubServer
from medpref.llm.types import CallSpec, GenerationParams

# a made-up, clearly fake credential (assembled so it does not look like a real key);
# the tests only need a distinctive string to search every output for
SECRET = "-".join(["medpref", "fake", "credential", "for", "leak", "tests"])

CALL = CallSpec("policy", "", 256)  # the client's default budget, no prefix


def _backend(server: StubServer, monkeypatch, **kw) -> OpenAIBackend:
    monkeypatch.setenv("MEDPREF_TEST_URL", server.base_url)
    monkeypatch.setenv("MEDPREF_TEST_KEY", SECRET)
    kw.setdefault("backoff_s", 0.01)
    return OpenAIBackend("stub-model", base_url_env="MEDPREF_TEST_URL",
                         api_key_env="MEDPREF_TEST_KEY", **kw)


def _msgs(n: int) -> list[list[dict]]:
    return [[{"role": "user", "content": f"question {i}"}] for i in range(n)]


@pytest.mark.slow
@pytest.mark.parametrize("status", [429, 500, 503])
def test_retries_then_succeeds(monkeypatch, status):
    with StubServer(fail_with=[status, status]) as server:
        client = LLMClient("judge", _backend(server, monkeypatch, max_retries=3),
                           GenerationParams())
        comp = client.chat(_msgs(1)[0], CALL)
    assert comp.ok and comp.text.startswith("stub answer")
    assert len(server.requests) == 3  # two failures, then the answer


@pytest.mark.slow
def test_gives_up_after_the_bound_and_records_the_failure(monkeypatch, tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    with StubServer(always_fail=500) as server:
        client = LLMClient("judge", _backend(server, monkeypatch, max_retries=2),
                           GenerationParams(), cache=cache, ledger=Ledger("t"))
        comp = client.chat(_msgs(1)[0], CALL)
    assert not comp.ok and "gave up after 3 attempts" in comp.error
    assert len(server.requests) == 3
    assert client.ledger.totals()["total"]["failures"] == 1
    assert len(cache) == 0


@pytest.mark.slow
def test_client_errors_are_not_retried(monkeypatch):
    with StubServer(always_fail=400) as server:
        comp = LLMClient("judge", _backend(server, monkeypatch, max_retries=4),
                         GenerationParams()).chat(_msgs(1)[0], CALL)
    assert not comp.ok and len(server.requests) == 1


@pytest.mark.slow
def test_concurrency_never_exceeds_the_limit(monkeypatch):
    with StubServer(latency_s=0.05) as server:
        client = LLMClient("judge", _backend(server, monkeypatch, max_concurrency=3),
                           GenerationParams())
        out = client.chat_many(_msgs(20), CALL)
    assert len(out) == 20 and all(c.ok for c in out)
    assert server.peak_in_flight <= 3
    assert server.peak_in_flight >= 2  # it did run concurrently
    assert [c.text for c in out] == [f"stub answer: question {i}" for i in range(20)]


@pytest.mark.slow
def test_key_is_sent_but_never_stored(monkeypatch, tmp_path):
    cache = ResponseCache(tmp_path / "cache.sqlite")
    ledger = Ledger("t")
    with StubServer() as server:
        client = LLMClient("judge", _backend(server, monkeypatch), GenerationParams(),
                           cache=cache, ledger=ledger)
        client.chat_many(_msgs(3), CALL)
        assert all(h == f"Bearer {SECRET}" for h in server.auth_headers)
    cache.close()
    ledger.write(tmp_path / "ledger.json")
    assert SECRET not in repr(client.identity) and SECRET not in client.model_id
    for f in tmp_path.rglob("*"):
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f"key leaked into {f.name}"


def test_missing_key_for_the_default_url_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    monkeypatch.delenv("NO_SUCH_URL_VAR", raising=False)
    with pytest.raises(BackendConfigError, match=r"\$NO_SUCH_KEY_VAR"):
        OpenAIBackend("gpt-4o", base_url_env="NO_SUCH_URL_VAR", api_key_env="NO_SUCH_KEY_VAR")


# -- option scoring from top log-probs (the REM's expected score on a remote judge) -------
LOGPROBS = {"0": math.log(0.1), "1": math.log(0.2), "2": math.log(0.6)}  # mass 0.9


@pytest.mark.slow
@pytest.mark.parametrize("continue_prefix", [False, True])
def test_option_probs_from_top_logprobs(monkeypatch, continue_prefix):
    with StubServer(reply="Comment: asks about the fever.\nScore: 2",
                    option_logprobs=LOGPROBS) as server:
        backend = _backend(server, monkeypatch, continue_prefix=continue_prefix)
        client = LLMClient("rem", backend, GenerationParams())
        (scores,) = client.option_scores(_msgs(1), ("0", "1", "2"), "Score: ")
    assert scores.mass == pytest.approx(0.9)
    assert scores.probs == pytest.approx({"0": 0.1 / 0.9, "1": 0.2 / 0.9, "2": 0.6 / 0.9})
    assert scores.expected() == pytest.approx((0.2 + 2 * 0.6) / 0.9)
    body = server.requests[0]
    assert body["logprobs"] is True and body["temperature"] == 0
    if continue_prefix:  # the prefix is continued: one token, read at once
        assert body["messages"][-1] == {"role": "assistant", "content": "Score: "}
        assert body["continue_final_message"] is True and body["max_tokens"] == 1
    else:                # asked plainly: the position after "Score:" is read
        assert body["messages"][-1]["role"] == "user" and body["max_tokens"] > 1


@pytest.mark.slow
def test_option_probs_without_the_prefix_in_the_answer_is_unusable(monkeypatch):
    """An answer that never writes 'Score:' gives zero mass, which the REM records as
    unusable (never as the uniform distribution's 1.0)."""
    from medpref.remscore.scorers import expected_judgement

    with StubServer(reply="I cannot rate this.", option_logprobs=LOGPROBS) as server:
        client = LLMClient("rem", _backend(server, monkeypatch), GenerationParams())
        (scores,) = client.option_scores(_msgs(1), ("0", "1", "2"), "Score: ")
    assert scores.mass == 0.0
    judged = expected_judgement("A", scores, None)
    assert judged.score is None and judged.unparsable == 1


@pytest.mark.slow
def test_option_probs_failure_after_retries_raises(monkeypatch):
    from medpref.llm.errors import BackendError

    with StubServer(always_fail=503, option_logprobs=LOGPROBS) as server:
        backend = _backend(server, monkeypatch, max_retries=1)
        with pytest.raises(BackendError, match="gave up after 2 attempts"):
            backend.option_probs(_msgs(1), ("0", "1", "2"), ["Score: "])


@pytest.mark.slow
def test_a_server_without_loop_controls_gets_none_and_the_cache_key_says_so(monkeypatch,
                                                                              tmp_path, caplog):
    controls = GenerationParams(repetition_penalty=1.3, no_repeat_ngram_size=3)
    cache = ResponseCache(tmp_path / "c.sqlite")
    with StubServer() as server:
        on = LLMClient("policy", _backend(server, monkeypatch), controls)
        on.chat(_msgs(1)[0], CALL)
        assert server.requests[-1]["repetition_penalty"] == 1.3   # vLLM-style extra_body
        off = LLMClient("policy", _backend(server, monkeypatch, loop_controls=False),
                        controls, cache=cache)
        with caplog.at_level("WARNING"):
            off.chat_many(_msgs(2), CALL)
            off.chat(_msgs(3)[2], CALL)
    sent = server.requests[-3:]
    assert all("repetition_penalty" not in r and "no_repeat_ngram_size" not in r for r in sent)
    told = [r for r in caplog.records if "takes no loop controls" in r.getMessage()]
    assert len(told) == 1 and "repetition_penalty 1.3" in told[0].getMessage()
    # the cached answer is keyed as what ran: a call without controls finds it
    plain = LLMClient("policy", _backend(server, monkeypatch), GenerationParams(), cache=cache)
    assert plain.chat(_msgs(1)[0], CALL).cached


def test_the_server_param_reaches_the_backend(monkeypatch):
    from medpref.llm.session import LLMSession
    from medpref.params import SharedParams

    monkeypatch.setenv("MEDPREF_TEST_URL", "http://127.0.0.1:9/v1")
    shared = SharedParams.model_validate({"llm": {
        "servers": {"serve": {"base_url_env": "MEDPREF_TEST_URL", "loop_controls": False}},
        "roles": {"policy": {"backend": "openai", "model": "m", "server": "serve"}}}})
    assert LLMSession("t", shared).role("policy").backend.loop_controls is False


def test_a_served_role_refuses_a_lora_adapter_it_cannot_load(monkeypatch):
    """A server answers with the model it serves: an adapter on an openai role (stage 04's
    ``finetuned`` REM, a trained SP policy) would be dropped without a word and the base
    model's answers recorded as the adapter's."""
    from medpref.llm.errors import BackendConfigError
    from medpref.llm.session import LLMSession
    from medpref.params import SharedParams

    monkeypatch.setenv("MEDPREF_TEST_URL", "http://127.0.0.1:9/v1")
    shared = SharedParams.model_validate({"llm": {
        "servers": {"serve": {"base_url_env": "MEDPREF_TEST_URL"}},
        "roles": {"rem": {"backend": "openai", "model": "m", "server": "serve"}}}})
    session = LLMSession("t", shared)
    with pytest.raises(BackendConfigError, match=r"'m' on server 'serve' cannot take the LoRA "
                                                 r"adapter data/03_rem/rem_lora"):
        session.role("rem", adapter="data/03_rem/rem_lora")
    assert session.role("rem").model_id == "openai:m"   # without one it is served as before
