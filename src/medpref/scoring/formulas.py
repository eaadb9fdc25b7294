"""PLPF's scoring formulas (§2.3.3), as pure functions over plain numbers.

* Eq. 2 — a rule's score of a state is the mean of k REM judgements (or the expected
  score Σ k·p(k), which the scorer computes): :func:`mean_rule_score`.
* Eq. 4 — rule weights. ``avg``: every rule weighs 1 (the ablation "w_r = 1").
  ``dep``: a goal rule's weight is Π_{r'≺r} V_α^{t1}(v^{r'}) · Π_{r'→r} V_β^{t2}(v^{r'}),
  a constraint rule weighs γ: :func:`rule_weights`.
  Predecessors are the goal's *direct* predecessors as the flowchart lists them (the
  paper's r' ≺ r); a gap two steps back is already felt through the direct predecessor.
* Eq. 3 — a state's score is Σ_r w_r · v^r: :func:`state_score`.
* Eq. 1 — a candidate's score is v(h,c) + Σ_{i=1..n} d^i · v(h,c,…,u_i,a_i) over the states
  along its trajectory: :func:`trajectory_score`.

Everything here is deterministic arithmetic; the worked example of the issue is a test.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from medpref.rules import Flowchart

Weighting = Literal["avg", "dep"]


def step_value(x: float, threshold: float, below: float) -> float:
    """V_y^t(x): 1 when the rule is met to at least ``threshold``, else the penalty ``below``."""
    return 1.0 if x >= threshold else below


def mean_rule_score(samples: Sequence[float | None]) -> float | None:
    """Eq. 2: the mean of k REM judgements; unparsable ones (None) are left out.

    None when no judgement is usable: a missing score must never read as a 0.
    """
    usable = [s for s in samples if s is not None]
    return sum(usable) / len(usable) if usable else None


def goal_weight(flowchart: Flowchart, rule_id: str, scores: Mapping[str, float],
                alpha: float, beta: float, t1: float, t2: float) -> float:
    """Eq. 4 for one goal rule: penalised by unmet predecessors (α) and constraints (β)."""
    rule = flowchart[rule_id]
    weight = 1.0
    for pred in rule.predecessors:
        weight *= step_value(scores[pred], t1, alpha)
    for constraint in rule.constrained_by:
        weight *= step_value(scores[constraint], t2, beta)
    return weight


def rule_weights(flowchart: Flowchart, scores: Mapping[str, float], weighting: Weighting,
                 alpha: float = 0.1, beta: float = 0.8, gamma: float = 0.1,
                 t1: float = 1.0, t2: float = 1.0) -> dict[str, float]:
    """w_r for every rule of the flowchart, given the state's rule scores."""
    if weighting == "avg":
        return {r.id: 1.0 for r in flowchart.rules}
    if weighting != "dep":
        raise ValueError(f"unknown weighting '{weighting}' (avg | dep)")
    return {r.id: (goal_weight(flowchart, r.id, scores, alpha, beta, t1, t2)
                   if r.kind == "goal" else gamma)
            for r in flowchart.rules}


def state_score(scores: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """Eq. 3: Σ_r w_r · v^r over the rules that have a weight."""
    missing = set(weights) - set(scores)
    if missing:
        raise KeyError(f"no score for rule(s) {sorted(missing)}")
    return sum(weights[r] * scores[r] for r in weights)


def trajectory_score(state_scores: Sequence[float], discount: float) -> float:
    """Eq. 1: the first state (history + candidate) counts fully, the i-th later one by d^i."""
    if not state_scores:
        raise ValueError("a candidate needs at least its own state to be scored")
    return sum(discount ** i * v for i, v in enumerate(state_scores))
