"""The content-addressed cache: hits, misses, what the key is sensitive to, persistence."""

from __future__ import annotations

import multiprocessing as mp

import pytest

from medpref.llm.cache import ResponseCache, request_key
from medpref.llm.client import LLMClient
from medpref.llm.ledger import Ledger
from medpref.llm.scripted import ScriptedBackend
from medpref.llm.types import CallSpec, GenerationParams

MSG = [{"role": "user", "content": "How long has the cough lasted?"}]

CALL = CallSpec("judge", "", 256)  # the client's default budget, no prefix


def test_second_identical_call_is_a_hit(scripted_client):
    client = scripted_client()
    first = client.chat(MSG, CALL)
    second = client.chat(MSG, CALL)
    assert not first.cached and second.cached
    assert second.text == first.text
    assert len(client.backend.requests) == 1
    tally = client.ledger.totals()["roles"]["judge"]
    assert tally["calls"] == 1 and tally["cache_hits"] == 1


def test_changed_prompt_misses(scripted_client):
    client = scripted_client()
    client.chat(MSG, CALL)
    client.chat([{"role": "user", "content": "How long has the cough lasted ?"}], CALL)
    assert len(client.backend.requests) == 2


def test_generation_settings_and_prefix_are_in_the_key(scripted_client):
    client = scripted_client()
    client.chat(MSG, CALL.but(max_new_tokens=10))
    client.chat(MSG, CALL.but(max_new_tokens=11))
    client.chat(MSG, CALL.but(max_new_tokens=11, answer_prefix="Doctor:"))
    assert len(client.backend.requests) == 3


def test_sampled_calls_are_keyed_by_seed_greedy_ones_are_not(scripted_client):
    client = scripted_client()
    client.chat(MSG, CALL, temperature=0.7, seed=1)
    client.chat(MSG, CALL, temperature=0.7, seed=2)
    client.chat(MSG, CALL, temperature=0.7, seed=1)  # hit
    assert len(client.backend.requests) == 2
    client.chat(MSG, CALL, seed=1)
    client.chat(MSG, CALL, seed=2)  # greedy: the seed plays no part, so a hit
    assert len(client.backend.requests) == 3


def test_sampled_call_without_seed_is_refused(scripted_client):
    client = scripted_client()
    try:
        client.chat(MSG, CALL, temperature=0.7)
    except ValueError as exc:
        assert "seed" in str(exc)
    else:
        raise AssertionError("a sampled call without a seed must not be cached or made")


def test_backend_identity_is_in_the_key():
    base = {"kind": "chat", "messages": MSG, "params": {"max_new_tokens": 5, "stop": []}}
    a = request_key({**base, "backend": "hf", "model": "m1"})
    b = request_key({**base, "backend": "hf", "model": "m2"})
    c = request_key({**base, "backend": "openai", "model": "m1"})
    assert len({a, b, c}) == 3


def test_cache_persists_and_siblings_are_read(tmp_path):
    backend = ScriptedBackend(lambda r: "answer")
    first = ResponseCache(tmp_path / "stage_a.sqlite")
    LLMClient("r", backend, GenerationParams(), cache=first).chat(MSG, CALL)
    first.close()
    second = ResponseCache(tmp_path / "stage_b.sqlite")  # another stage's file
    comp = LLMClient("r", backend, GenerationParams(), cache=second).chat(MSG, CALL)
    assert comp.cached and len(backend.requests) == 1
    assert len(second) == 0  # a hit in a sibling is not copied


def test_failed_calls_are_not_cached(cache):
    from medpref.llm.types import Completion

    class Failing(ScriptedBackend):
        def generate(self, requests, on_complete=None):
            out = [Completion(text="", error="boom") for _ in requests]
            for i, c in enumerate(out):
                on_complete(i, c)
            return out

    backend = Failing(lambda r: "")
    client = LLMClient("r", backend, GenerationParams(), cache=cache, ledger=Ledger("t"))
    assert client.chat(MSG, CALL).error == "boom"
    assert len(cache) == 0
    assert client.ledger.totals()["total"]["failures"] == 1


def test_duplicate_requests_in_one_batch_are_asked_once(scripted_client):
    client = scripted_client()
    out = client.chat_many([MSG, MSG, MSG], CALL)
    assert [c.text for c in out] == [out[0].text] * 3
    assert len(client.backend.requests) == 1


def _write_many(path: str, start: int) -> None:
    cache = ResponseCache(path, read_siblings=False)
    for i in range(start, start + 50):
        cache.put(f"k{i}", "chat", {"i": i}, {"text": str(i)})
    cache.close()


def test_concurrent_writer_processes(tmp_path):
    path = str(tmp_path / "shared.sqlite")
    ResponseCache(path).close()
    procs = [mp.get_context("spawn").Process(target=_write_many, args=(path, s))
             for s in (0, 50, 100)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    cache = ResponseCache(path)
    assert len(cache) == 150
    assert cache.get("k123") == {"text": "123"}


def test_a_calls_budget_and_prefix_come_from_its_spec_only(scripted_client):
    client = scripted_client(max_new_tokens=99)   # a client default is not the budget
    client.chat(MSG, CallSpec("judge", "", 7, answer_prefix="Doctor:"))
    req = client.backend.requests[-1]
    assert (req.params.max_new_tokens, req.prefix) == (7, "Doctor:")
    with pytest.raises(TypeError, match="max_new_tokens"):
        client.chat(MSG, CALL, max_new_tokens=5)   # no second way to set it


def test_a_cached_option_score_comes_back_in_the_options_order(cache):
    # the cache stores key-sorted JSON; a hit must read like the fresh call it replaces, so
    # a warm rerun writes the same records as a cold one
    options = [" exact", " belonging", " containment", " unmatched"]
    backend = ScriptedBackend(lambda r: "", option_responder=lambda p, opts, pre: {
        o: 0.1 * (k + 1) for k, o in enumerate(opts)})
    fresh = LLMClient("r", backend, GenerationParams(), cache=cache).option_scores(
        [MSG], options, "Answer:")[0]
    warm = LLMClient("r", ScriptedBackend(lambda r: ""), GenerationParams(),
                     cache=cache).option_scores([MSG], options, "Answer:")[0]
    assert warm.cached and not fresh.cached
    assert list(fresh.probs) == options and list(warm.probs) == options
    assert warm.probs == fresh.probs
