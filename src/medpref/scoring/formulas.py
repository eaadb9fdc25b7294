"""PLPF's scoring formulas (§2.3.3), as pure functions over plain numbers.

* Eq. 2 — a rule's score of a state is the mean of k REM judgements (or the expected
  score Σ k·p(k), which the scorer computes): :func:`mean_rule_score`.
* Eq. 4 — rule weights. ``avg``: every rule weighs 1 (the ablation "w_r = 1").
  ``dep``: a goal rule's weight is Π_{r'≺r} V_α^{t1}(v^{r'}) · Π_{r'→r} V_β^{t2}(v^{r'}),
  a constraint rule weighs γ: :func:`rule_weights`.
  Which r' ≺ r count is :attr:`DepSettings.predecessors`: ``direct`` — the predecessors
  the flowchart lists (the paper's example names only the direct link, "Rule A is a
  predecessor rule to Rule B"); ``transitive`` — every goal reachable backwards through
  them (A ≺ B ≺ C counts A for C too).
* Eq. 3 — a state's score is Σ_r w_r · v^r: :func:`state_score`.
* Eq. 1 — a candidate's score is v(h,c) + Σ_{i=1..n} d^i · v(h,c,…,u_i,a_i) over the states
  along its trajectory: :func:`trajectory_score`.

"Met" is read on the scorer's own scale: ``t1`` and ``t2`` are the thresholds of PLPF's
App. C on the 0–2 score, and :attr:`DepSettings.thresholds` may replace them per rule with
thresholds calibrated on the REM's development split (:mod:`medpref.scoring.thresholds`),
so that a scorer whose values never fall below 1 still gates. :func:`gates_closed` tells
whether Eq. 4 changed a state's weights at all (the linear sum: every goal weighing 1).

Everything here is deterministic arithmetic; the worked example of the issue is a test.
α, β, γ, t1, t2 and the predecessor reading have no defaults here: their one home is the
``annotation.scoring`` section of params.yaml.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from medpref.rules import Flowchart

Weighting = Literal["avg", "dep"]
Predecessors = Literal["direct", "transitive"]


@dataclass(frozen=True)
class DepSettings:
    """The constants of Eq. 4 (``annotation.scoring`` in params.yaml)."""

    alpha: float        # V_α: weight factor of an unmet predecessor
    beta: float         # V_β: weight factor of an unmet constraint
    gamma: float        # weight of every constraint rule
    t1: float           # a predecessor is met at v >= t1
    t2: float           # a constraint is met at v >= t2
    predecessors: Predecessors
    # per rule, the value at which that rule counts as met on the scorer's own scale
    # (calibrated on the REM's dev split); a rule not listed uses t1 or t2
    thresholds: Mapping[str, float] = field(default_factory=dict)

    def met_at(self, rule_id: str, default: float) -> float:
        """The threshold at which ``rule_id`` counts as met (its calibrated one, else
        ``default``: t1 for a predecessor, t2 for a constraint)."""
        return self.thresholds.get(rule_id, default)


def step_value(x: float, threshold: float, below: float) -> float:
    """V_y^t(x): 1 when the rule is met to at least ``threshold``, else the penalty ``below``."""
    return 1.0 if x >= threshold else below


def mean_rule_score(samples: Sequence[float | None]) -> float | None:
    """Eq. 2: the mean of k REM judgements; unparsable ones (None) are left out.

    None when no judgement is usable: a missing score must never read as a 0.
    """
    usable = [s for s in samples if s is not None]
    return sum(usable) / len(usable) if usable else None


def predecessors_of(flowchart: Flowchart, rule_id: str, reading: Predecessors) -> list[str]:
    """The r' ≺ r of one goal: as listed (``direct``) or their closure (``transitive``),
    in first-reached order."""
    if reading == "direct":
        return list(flowchart[rule_id].predecessors)
    if reading != "transitive":
        raise ValueError(f"unknown predecessor reading '{reading}' (direct | transitive)")
    seen: list[str] = []
    stack = list(flowchart[rule_id].predecessors)
    while stack:
        pred = stack.pop(0)
        if pred not in seen:
            seen.append(pred)
            stack += flowchart[pred].predecessors
    return seen


def goal_weight(flowchart: Flowchart, rule_id: str, scores: Mapping[str, float],
                s: DepSettings) -> float:
    """Eq. 4 for one goal rule: penalised by unmet predecessors (α) and constraints (β)."""
    weight = 1.0
    for pred in predecessors_of(flowchart, rule_id, s.predecessors):
        weight *= step_value(scores[pred], s.met_at(pred, s.t1), s.alpha)
    for constraint in flowchart[rule_id].constrained_by:
        weight *= step_value(scores[constraint], s.met_at(constraint, s.t2), s.beta)
    return weight


def gates_closed(flowchart: Flowchart, scores: Mapping[str, float],
                 s: DepSettings) -> list[str]:
    """The goal rules whose Eq. 4 weight is below 1 for these scores (an unmet predecessor
    or constraint): empty when ``dep`` is the linear sum Σ goals + γ Σ constraints."""
    return [r.id for r in flowchart.goals if goal_weight(flowchart, r.id, scores, s) < 1.0]


def rule_weights(flowchart: Flowchart, scores: Mapping[str, float], weighting: Weighting,
                 settings: DepSettings | None = None) -> dict[str, float]:
    """w_r for every rule of the flowchart, given the state's rule scores (``dep`` needs
    the Eq. 4 settings; ``avg`` ignores them)."""
    if weighting == "avg":
        return {r.id: 1.0 for r in flowchart.rules}
    if weighting != "dep":
        raise ValueError(f"unknown weighting '{weighting}' (avg | dep)")
    if settings is None:
        raise ValueError("dep weighting needs the Eq. 4 settings (annotation.scoring)")
    return {r.id: (goal_weight(flowchart, r.id, scores, settings)
                   if r.kind == "goal" else settings.gamma)
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
