"""scripts/sp_read_credits.py: the credits a blind reader found earned, per doctor (issue 41)."""

from __future__ import annotations

import importlib.util

from medpref import REPO_ROOT

spec = importlib.util.spec_from_file_location("sp_read_credits",
                                              REPO_ROOT / "scripts" / "sp_read_credits.py")
src = importlib.util.module_from_spec(spec)
spec.loader.exec_module(src)


def _g(doctor, case, item, passed, category="symptoms"):
    return {"doctor": doctor, "case": case, "category": category, "item": item,
            "passed": passed}


def test_credits_read_real_missed_and_the_read_share_by_hand():
    grades = [_g("d", "c1", "cough", True), _g("d", "c1", "fever", True),
              _g("d", "c1", "rash", False), _g("d", "c1", "pain", False),
              _g("d", "c2", "cough", False), _g("d", "c2", "fever", False)]
    secret = [{"id": "p1", "doctor": "d", "case": "c1", "category": "symptoms",
               "item": "cough", "credited": True},
              {"id": "p2", "doctor": "d", "case": "c1", "category": "symptoms",
               "item": "fever", "credited": True},
              {"id": "p3", "doctor": "d", "case": "c1", "category": "symptoms",
               "item": "rash", "credited": False},
              {"id": "p4", "doctor": "d", "case": "c2", "category": "symptoms",
               "item": "cough", "credited": False}]
    labels = [{"id": "p1", "gold": True}, {"id": "p2", "gold": False},
              {"id": "p3", "gold": True}, {"id": "p4", "gold": False}]
    sym = next(r for r in src.read_counts(grades, secret, labels) if r["metric"] == "Sym.")
    assert (sym["credits"], sym["read"], sym["real"], sym["missed"]) == (2, 2, 1, 1)
    # c1: cough and rash earned of 4 items; c2: none of 2 → mean of 0.5 and 0
    assert sym["read_%"] == 25.0


def test_the_committed_batch_reads_every_credit_of_its_run():
    rows = src.read_counts(src._jsonl(REPO_ROOT / src.RECORDS / "grades.jsonl"),
                           *(src._jsonl(REPO_ROOT / "data/embedded/sp_run_batches/run-72d0bfb"
                                        / f) for f in ("grader_pairs_SECRET.jsonl",
                                                       "grader_pairs_labels.jsonl")))
    assert sum(r["credits"] for r in rows) == sum(r["read"] for r in rows) == 68
    assert sum(r["real"] for r in rows) == 25
    cai_dep = next(r for r in rows if r["doctor"] == "cai_dep" and r["metric"] == "Sym.")
    assert (cai_dep["credits"], cai_dep["real"]) == (18, 2)
