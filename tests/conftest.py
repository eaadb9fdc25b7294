"""Shared fixtures. Tests run offline on CPU; the embedded models come from `make setup`."""

from __future__ import annotations

import pytest

from medpref import REPO_ROOT
from medpref.llm.cache import ResponseCache
from medpref.llm.client import LLMClient
from medpref.llm.ledger import Ledger
from medpref.llm.scripted import ScriptedBackend
from medpref.llm.types import GenerationParams

EMBEDDED_LLM = REPO_ROOT / "models" / "smollm2-135m-instruct"


@pytest.fixture
def cache(tmp_path):
    c = ResponseCache(tmp_path / "cache" / "test.sqlite")
    yield c
    c.close()


@pytest.fixture
def scripted_client(cache):
    """A client over a backend that answers 'echo: <last message>' and counts requests."""

    def make(responder=None, role="judge", **defaults):
        backend = ScriptedBackend(responder or (lambda r: "echo: " + r.messages[-1]["content"]))
        return LLMClient(role, backend, GenerationParams(**defaults), cache=cache,
                         ledger=Ledger("test"))

    return make


@pytest.fixture(scope="session")
def embedded_llm_path():
    if not (EMBEDDED_LLM / "model.safetensors").exists():
        pytest.fail("the embedded model is missing: run `make setup` (it prepares models/)")
    return EMBEDDED_LLM
