"""The REM's evaluation items: the development and test splits of the REM data and the
independent test, as one item type, and the fixed subset the slow (LLM) scorers score.

An item is one (state, rule) with its gold score; ``state`` names the history it belongs
to (the items of one state are the rules of one doctor turn), which within-history rule
ordering pairs and the paired bootstrap resamples.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from medpref.contracts import Turn
from medpref.outputs import content_key


@dataclass(frozen=True)
class EvalItem:
    """One gold (state, rule, score) of an evaluation set."""

    id: str
    rule: str
    history: list[Turn]
    score: int
    state: str


def state_id(history: Sequence[Turn]) -> str:
    """A state's content id: its turns (the same history asked about two rules shares it)."""
    return content_key([[t.role, t.text] for t in history])


def items_of(annotations: Sequence) -> list[EvalItem]:
    """REM annotations (hand or constructed rows) as evaluation items."""
    return [EvalItem(a.id, a.rule, list(a.history), int(a.score), state_id(a.history))
            for a in annotations]


def stratified_subset(items: Sequence, n: int | None, seed: int) -> list:
    """A fixed, seeded subset of ``n`` items (anything with ``rule`` and ``score``: the
    slow scorers' evaluation items, the LoRA REM's capped training rows) stratified by
    rule × gold score: each
    stratum shuffled with ``seed``, then one item taken from each stratum in turn until
    ``n`` (``None`` or ``n`` ≥ the items: all of them). In the items' order."""
    if n is None or n >= len(items):
        return list(items)
    strata: dict[tuple[str, int], list[int]] = {}
    for i, it in enumerate(items):
        strata.setdefault((it.rule, it.score), []).append(i)
    rng = random.Random(seed)
    queues = [rng.sample(idx, len(idx)) for _, idx in sorted(strata.items())]
    chosen: list[int] = []
    while len(chosen) < n:
        for q in queues:
            if q and len(chosen) < n:
                chosen.append(q.pop())
    keep = set(chosen)
    return [it for i, it in enumerate(items) if i in keep]
