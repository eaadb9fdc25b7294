"""Replay answers from the cache only and fails loudly on a miss."""

from __future__ import annotations

import pytest

from medpref.llm.client import LLMClient
from medpref.llm.errors import CacheMissError
from medpref.llm.replay import ReplayBackend
from medpref.llm.scripted import ScriptedBackend
from medpref.llm.types import CallSpec, GenerationParams

MSG = [{"role": "user", "content": "Is this rash infectious?"}]

CALL = CallSpec("judge", "", 256)  # the client's default budget, no prefix


def test_replay_serves_recorded_answers_and_fails_on_a_miss(cache):
    original = ScriptedBackend(lambda r: "recorded answer", name="gpt-x")
    LLMClient("judge", original, GenerationParams(), cache=cache).chat(MSG, CALL)

    replay = ReplayBackend({"backend": "scripted", "model": "gpt-x"})
    client = LLMClient("judge", replay, GenerationParams(), cache=cache)
    hit = client.chat(MSG, CALL)
    assert hit.cached and hit.text == "recorded answer"
    with pytest.raises(CacheMissError, match="not in the cache"):
        client.chat([{"role": "user", "content": "A question never asked"}], CALL)


def test_replay_of_another_model_misses(cache):
    LLMClient("judge", ScriptedBackend(lambda r: "x", name="gpt-x"), GenerationParams(),
              cache=cache).chat(MSG, CALL)
    client = LLMClient("judge", ReplayBackend({"backend": "scripted", "model": "gpt-y"}),
                       GenerationParams(), cache=cache)
    with pytest.raises(CacheMissError):
        client.chat(MSG, CALL)
