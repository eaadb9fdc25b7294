"""scripts/paper_cost.py: scaling and pricing on hand values, and the committed run."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from script_module import script_module

ROOT = Path(__file__).resolve().parents[1]
pc = script_module("scripts/paper_cost.py")

PRICES = {"gpt-4o": {"input_per_1m": 2.5, "output_per_1m": 10.0},
          "gpt-4o-mini": {"input_per_1m": 0.15, "output_per_1m": 0.6}}


def _params(n_items, rounds, judge_backend, judge_model, samples_mode="auto"):
    return {
        "shared": {"llm": {"prices": PRICES, "roles": {
            "patient": {"backend": "openai", "model": "gpt-4o"},
            "rem": {"backend": "hf", "model": "models/tiny"},
            "judge": {"backend": judge_backend, "model": judge_model}}}},
        "sampling": {"n_items": n_items, "future_rounds": rounds},
        "imapscore": {"role": "judge", "extraction": {"mode": samples_mode, "samples": 3}},
    }


DEFAULT = _params(4, 2, "hf", "models/tiny")
PAPER = pc.deep_merge(DEFAULT, {"sampling": {"n_items": 40, "future_rounds": 3},
                                "shared": {"llm": {"roles": {"patient": {"backend": "openai",
                                                                          "model": "gpt-4o"},
                                                             "judge": {"backend": "openai",
                                                                       "model": "gpt-4o"}}}}})


def _driver(factor):
    return pc.Driver("stage", "reports/stage/ledger.json", ("stage",), "hand", factor)


def test_deep_merge_overrides_leaves_and_keeps_siblings():
    assert PAPER["sampling"] == {"n_items": 40, "future_rounds": 3}
    assert PAPER["shared"]["llm"]["roles"]["rem"] == {"backend": "hf", "model": "models/tiny"}
    assert DEFAULT["sampling"]["n_items"] == 4  # the base is not modified


def test_patient_rounds_scale_by_items_and_rounds_and_price_at_gpt4o():
    groups = {pc.Group("trajectory_patient", "chat", True): pc.GroupTokens(2, 200, 40),
              pc.Group("trajectory_continuation", "chat", False): pc.GroupTokens(5, 9999, 999)}
    est = pc.estimate_role(_driver(pc.sampling_factor), "patient",
                           {"calls": 1, "cache_hits": 3}, groups, DEFAULT, PAPER)
    # 4 requests x (40/4 items) x (3/2 rounds) = 60 calls of 100 in, 20 out
    assert est.default_requests == 4
    assert est.calls == pytest.approx(60)
    assert est.tokens_in == pytest.approx(6000)
    assert est.tokens_out == pytest.approx(1200)
    assert est.paid and est.model == "gpt-4o"
    assert est.cost_usd == pytest.approx((6000 * 2.5 + 1200 * 10.0) / 1e6)  # 0.027


def test_mixed_groups_sampled_extraction_and_paid_option_scores():
    groups = {pc.Group("imap_question", "chat", False): pc.GroupTokens(1, 100, 10),
              pc.Group("imap_relation", "options", False): pc.GroupTokens(3, 150, 0)}
    est = pc.estimate_role(_driver(pc.imap_factor), "judge",
                           {"calls": 0, "cache_hits": 8}, groups, DEFAULT, PAPER)
    # question: 8 x 1/4 x 3 samples = 6 calls; relation: 8 x 3/4 x 1 = 6 calls, 1 token out each
    assert est.calls == pytest.approx(12)
    assert est.tokens_in == pytest.approx(6 * 100 + 6 * 50)
    assert est.tokens_out == pytest.approx(6 * 10 + 6 * 1)
    assert est.cost_usd == pytest.approx((900 * 2.5 + 66 * 10.0) / 1e6)


def test_local_role_costs_nothing_and_option_scores_stay_zero_tokens_out():
    groups = {pc.Group("rem_judge", "options", False): pc.GroupTokens(2, 1000, 0)}
    est = pc.estimate_role(_driver(lambda d, p, g: pc.ratio(d, p, "sampling.n_items")), "rem",
                           {"calls": 2, "cache_hits": 0}, groups, DEFAULT, PAPER)
    assert (est.calls, est.tokens_in, est.tokens_out, est.cost_usd) == (20, 10000, 0, 0.0)
    assert not est.paid


def test_a_role_without_cached_requests_falls_back_to_its_ledger_tokens():
    est = pc.estimate_role(_driver(lambda d, p, g: 2.0), "patient",
                           {"calls": 4, "cache_hits": 0, "tokens_in": 400, "tokens_out": 80},
                           {}, DEFAULT, PAPER)
    assert (est.calls, est.tokens_in, est.tokens_out) == (8, 800, 160)
    assert est.notes


def test_ratio_of_null_sizes_and_unpriced_models():
    d = {"a": {"n": None}, "b": {"n": 3}}
    assert pc.ratio(d, d, "a.n") == 1.0
    with pytest.raises(ValueError, match="a.n"):
        pc.ratio(d, {"a": {"n": 5}}, "a.n")
    unpriced = pc.deep_merge(PAPER, {"shared": {"llm": {"roles": {
        "judge": {"backend": "openai", "model": "gpt-5"}}}}})
    with pytest.raises(ValueError, match="gpt-5"):
        pc.role_price(unpriced, "judge")


def test_read_cache_groups_requests_by_prompt_kind_and_sampling(tmp_path):
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    (prompts / "rem_judge.yaml").write_text("system: |-\n  You check rules.\n  {{fmt}}\n")
    (prompts / "imap_question.yaml").write_text("system: You extract imaps.\n")
    db = tmp_path / "stage.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE completions (key TEXT PRIMARY KEY, kind TEXT NOT NULL, "
                 "request TEXT NOT NULL, response TEXT NOT NULL, created REAL NOT NULL)")
    rows = [("k1", "chat", {"messages": [{"role": "system", "content": "You check rules.\nX"}],
                            "params": {"temperature": 0.7}}, {"tokens_in": 10, "tokens_out": 4}),
            ("k2", "chat", {"messages": [{"role": "system", "content": "You check  rules. Y"}],
                            "params": {"temperature": 0.7}}, {"tokens_in": 30, "tokens_out": 6}),
            ("k3", "options", {"messages": [{"role": "system", "content": "You check rules."}]},
             {"tokens_in": 7, "tokens_out": 0}),
            ("k4", "chat", {"messages": [{"role": "system", "content": "Other."}],
                            "params": {}}, {"tokens_in": 1, "tokens_out": 1})]
    conn.executemany("INSERT INTO completions VALUES (?, ?, ?, ?, 0)",
                     [(k, kind, json.dumps(q), json.dumps(r)) for k, kind, q, r in rows])
    conn.commit()
    conn.close()
    groups = pc.read_cache(db, pc.load_templates(prompts))
    assert groups[pc.Group("rem_judge", "chat", True)] == pc.GroupTokens(2, 40, 10)
    assert groups[pc.Group("rem_judge", "options", False)] == pc.GroupTokens(1, 7, 0)
    assert groups[pc.Group("unknown", "chat", False)] == pc.GroupTokens(1, 1, 1)
    assert pc.read_cache(tmp_path / "absent.sqlite", {}) == {}


def test_every_prompt_file_has_a_role_read_from_the_params():
    import yaml

    names = {p.stem for p in (ROOT / "configs" / "prompts").glob("*.yaml")}
    roles = pc.prompt_roles(yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8")))
    assert names and names <= set(roles)
    assert roles["rem_judge"] == "rem" and roles["sp_count_diseases"] == "judge"
    assert roles["trajectory_patient"] == "patient" and roles["policy_doctor"] == "policy"
    assert len(pc.UNDER_TEST_ROLE) < len(roles) / 4   # most come from the params


def test_a_prompt_serving_two_roles_is_refused():
    params = {"a": {"calls": {"x": {"role": "judge", "prompt": "p"}}},
              "b": {"calls": {"y": {"role": "planner", "prompt": "p"}}}}
    with pytest.raises(ValueError, match="prompt p: role judge and planner"):
        pc.prompt_roles(params)


def _cache_with_one_judge_request(cache_dir: Path, tokens_in: int, tokens_out: int) -> None:
    """A stage-08 cache file holding one greedy ``medqa_judge`` request."""
    cache_dir.mkdir()
    literal = pc.load_templates(ROOT / "configs" / "prompts")["medqa_judge"]
    conn = sqlite3.connect(cache_dir / "08_medqa.sqlite")
    conn.execute("CREATE TABLE completions (key TEXT PRIMARY KEY, kind TEXT NOT NULL, "
                 "request TEXT NOT NULL, response TEXT NOT NULL, created REAL NOT NULL)")
    request = {"messages": [{"role": "system", "content": literal + " the item"}],
               "params": {"temperature": 0.0}}
    conn.execute("INSERT INTO completions VALUES ('k', 'chat', ?, ?, 0)",
                 (json.dumps(request), json.dumps({"tokens_in": tokens_in,
                                                   "tokens_out": tokens_out})))
    conn.commit()
    conn.close()


def test_main_on_the_committed_ledgers(tmp_path, capsys):
    """Every committed ledger is read; a role's tokens come from its cached requests
    (a synthetic stage-08 cache here, so the check runs on a fresh clone as well)."""
    cache = tmp_path / "llm"
    _cache_with_one_judge_request(cache, tokens_in=200, tokens_out=3)
    stages = pc.main(["--cache-dir", str(cache)])
    out = capsys.readouterr().out
    total = stages[-1]
    assert total["stage"] == "total" and "total" in out
    assert total["calls"] > sum(1 for _ in pc.DRIVERS)
    assert total["calls"] == pytest.approx(sum(s["calls"] for s in stages[:-1]))
    assert total["tokens_in"] > 0 and total["cost_usd"] > 0

    default, paper = pc.load_settings(ROOT, None, None)
    judge = next(r for r in pc.estimate(ROOT, cache, default, paper)
                 if r.source == "08_medqa" and r.role == "judge")
    ledger = pc.read_ledger(ROOT / "reports/08_medqa/ledger.json")["judge"]
    assert judge.default_requests == ledger["calls"] + ledger["cache_hits"] > 0
    assert judge.calls > 0 and not judge.notes  # from the cache, not the ledger's tokens
    assert judge.tokens_in == pytest.approx(judge.calls * 200)
    assert judge.tokens_out == pytest.approx(judge.calls * 3)
    _, price = pc.role_price(paper, "judge")
    assert judge.cost_usd == pytest.approx(
        judge.calls * (200 * price["input_per_1m"] + 3 * price["output_per_1m"]) / 1e6)
