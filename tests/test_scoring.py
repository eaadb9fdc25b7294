"""PLPF's scoring formulas (Eqs. 1-4), trajectory states and pair selection."""

from __future__ import annotations

import pytest

from medpref.contracts import Candidate, Turn
from medpref.rules.flowchart import parse_rules
from medpref.scoring.formulas import (
    DepSettings,
    mean_rule_score,
    predecessors_of,
    rule_weights,
    state_score,
    step_value,
    trajectory_score,
)
from medpref.scoring.selection import compare_scores, top_n_by_margin
from medpref.scoring.trajectory import (
    candidate_states,
    complete_rounds,
    pair_length,
    states_available,
)

CRIT = {0: "no", 1: "partly", 2: "yes"}


def worked_flowchart():
    """The issue's example: A ≺ B ≺ C goals; D constrains B, C; E, F constrain A, B, C."""
    def rule(rid, kind, preds=(), by=()):
        return {"id": rid, "name": rid, "kind": kind, "text": rid, "criteria": CRIT,
                "predecessors": list(preds), "constrained_by": list(by)}
    return parse_rules([rule("A", "goal", (), ("E", "F")),
                        rule("B", "goal", ("A",), ("D", "E", "F")),
                        rule("C", "goal", ("B",), ("D", "E", "F")),
                        rule("D", "constraint"), rule("E", "constraint"),
                        rule("F", "constraint")])


V = {"A": 2, "B": 1, "C": 0, "D": 0.5, "E": 2, "F": 1.5}


def dep(t=1.0, predecessors="direct", **kw) -> DepSettings:
    """PLPF App. C's constants (the worked example), spelled out: there are no defaults."""
    values = dict(alpha=0.1, beta=0.8, gamma=0.1, t1=t, t2=t, predecessors=predecessors)
    return DepSettings(**{**values, **kw})


def test_worked_example_dep_weights():
    w = rule_weights(worked_flowchart(), V, "dep", dep())
    assert w == pytest.approx({"A": 1, "B": 0.8, "C": 0.8, "D": 0.1, "E": 0.1, "F": 0.1})


def test_worked_example_dep_and_avg_state_scores():
    fc = worked_flowchart()
    assert state_score(V, rule_weights(fc, V, "dep", dep())) == pytest.approx(3.2)
    assert state_score(V, rule_weights(fc, V, "avg")) == pytest.approx(7.0)
    # every predecessor is met in the worked example: the transitive reading agrees
    assert state_score(V, rule_weights(fc, V, "dep", dep(predecessors="transitive"))) == \
        pytest.approx(3.2)


def test_transitive_predecessors_count_a_for_c_direct_do_not():
    """A unmet, B met: directly only B is penalised; transitively C is too (A ≺ B ≺ C)."""
    fc = worked_flowchart()
    v = {"A": 0, "B": 2, "C": 1, "D": 2, "E": 2, "F": 2}  # every constraint met
    assert predecessors_of(fc, "C", "direct") == ["B"]
    assert predecessors_of(fc, "C", "transitive") == ["B", "A"]
    direct = rule_weights(fc, v, "dep", dep())
    transitive = rule_weights(fc, v, "dep", dep(predecessors="transitive"))
    assert direct == pytest.approx({"A": 1, "B": 0.1, "C": 1, "D": 0.1, "E": 0.1, "F": 0.1})
    assert transitive == pytest.approx({"A": 1, "B": 0.1, "C": 0.1, "D": 0.1, "E": 0.1,
                                        "F": 0.1})
    # Eq. 3 by hand: 0·1 + 2·0.1 + 1·w_C + 0.1·(2+2+2)
    assert state_score(v, direct) == pytest.approx(1.8)
    assert state_score(v, transitive) == pytest.approx(0.9)
    with pytest.raises(ValueError, match="predecessor reading"):
        predecessors_of(fc, "C", "closure")


def test_dep_weighting_needs_its_settings():
    with pytest.raises(ValueError, match="annotation.scoring"):
        rule_weights(worked_flowchart(), V, "dep")


def test_worked_example_trajectory_score():
    assert trajectory_score([3.2, 4.0, 5.0], 0.65) == pytest.approx(7.9125)
    assert trajectory_score([3.2], 0.65) == pytest.approx(3.2)  # length 1: the candidate alone


def test_unmet_predecessor_and_threshold_edges():
    fc = worked_flowchart()
    v = dict(V, A=0.9, D=1.0)  # A just below t1 → B gets α; D exactly at t2 → met
    w = rule_weights(fc, v, "dep", dep())
    assert w["B"] == pytest.approx(0.1)
    assert w["C"] == pytest.approx(1.0)
    # the follow-up's t = 0.5: A = 0.9 now counts as met
    assert rule_weights(fc, v, "dep", dep(t=0.5))["B"] == pytest.approx(1.0)
    assert step_value(1.0, 1.0, 0.3) == 1.0 and step_value(0.99, 1.0, 0.3) == 0.3


def test_mean_rule_score_ignores_unparsable_and_never_reads_zero():
    assert mean_rule_score([2, 1, None, 0, 2]) == pytest.approx(1.25)
    assert mean_rule_score([None, None]) is None


def test_state_score_needs_every_weighted_rule():
    with pytest.raises(KeyError, match="C"):
        state_score({"A": 1, "B": 1}, {"A": 1, "B": 1, "C": 1})
    with pytest.raises(ValueError, match="weighting"):
        rule_weights(worked_flowchart(), V, "sum")


def _turns(*roles):
    return [Turn(role=r, text=f"{r} {i}") for i, r in enumerate(roles)]


def test_trajectory_states_and_common_length():
    hist = _turns("patient")
    long = Candidate(response="c1", future=_turns("patient", "doctor", "patient", "doctor",
                                                  "patient", "doctor"), source="sampled")
    short = Candidate(response="c2", future=_turns("patient", "doctor", "patient"),
                      source="generated")
    assert complete_rounds(short.future) == 1 and states_available(long) == 4
    assert pair_length([long, short], 3) == 2  # the shorter future caps both
    assert pair_length([long, long], 3) == 3
    states = candidate_states(hist, long, 3)
    assert [len(s) for s in states] == [2, 4, 6]
    assert all(s[-1].role == "doctor" for s in states)
    assert states[0][-1].text == "c1" and states[2][-1].text == "doctor 3"
    with pytest.raises(ValueError):
        candidate_states(hist, short, 3)
    with pytest.raises(ValueError):
        pair_length([long], 0)


def test_tie_threshold_is_strict():
    assert compare_scores(5.0, 3.5, 1.0) == ("1", 1.5)
    assert compare_scores(3.0, 4.0, 1.0) == ("2", 1.0)  # exactly the threshold: not a tie
    assert compare_scores(3.0, 3.99, 1.0)[0] == "tie"


def test_top_n_keeps_widest_margins_in_input_order():
    recs = [("a", 1.2), ("b", 3.0), ("c", 2.0), ("d", 2.0), ("e", 1.0)]
    kept = top_n_by_margin(recs, 3, margin=lambda r: r[1], key=lambda r: r[0])
    assert kept == [("b", 3.0), ("c", 2.0), ("d", 2.0)]
    kept = top_n_by_margin(recs, 2, margin=lambda r: r[1], key=lambda r: r[0])
    assert kept == [("b", 3.0), ("c", 2.0)]  # equal margins broken by key, not arrival
    assert top_n_by_margin(recs, None, lambda r: r[1], lambda r: r[0]) == recs
