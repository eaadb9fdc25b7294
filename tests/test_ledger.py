"""The ledger tallies model use; the budget guard stops a stage before it overspends."""

from __future__ import annotations

import json

import pytest

from medpref.llm.client import LLMClient
from medpref.llm.errors import BudgetExceededError
from medpref.llm.ledger import Ledger, Price
from medpref.llm.scripted import ScriptedBackend
from medpref.llm.types import CallSpec, GenerationParams

MSG = [{"role": "user", "content": "word " * 400}]  # ≈ 400 tokens by the estimate

CALL = CallSpec("judge", "", 100)


def _client(cache, max_cost, price):
    backend = ScriptedBackend(lambda r: "short answer")
    ledger = Ledger("04_test", max_cost_usd=max_cost)
    return LLMClient("judge", backend, GenerationParams(), cache=cache,
                     ledger=ledger, price=price), backend


def test_budget_guard_refuses_before_calling(cache):
    # estimate ≈ (≈500 in × $10 + 100 out × $30) / 1e6 ≈ $0.008 > $0.001
    client, backend = _client(cache, 0.001, Price(10.0, 30.0))
    with pytest.raises(BudgetExceededError, match="04_test.*judge.*budget"):
        client.chat(MSG, CALL)
    assert backend.requests == []


def test_cache_hits_cost_nothing_and_are_never_refused(cache):
    client, backend = _client(cache, 1.0, Price(10.0, 30.0))
    client.chat(MSG, CALL)
    spent = client.ledger.spent_usd
    assert spent > 0
    client.ledger.max_cost_usd = spent  # no room left for new calls ...
    assert client.chat(MSG, CALL).cached  # ... but a hit needs none
    with pytest.raises(BudgetExceededError):
        client.chat([{"role": "user", "content": "a new question"}], CALL)


def test_ledger_totals_and_file(cache, tmp_path):
    client, _ = _client(cache, None, Price(1.0, 2.0))
    client.chat_many([MSG, [{"role": "user", "content": "other"}], MSG], CALL)
    totals = client.ledger.write(tmp_path / "ledger.json")
    assert json.loads((tmp_path / "ledger.json").read_text()) == totals
    judge = totals["roles"]["judge"]
    assert judge["calls"] == 2 and judge["cache_hits"] == 1  # the repeat is asked once
    assert judge["tokens_out"] == 4  # "short answer" twice, by the scripted count
    expected = (judge["tokens_in"] * 1.0 + judge["tokens_out"] * 2.0) / 1e6
    assert judge["cost_usd"] == pytest.approx(expected)
