"""What every REM scorer offers the stages that use it (annotation, evaluation).

A *state* is a dialogue history ending with a doctor turn. A scorer gives, for each
state and each rule, a score in [0, 2] — the mean of k sampled judgements (PLPF Eq. 2),
an expected score Σ k·p(k) from one forward pass, or a fine-tuned REM's — or ``None``
when no usable judgement was obtained (unparsable answers are recorded, never read as 0).
Its ``label`` is the 0/1/2 verdict that accuracy is measured on: the rounded mean of
sampled scores, or the most probable score token of a probability-based scorer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from medpref.contracts import Turn
from medpref.rules import Rule


def to_label(score: float | None) -> int | None:
    """An averaged score in [0, 2] as a 0/1/2 label (half up: 1.5 → 2); None stays None."""
    if score is None or (isinstance(score, float) and math.isnan(score)):
        return None
    return min(2, max(0, math.floor(score + 0.5)))


@dataclass
class RuleJudgement:
    """One rule's score of one state, with what it was computed from."""

    rule: str
    score: float | None
    samples: list[float | None] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    unparsable: int = 0

    @property
    def label(self) -> int | None:
        """The 0/1/2 verdict: the mean score rounded half up."""
        return to_label(self.score)


class RuleScorer(Protocol):
    """Scores states against rules; implementations batch and cache their model calls."""

    name: str

    def score_states(self, states: Sequence[Sequence[Turn]],
                     rules: Sequence[Rule]) -> list[dict[str, RuleJudgement]]:
        """For each state, a judgement per rule id."""
        ...


@dataclass
class ExpectedJudgement(RuleJudgement):
    """A judgement from score-token probabilities; ``mass`` is how much next-token
    probability the three options had before renormalising (low = off-format)."""

    probs: dict[str, float] = field(default_factory=dict)
    mass: float | None = None

    @property
    def label(self) -> int | None:
        """The most probable score (what greedy decoding of the score token would write;
        a tie goes to the lower score). ``score`` stays the expectation Σ s·p(s), which
        candidate scoring uses; near-uniform probabilities put it near 1 whatever the
        argmax, so rounding it would hide what the model prefers."""
        if self.score is None or not self.probs:
            return None
        return int(max(self.probs, key=lambda s: (self.probs[s], -int(s))))
