"""The REM's independent test (issue 40 item 2): turns no construction made, labelled blind."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import yaml

from medpref import REPO_ROOT

PATH = REPO_ROOT / "data/embedded/rem/independent.jsonl"
RULES = "ABCDEF"


def rows() -> list[dict]:
    return [json.loads(line) for line in PATH.read_text(encoding="utf-8").splitlines()]


def test_the_committed_items_are_the_seeded_draw_from_the_committed_records():
    out = subprocess.run([sys.executable, "scripts/rem_independent_items.py", "--check"],
                         cwd=REPO_ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_sizes_sources_and_labels():
    data = rows()
    kinds = Counter((r["source"].get("draw", 1), r["source"]["kind"]) for r in data)
    assert kinds == {(1, "model_heldout"): 120, (1, "model_sp"): 80, (1, "human_eval"): 100,
                     (2, "model_heldout"): 120, (2, "model_sp"): 80, (2, "human_eval"): 36,
                     (3, "model_heldout"): 120, (3, "model_sp"): 120,
                     (4, "model_heldout"): 65, (4, "model_sp"): 120,
                     (5, "model_heldout"): 40, (5, "model_sp"): 40}
    turns = [r["turn"] for r in data if r["source"].get("draw", 1) > 1]
    first = {r["turn"] for r in data if r["source"].get("draw", 1) == 1}
    assert not first & set(turns)                            # no turn in two draws
    assert len(set(turns)) == len(turns)
    # the third draw's SP turns are the test cases' only (the other cases' train the REM)
    test_cases = set(yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
                     ["rem"]["turns"]["sp_test_cases"])
    third_sp = {r["source"]["case"] for r in data
                if r["source"].get("draw") == 3 and r["source"]["kind"] == "model_sp"}
    assert third_sp and third_sp <= test_cases
    for r in data:
        assert set(r["labels"]["l1"]) == set(RULES), r["id"]
        assert all(v in (0, 1, 2) for v in r["labels"]["l1"].values()), r["id"]
        assert r["history"] == [] or r["history"][-1]["role"] == "patient", r["id"]
    second = [r for r in data if "l2" in r["labels"]]
    assert Counter(r["source"].get("draw", 1) for r in second) == {1: 60, 2: 59, 3: 60, 4: 60,
                                                                   5: 40}
    assert all(set(r["labels"]["l2"]) == set(RULES) for r in second)


def test_human_turns_come_from_eval_dialogues_only():
    split = yaml.safe_load((REPO_ROOT / "data/embedded/dialogue_split.yaml").read_text())
    dialogues = {r["source"]["dialogue"] for r in rows() if r["source"]["kind"] == "human_eval"}
    assert dialogues and dialogues <= set(split["eval"])


def test_every_label_has_all_three_scores_somewhere_except_where_the_set_has_none():
    """The set is not degenerate: on every rule at least two labels occur."""
    data = rows()
    for rule in RULES:
        assert len({r["labels"]["l1"][rule] for r in data}) >= 2, rule


def check_a_later_draw(number: int, second: int) -> list[dict]:
    """Draw ``number`` (stage 03's set ``independent_<number>``): its rows come after every
    earlier draw's, no turn of an earlier draw or of a labelled training file, SP turns of
    the test cases only, l1 on every row and l2 on ``second``; returns its rows."""
    data = rows()
    mine = [r for r in data if r["source"].get("draw", 1) == number]
    assert [r["source"].get("draw", 1) for r in data] == sorted(
        r["source"].get("draw", 1) for r in data)            # the draws come in order
    taken = {r["turn"] for r in data if r["source"].get("draw", 1) < number}
    for name in ("real_turns", "train_turns", "sp_turns"):
        taken |= {json.loads(line)["turn"] for line in (REPO_ROOT / "data/embedded/rem" /
                  f"{name}.jsonl").read_text(encoding="utf-8").splitlines()}
    turns = [r["turn"] for r in mine]
    assert len(set(turns)) == len(turns) and not taken & set(turns)
    test_cases = set(yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
                     ["rem"]["turns"]["sp_test_cases"])
    assert {r["source"]["case"] for r in mine if r["source"]["kind"] == "model_sp"} <= test_cases
    assert {r["source"]["kind"] for r in mine} == {"model_heldout", "model_sp"}
    assert all(set(r["labels"]["l1"]) == set(RULES) for r in mine)
    assert sum("l2" in r["labels"] for r in mine) == second
    return mine


def test_the_fourth_draw_is_new_turns_of_the_test_cases_with_two_labellers():
    """Draw 4 (after draws 1–3): l2 on 60 of its rows."""
    check_a_later_draw(4, second=60)


def test_the_fifth_draw_is_new_turns_of_the_retrained_policies_after_draw_four():
    """Draw 5 (the retrained process-feedback policies' turns, after draw 4): 80 rows, the
    file's last, l2 on a seeded 40."""
    five = check_a_later_draw(5, second=40)
    assert len(five) == 80 and rows()[-80:] == five


def test_kappa_from_agreement_tables_equals_scikit_learn_and_its_bootstrap():
    """kappa_interval's summed-table κ is scikit-learn's κ, on the whole set and on each
    bootstrap resample (the same seeded resamples the row-by-row loop drew)."""
    import math
    import random

    import numpy as np
    import pytest
    from sklearn.metrics import cohen_kappa_score

    from medpref.rem.independent import cohen_kappa, kappa_interval

    rng = random.Random(3)
    by_row = [[(rng.choice([0, 0, 1, 2]), rng.choice([0, 1, 2, 2]))
               for _ in range(rng.randint(0, 6))] for _ in range(40)]
    flat = [p for row in by_row for p in row]
    a, b = zip(*flat)
    assert cohen_kappa(flat) == pytest.approx(cohen_kappa_score(a, b, labels=[0, 1, 2]))
    assert math.isnan(cohen_kappa([(2, 2), (2, 2)])) and math.isnan(cohen_kappa([]))
    got = kappa_interval(by_row, 200, 7)
    draws, boots = np.random.default_rng(7), []
    for _ in range(200):
        pick = draws.integers(0, len(by_row), size=len(by_row))
        x = [p for i in pick for p in by_row[i]]
        if len({v for pair in x for v in pair}) > 1:
            boots.append(cohen_kappa_score(*zip(*x), labels=[0, 1, 2]))
    lo, hi = np.quantile(boots, [0.025, 0.975])
    assert (got["lo"], got["hi"]) == pytest.approx((lo, hi))
    assert got["kappa"] == pytest.approx(cohen_kappa_score(a, b, labels=[0, 1, 2]))


def test_stage_03_scores_each_draw_as_its_own_set_with_its_own_record_file():
    """Every draw of rem.independent is an evaluation set of stage 03 (``independent``,
    ``independent_2`` …, draw 5 ``independent_5``) and has a declared record file."""
    from medpref.rem.independent import independent_set_name
    from medpref.rem.outputs import INDEPENDENT_SETS

    names = [independent_set_name(d) for d in sorted({r["source"].get("draw", 1)
                                                       for r in rows()})]
    assert names == ["independent", "independent_2", "independent_3", "independent_4",
                     "independent_5"]
    assert set(names) <= set(INDEPENDENT_SETS)
