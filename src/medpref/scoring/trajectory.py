"""The states along a candidate's trajectory, which Eq. 1 scores.

A *state* is a history that ends with a doctor turn. For an item ⟨h, c, future⟩ the
states are  h+c,  h+c+u1+a1,  h+c+u1+a1+u2+a2, …  (u = patient, a = doctor).

**Trajectory length L** (the ablation grid's 1, 2, 3; PLPF Table 3, the follow-up's Fig. 10)
is the number of states scored: L = 1 is the candidate alone ("only the immediate doctor
response"), L = 2 adds one future round, L = 3 two. In Eq. 1 that is n = L − 1 terms of
the sum. Only complete future rounds count (a trailing patient turn ends no state).

Both candidates of a pair are scored over the same number of states,
min(L, states available to c1, states available to c2): a candidate whose sampled future
is shorter must not lose just because fewer discounted terms are added to its score.
"""

from __future__ import annotations

from collections.abc import Sequence

from medpref.contracts import Candidate, Turn


def complete_rounds(future: Sequence[Turn]) -> int:
    """How many (patient, doctor) rounds the future holds, in order, from its start."""
    rounds = 0
    for i in range(0, len(future) - 1, 2):
        if future[i].role == "patient" and future[i + 1].role == "doctor":
            rounds += 1
        else:
            break
    return rounds


def states_available(candidate: Candidate) -> int:
    """States a candidate can offer: its own plus one per complete future round."""
    return 1 + complete_rounds(candidate.future)


def pair_length(candidates: Sequence[Candidate], trajectory: int) -> int:
    """The common number of states scored for every candidate of one item."""
    if trajectory < 1:
        raise ValueError(f"trajectory length must be at least 1, got {trajectory}")
    return min([trajectory, *(states_available(c) for c in candidates)])


def candidate_states(history: Sequence[Turn], candidate: Candidate,
                     n_states: int) -> list[list[Turn]]:
    """The first ``n_states`` states along the candidate's trajectory."""
    if n_states > states_available(candidate):
        raise ValueError(f"asked for {n_states} states, the candidate has "
                         f"{states_available(candidate)}")
    state = [*history, Turn(role="doctor", text=candidate.response)]
    states = [state]
    for i in range(1, n_states):
        state = [*state, *candidate.future[2 * (i - 1):2 * i]]
        states.append(state)
    return states
