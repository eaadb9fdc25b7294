"""Eq. 4 on the scorer's own scale: calibrated "met" thresholds, and gating that acts."""

from __future__ import annotations

import pandas as pd
import pytest

from medpref.annotation import cai
from medpref.annotation.config import ScoringConfig
from medpref.annotation.pairs import Decision
from medpref.scoring.formulas import gates_closed, rule_weights, state_score
from medpref.scoring.thresholds import (
    calibrate_met_threshold,
    load_thresholds,
    threshold_rows,
)
from test_scoring import dep, worked_flowchart


def scoring(**kw) -> ScoringConfig:
    values = dict(alpha=0.1, beta=0.8, gamma=0.1, discount=0.65, t1=1.0, t2=1.0,
                  predecessors="direct", tie_threshold=1.0, top_n=None)
    return ScoringConfig(**{**values, **kw})


# -- a scorer that never drops below 1 never gates at t = 1.0; its own cut does -----------
NEVER_BELOW_ONE = {"A": 1.2, "B": 1.6, "C": 1.1, "D": 1.9, "E": 1.8, "F": 1.05}


def test_fixed_paper_thresholds_never_gate_a_scorer_that_never_says_0():
    fc = worked_flowchart()
    assert gates_closed(fc, NEVER_BELOW_ONE, dep()) == []
    linear = {"A": 1, "B": 1, "C": 1, "D": 0.1, "E": 0.1, "F": 0.1}
    assert rule_weights(fc, NEVER_BELOW_ONE, "dep", dep()) == pytest.approx(linear)


def test_a_calibrated_threshold_closes_the_gate_and_changes_the_state_score():
    fc = worked_flowchart()
    calibrated = dep(thresholds={"A": 1.5, "F": 1.3})    # A and F unmet on their own scale
    assert gates_closed(fc, NEVER_BELOW_ONE, calibrated) == ["A", "B", "C"]
    w = rule_weights(fc, NEVER_BELOW_ONE, "dep", calibrated)
    # A: F unmet (β); B: A unmet (α) and F unmet (β); C: F unmet (β), B met (1.6 ≥ t1 = 1)
    assert w == pytest.approx({"A": 0.8, "B": 0.1 * 0.8, "C": 0.8, "D": 0.1, "E": 0.1,
                               "F": 0.1})
    by_hand = 1.2 * 0.8 + 1.6 * 0.08 + 1.1 * 0.8 + 0.1 * (1.9 + 1.8 + 1.05)
    assert state_score(NEVER_BELOW_ONE, w) == pytest.approx(by_hand)
    open_gates = rule_weights(fc, NEVER_BELOW_ONE, "dep", dep())
    assert state_score(NEVER_BELOW_ONE, w) < state_score(NEVER_BELOW_ONE, open_gates)


def test_calibration_finds_the_cut_with_the_best_balanced_accuracy():
    # gold 0 at values 1.0-1.2, gold ≥ 1 at 1.4-1.9: every value ≥ 1, the cut lies between
    values = [1.0, 1.1, 1.2, 1.4, 1.5, 1.9, 1.6]
    gold = [0, 0, 0, 1, 2, 2, 1]
    cal = calibrate_met_threshold(values, gold)
    assert cal.threshold == pytest.approx(1.3)
    assert cal.balanced_accuracy == pytest.approx(1.0)
    assert (cal.n, cal.n_not_met) == (7, 3)


def test_calibration_breaks_ties_towards_the_papers_one_and_skips_one_class_splits():
    # cuts 0.3 and 1.9 both reach balanced accuracy 0.75: the one nearer 1.0 wins
    cal = calibrate_met_threshold([0.0, 0.6, 1.8, 2.0], [0, 1, 0, 1])
    assert cal.balanced_accuracy == pytest.approx(0.75)
    assert cal.threshold == pytest.approx(0.3)
    imperfect = calibrate_met_threshold([0.2, 0.4, 1.2, 0.9], [0, 1, 1, 0])
    assert imperfect.balanced_accuracy == pytest.approx(0.75)
    assert calibrate_met_threshold([1.0, 2.0], [2, 1]).threshold is None
    assert calibrate_met_threshold([float("nan"), 1.0, 0.0], [0, 1, 0]).n == 2


def test_threshold_rows_round_trip_through_the_table(tmp_path):
    dev = pd.DataFrame({"rule": ["A"] * 4 + ["B"] * 2, "value": [0.2, 0.4, 1.5, 1.7, 1.0, 2.0],
                        "gold": [0, 0, 2, 1, 2, 2]})
    path = tmp_path / "thresholds.csv"
    pd.DataFrame(threshold_rows("encoder", dev)).to_csv(path, index=False)
    assert load_thresholds(path, "encoder") == {"A": pytest.approx(0.95)}   # B: one class
    with pytest.raises(ValueError, match="no thresholds for REM scorer 'lora'"):
        load_thresholds(path, "lora")


def test_the_scoring_config_carries_thresholds_and_its_linear_reading_opens_every_gate():
    s = scoring(met="rem_dev").with_thresholds({"A": 1.5})
    assert s.dep_settings().thresholds == {"A": 1.5}
    lin = s.linear()
    assert lin.thresholds == {} and (lin.t1, lin.t2) == (0.0, 0.0)
    fc = worked_flowchart()
    assert gates_closed(fc, {r: 0.0 for r in "ABCDEF"}, lin.dep_settings()) == []
    with pytest.raises(ValueError):
        scoring(met="sometimes")


def test_gating_summary_counts_gated_states_and_changed_decisions():
    rows = [{"state_key": "s1", "gates_closed": ["B"]},
            {"state_key": "s1", "gates_closed": ["B"]},          # the same state twice
            {"state_key": "s2", "gates_closed": []},
            {"state_key": "s3", "gates_closed": None}]            # unscored: not counted
    dep = [Decision("i1", "cai_dep", "1", 1.5), Decision("i2", "cai_dep", "tie", 0.2)]
    lin = [Decision("i1", "linear", "2", 1.2), Decision("i2", "linear", "tie", 0.2)]
    out = cai.gating_summary(rows, dep, lin)
    assert out["states"] == 2 and out["states_gated"] == 1
    assert out["gate_closed_per_goal"] == {"B": 1}
    assert (out["items_score_changed"], out["items_outcome_changed"]) == (1, 1)
