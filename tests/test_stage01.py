"""Stage 01 end to end on the embedded model: cold runs agree byte for byte; warm is free."""

from __future__ import annotations

import pytest

from conftest import with_budgets
from medpref.contracts import Dialogue, read_jsonl, write_jsonl
from medpref.llm import LLMSession
from medpref.llm.cache import ResponseCache
from medpref.params import load_params, repo_path
from medpref.sampling.build import build_unlabeled

pytestmark = pytest.mark.slow


def _run(tmp_path, cache_name: str, out_name: str):
    params = load_params()
    # small budgets: the subject is determinism and the cache, not the futures' length
    p = with_budgets(params.sampling.model_copy(update={"n_items": 3, "future_rounds": 2}),
                     continuation=32, patient_turn=16, doctor_turn=16)
    session = LLMSession("01_test", params.shared,
                         cache=ResponseCache(tmp_path / cache_name / "01.sqlite"))
    dialogues = read_jsonl(repo_path(p.dialogues), Dialogue)
    result = build_unlabeled(p, session.role(p.call("continuation").role), params.shared.seed,
                             dialogues, dialogues)
    out = tmp_path / out_name
    write_jsonl(out, result.items)
    write_jsonl(tmp_path / f"{out_name}.rejected", result.rejected)
    totals = session.ledger.totals()["total"]
    session.close()
    return out.read_bytes() + (tmp_path / f"{out_name}.rejected").read_bytes(), totals


def test_two_cold_runs_are_identical_and_a_warm_run_makes_no_calls(tmp_path, embedded_llm_path):
    cold_a, ledger_a = _run(tmp_path, "cache_a", "a.jsonl")
    cold_b, ledger_b = _run(tmp_path, "cache_b", "b.jsonl")
    assert cold_a == cold_b
    assert ledger_a["calls"] >= 3 and ledger_a["cache_hits"] == 0
    warm, ledger_warm = _run(tmp_path, "cache_a", "c.jsonl")
    assert warm == cold_a
    assert ledger_warm["calls"] == 0
    assert ledger_warm["cache_hits"] == ledger_a["calls"] + ledger_a["cache_hits"]
