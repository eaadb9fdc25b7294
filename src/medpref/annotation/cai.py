"""CAI ranking (PLPF §2.3.3; the follow-up's Constitutional AI ranking).

Every state along each candidate's trajectory is scored by the REM against every rule,
once: states are deduplicated here and the scorer's model calls go through the stage's
cache, so the avg and dep strategies — and every cell of the ablation grid — share them.
The rule scores are then weighted (Eq. 4, ``avg`` or ``dep``), summed (Eq. 3) and
discounted along the trajectory (Eq. 1); the two candidates' scores decide the pair.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

from medpref.annotation.config import ScoringConfig
from medpref.annotation.pairs import Decision, decision_for, pair_from_winner
from medpref.contracts import PreferencePair, Turn, UnlabeledItem, turns_to_messages
from medpref.remscore.base import RuleJudgement, RuleScorer
from medpref.rules import Flowchart
from medpref.scoring.formulas import (
    Weighting,
    gates_closed,
    rule_weights,
    state_score,
    trajectory_score,
)
from medpref.scoring.selection import compare_scores, top_n_by_margin
from medpref.scoring.trajectory import candidate_states, pair_length

Judgements = dict[str, dict[str, RuleJudgement]]  # state key → rule id → judgement


@dataclass
class ItemStates:
    """An item with the states of each candidate (the same number for both); ``requested``
    is the trajectory length asked for, ``n_states`` what both candidates' futures allow."""

    item: UnlabeledItem
    n_states: int
    states: list[list[list[Turn]]]  # candidate → state → turns
    requested: int = 1

    @property
    def shortened(self) -> bool:
        return self.n_states < self.requested


def state_key(turns: Sequence[Turn]) -> str:
    """Content address of a state (two items sharing a state score it once)."""
    text = json.dumps(turns_to_messages(turns), ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]


def collect_states(items: Sequence[UnlabeledItem], trajectory: int) -> list[ItemStates]:
    out = []
    for item in items:
        n = pair_length(item.candidates, trajectory)
        out.append(ItemStates(item, n, [candidate_states(item.history, c, n)
                                        for c in item.candidates], trajectory))
    return out


def length_coverage(item_states: Sequence[ItemStates]) -> dict:
    """How many items (and candidates) are scored over the full requested length, and
    which are shortened because a candidate's future has fewer complete rounds."""
    full = [its for its in item_states if not its.shortened]
    return {"items": len(item_states), "full_length_items": len(full),
            "full_length_share": round(len(full) / len(item_states), 4) if item_states else None,
            "candidates": sum(len(its.states) for its in item_states),
            "full_length_candidates": sum(len(its.states) for its in full),
            "shortened_items": [{"item_id": its.item.id, "requested": its.requested,
                                 "scored": its.n_states} for its in item_states
                                if its.shortened]}


def score_unique_states(scorer: RuleScorer, flowchart: Flowchart,
                        item_states: Sequence[ItemStates]) -> Judgements:
    """Every distinct state scored against every rule in one scorer call."""
    unique: dict[str, list[Turn]] = {}
    for its in item_states:
        for cand in its.states:
            for state in cand:
                unique.setdefault(state_key(state), state)
    # Similar lengths side by side: the scorer batches in order, so this keeps padding low.
    keys = sorted(unique, key=lambda k: (sum(len(t.text) for t in unique[k]), k))
    scored = scorer.score_states([unique[k] for k in keys], flowchart.rules) if keys else []
    return dict(zip(keys, scored))


def rule_scores(judgements: dict[str, RuleJudgement],
                flowchart: Flowchart) -> dict[str, float] | None:
    """The state's score per rule, or None if any rule has no usable judgement."""
    scores = {r: judgements[r].score for r in flowchart.ids if r in judgements}
    if len(scores) != len(flowchart) or any(v is None for v in scores.values()):
        return None
    return scores  # type: ignore[return-value]


def weighted_state_score(scores: dict[str, float], flowchart: Flowchart,
                         scoring: ScoringConfig, weighting: Weighting) -> float:
    """Eqs. 3-4 with the params' α, β, γ, t1, t2."""
    weights = rule_weights(flowchart, scores, weighting, scoring.dep_settings())
    return state_score(scores, weights)


def candidate_score(states: Sequence[Sequence[Turn]], judgements: Judgements,
                    flowchart: Flowchart, scoring: ScoringConfig,
                    weighting: Weighting) -> tuple[float, list[float]] | None:
    """Eq. 1 over the candidate's states, with the per-state scores; None if unscored."""
    per_state = []
    for state in states:
        scores = rule_scores(judgements[state_key(state)], flowchart)
        if scores is None:
            return None
        per_state.append(weighted_state_score(scores, flowchart, scoring, weighting))
    return trajectory_score(per_state, scoring.discount), per_state


def cai_decisions(item_states: Sequence[ItemStates], judgements: Judgements,
                  flowchart: Flowchart, scoring: ScoringConfig, weighting: Weighting,
                  strategy: str) -> list[Decision]:
    """One decision per item: winner by score, tie below the threshold, or unscored."""
    out = []
    for its in item_states:
        scored = [candidate_score(s, judgements, flowchart, scoring, weighting)
                  for s in its.states]
        if any(s is None for s in scored):
            out.append(decision_for(its.item, strategy, "unscored", n_states=its.n_states))
            continue
        (s1, v1), (s2, v2) = scored  # type: ignore[misc]
        outcome, margin = compare_scores(s1, s2, scoring.tie_threshold)
        out.append(decision_for(its.item, strategy, outcome, round(margin, 6),
                                scores=[round(s1, 6), round(s2, 6)],
                                state_scores=[[round(x, 6) for x in v1],
                                              [round(x, 6) for x in v2]],
                                n_states=its.n_states, requested=its.requested,
                                weighting=weighting))
    return out


def cai_pairs(items: Sequence[UnlabeledItem], decisions: Sequence[Decision],
              top_n: int | None) -> list[PreferencePair]:
    """Pairs of the decisive items, the ``top_n`` widest margins kept."""
    by_id = {i.id: i for i in items}
    decisive = [d for d in decisions if d.outcome in ("1", "2")]
    kept = top_n_by_margin(decisive, top_n, margin=lambda d: d.margin or 0.0,
                           key=lambda d: d.item_id)
    return [pair_from_winner(by_id[d.item_id], d, scores=d.detail["scores"],
                             n_states=d.detail["n_states"], weighting=d.detail["weighting"])
            for d in kept]


def state_score_rows(item_states: Sequence[ItemStates], judgements: Judgements,
                     flowchart: Flowchart, scoring: ScoringConfig) -> list[dict]:
    """One row per (item, candidate, state): rule scores, both weightings' state scores."""
    rows = []
    for its in item_states:
        for ci, (cand, states) in enumerate(zip(its.item.candidates, its.states)):
            for si, state in enumerate(states):
                js = judgements[state_key(state)]
                scores = rule_scores(js, flowchart)
                row = {"item_id": its.item.id, "candidate": ci + 1, "source": cand.source,
                       "state": si, "state_key": state_key(state),
                       "rule_scores": {r: js[r].score for r in flowchart.ids if r in js},
                       "unparsable": sum(js[r].unparsable for r in js)}
                for w in ("avg", "dep"):
                    row[f"{w}_score"] = (None if scores is None else
                                         round(weighted_state_score(scores, flowchart,
                                                                    scoring, w), 6))
                row["linear_score"] = (None if scores is None else round(
                    weighted_state_score(scores, flowchart, scoring.linear(), "dep"), 6))
                row["gates_closed"] = (None if scores is None else
                                       gates_closed(flowchart, scores, scoring.dep_settings()))
                rows.append(row)
    return rows


def gating_summary(state_rows: Sequence[dict], dep: Sequence[Decision],
                   linear: Sequence[Decision]) -> dict:
    """Whether Eq. 4 acted: distinct states whose ``dep`` score differs from the linear sum
    (a gate closed), how often each goal's gate closed, and the items whose ``cai_dep``
    decision (winner, tie or margin) differs from the linear sum's."""
    by_key = {r["state_key"]: r for r in state_rows if r["gates_closed"] is not None}
    closed = [r for r in by_key.values() if r["gates_closed"]]
    per_goal: dict[str, int] = {}
    for r in closed:
        for goal in r["gates_closed"]:
            per_goal[goal] = per_goal.get(goal, 0) + 1
    lin = {d.item_id: d for d in linear}
    changed = [d.item_id for d in dep if d.item_id in lin and (
        d.outcome != lin[d.item_id].outcome or d.margin != lin[d.item_id].margin)]
    flipped = [d.item_id for d in dep if d.item_id in lin
               and d.outcome != lin[d.item_id].outcome]
    return {"states": len(by_key), "states_gated": len(closed),
            "states_gated_share": round(len(closed) / len(by_key), 4) if by_key else None,
            "gate_closed_per_goal": dict(sorted(per_goal.items())),
            "items_score_changed": len(changed), "items_outcome_changed": len(flipped)}
