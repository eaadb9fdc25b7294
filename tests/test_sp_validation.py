"""Agreement of an SP grader with hand-graded items: splits, batches, κ, recall and
precision with case-clustered intervals (``medpref.simulation.validation``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from medpref.contracts import SPGradedItem, Turn
from medpref.simulation.grading import ItemGrade
from medpref.simulation.validation import (
    agreement_rows,
    disagreements,
    precision_of,
    recall_of,
    split_of,
)


def item(i, passed, case="sp-a", category="symptoms", tag="t", batch=None, split=None):
    return SPGradedItem(id=f"g{i}", case=case, category=category, item="fever", passed=passed,
                        tag=tag, batch=batch, split=split,
                        transcript=[Turn(role="patient", text="I feel hot."),
                                    Turn(role="doctor", text="Any fever?")])


def grade(g, passed):
    return ItemGrade(g.id, "graded", g.category, g.item, passed, "echo_aware",
                     evidence="Any fever?" if passed else None)


def test_split_of_reads_the_field_and_alternates_the_rest_within_tag():
    items = [item(1, True, tag="a"), item(2, True, tag="a", split="test"),
             item(3, True, tag="a"), item(4, False, tag="b"), item(5, False, tag="a")]
    # g2 keeps its field; g1, g3, g5 (tag a, no field) alternate; g4 starts tag b
    assert split_of(items) == {"g1": "dev", "g2": "test", "g3": "test", "g4": "dev",
                               "g5": "dev"}


def test_recall_and_precision_on_hand_counted_codes():
    # codes: 2·gold + predicted → 0 TN, 1 FP, 2 FN, 3 TP
    codes = np.array([3, 3, 2, 1, 0, 0], dtype=float)   # TP 2, FN 1, FP 1
    assert recall_of(codes) == pytest.approx(2 / 3)
    assert precision_of(codes) == pytest.approx(2 / 3)
    assert math.isnan(recall_of(np.array([0.0, 1.0])))        # no gold pass
    assert math.isnan(precision_of(np.array([0.0, 2.0])))     # no predicted pass


def test_rows_per_split_batch_and_category_with_case_clustered_intervals():
    gold = [True, True, True, False, False, False, True, False]
    pred = [True, True, False, True, False, False, True, False]
    cases = ["a", "a", "b", "b", "c", "c", "d", "d"]
    items = [item(i, g, case=c, batch="b2" if i >= 6 else None, split="test")
             for i, (g, c) in enumerate(zip(gold, cases))]
    grades = [grade(g, p) for g, p in zip(items, pred)]
    rows = {(r["split"], r["batch"], r["category"]): r
            for r in agreement_rows(items, grades, n_boot=300, seed=1)}
    assert {k[1] for k in rows} == {"all", "v1", "b2"}
    r = rows[("test", "all", "all")]
    # TP 3 (0,1,6), FN 1 (2), FP 1 (3), TN 3: recall 3/4, precision 3/4, p_o 6/8, p_e 1/2
    assert r["items"] == 8 and r["cases"] == 4
    assert r["recall"] == pytest.approx(0.75) and r["precision"] == pytest.approx(0.75)
    assert r["kappa"] == pytest.approx((0.75 - 0.5) / 0.5)
    for k in ("kappa", "recall", "precision"):
        assert r[f"{k}_lo"] <= r[k] <= r[f"{k}_hi"], k
    assert rows[("test", "b2", "all")]["items"] == 2
    assert rows[("test", "v1", "all")]["recall"] == pytest.approx(2 / 3)
    assert ("dev", "all", "all") not in rows        # every item is in the test half


def test_intervals_resample_whole_cases():
    """All items of one case: every case resample is the whole set, so the intervals
    collapse onto the estimate (an item bootstrap would spread them)."""
    gold = [True, True, False, False, True, False]
    pred = [True, False, False, True, True, False]
    items = [item(i, g, case="only", split="test") for i, g in enumerate(gold)]
    r = next(r for r in agreement_rows(items, [grade(g, p) for g, p in zip(items, pred)],
                                       n_boot=200, seed=0)
             if (r["split"], r["batch"], r["category"]) == ("test", "all", "all"))
    for k in ("kappa", "recall", "precision"):
        assert r[f"{k}_lo"] == pytest.approx(r[k]) == pytest.approx(r[f"{k}_hi"]), k


def test_disagreements_lists_only_the_asked_half():
    items = [item(1, True, split="dev"), item(2, False, split="dev"),
             item(3, True, split="test"), item(4, True, split="dev")]
    grades = [grade(items[0], False), grade(items[1], True), grade(items[2], False),
              grade(items[3], True)]
    table = disagreements(items, grades)
    assert list(table["id"]) == ["g1", "g2"]
    assert list(disagreements(items, grades, part="test")["id"]) == ["g3"]
