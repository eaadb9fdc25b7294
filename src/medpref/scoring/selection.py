"""From two candidate scores to a labeled pair: ties and the top-N by margin.

PLPF Appendix C: a pair whose score difference is below the tie threshold (1.0 there)
is a tie and dropped; of the rest, the N with the largest difference are kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, TypeVar

T = TypeVar("T")
Outcome = Literal["1", "2", "tie"]


def compare_scores(score_1: float, score_2: float, tie_threshold: float) -> tuple[Outcome, float]:
    """Which candidate wins and by how much; |difference| < threshold is a tie."""
    margin = abs(score_1 - score_2)
    if margin < tie_threshold:
        return "tie", margin
    return ("1" if score_1 > score_2 else "2"), margin


def top_n_by_margin(records: Sequence[T], n: int | None, margin: Callable[[T], float],
                    key: Callable[[T], str]) -> list[T]:
    """The ``n`` records with the largest margin (all when n is None), in input order.

    Equal margins are broken by ``key`` so that the selection does not depend on the
    order the records arrived in.
    """
    if n is None or n >= len(records):
        return list(records)
    ranked = sorted(records, key=lambda r: (-margin(r), key(r)))
    keep = {id(r) for r in ranked[:n]}
    return [r for r in records if id(r) in keep]
