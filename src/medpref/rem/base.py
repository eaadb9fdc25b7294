"""What every REM scorer offers the stages that use it (annotation, evaluation).

A *state* is a dialogue history ending with a doctor turn. A scorer gives, for each
state and each rule, a score in [0, 2] — the mean of k sampled judgements (PLPF Eq. 2),
an expected score Σ k·p(k) from one forward pass, or a fine-tuned REM's — or ``None``
when no usable judgement was obtained (unparsable answers are recorded, never read as 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from medpref.contracts import Turn
from medpref.rules import Rule


@dataclass
class RuleJudgement:
    """One rule's score of one state, with what it was computed from."""

    rule: str
    score: float | None
    samples: list[float | None] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    unparsable: int = 0


class RuleScorer(Protocol):
    """Scores states against rules; implementations batch and cache their model calls."""

    name: str

    def score_states(self, states: Sequence[Sequence[Turn]],
                     rules: Sequence[Rule]) -> list[dict[str, RuleJudgement]]:
        """For each state, a judgement per rule id."""
        ...
