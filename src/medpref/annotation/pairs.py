"""What every strategy produces: one decision per item, and labeled pairs from it.

A :class:`Decision` says which candidate a strategy prefers for an item — ``"1"`` or
``"2"`` (the item's first or second candidate), ``"tie"``, or why none could be read
(``"unparsable"`` model answers, ``"unscored"`` states). Decisions are what the analyses
count (ties, which source wins); pairs (contract "Labeled preference pair") are what DPO
trains on.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from medpref.contracts import PreferencePair, UnlabeledItem

Outcome = Literal["1", "2", "tie", "unparsable", "unscored"]


@dataclass
class Decision:
    item_id: str
    strategy: str
    outcome: Outcome
    margin: float | None = None
    winner_source: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_record(self) -> dict[str, Any]:
        return asdict(self)


def decision_for(item: UnlabeledItem, strategy: str, outcome: Outcome,
                 margin: float | None = None, **detail: Any) -> Decision:
    """A decision, with the winning candidate's source filled in when there is a winner."""
    source = item.candidates[int(outcome) - 1].source if outcome in ("1", "2") else None
    return Decision(item.id, strategy, outcome, margin, source, dict(detail))


def pair_from_candidates(item: UnlabeledItem, strategy: str, chosen: int, rejected: int,
                         suffix: str = "", margin: float | None = None,
                         **meta: Any) -> PreferencePair:
    """A pair of two of the item's own candidates (0-based indices)."""
    c, r = item.candidates[chosen], item.candidates[rejected]
    return PreferencePair(id=f"p-{strategy}-{item.id}{suffix}", prompt=item.history,
                          chosen=c.response, rejected=r.response, strategy=strategy,
                          margin=margin, chosen_source=c.source, rejected_source=r.source,
                          meta={"item_id": item.id, **meta})


def pair_from_winner(item: UnlabeledItem, decision: Decision, **meta: Any) -> PreferencePair:
    """The pair a decisive decision gives: winner chosen, the other rejected."""
    if decision.outcome not in ("1", "2"):
        raise ValueError(f"{item.id}: a '{decision.outcome}' decision gives no pair")
    win = int(decision.outcome) - 1
    return pair_from_candidates(item, decision.strategy, win, 1 - win, margin=decision.margin,
                                **meta)


def pair_over_candidate(item: UnlabeledItem, strategy: str, chosen_text: str,
                        chosen_source: str, rejected: int, suffix: str,
                        **meta: Any) -> PreferencePair:
    """A pair whose chosen reply is new (the Rethinker's c3) over one of the candidates."""
    r = item.candidates[rejected]
    return PreferencePair(id=f"p-{strategy}-{item.id}{suffix}", prompt=item.history,
                          chosen=chosen_text, rejected=r.response, strategy=strategy,
                          chosen_source=chosen_source, rejected_source=r.source,
                          meta={"item_id": item.id, **meta})
