"""Two-order pairwise judging: a judge compares candidates a and b, asked in both orders.

In order ``ab`` the judge sees a first, in ``ba`` b first. A verdict names a position
("1" the first shown, "2" the second, anything else a tie or "equal"); it is mapped back
to the candidates (:func:`to_candidate_frame`: "1" = a, "2" = b) so the two orders of one
comparison can be compared. Only a choice that survives the swap counts
(:func:`combine_orders`); :func:`order_agreement` and :func:`position_shares` say how often
the judge agrees with itself and how often it picks a position.

An answer the parser cannot read is kept with its reason and never guessed. Each caller
keeps what is its own: what a key is, how its prompt is rendered, how a verdict is parsed.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from medpref.llm.client import LLMClient
from medpref.llm.types import CallSpec, Completion

Order = Literal["ab", "ba"]
ORDERS: tuple[Order, Order] = ("ab", "ba")
UNPARSABLE = "unparsable"


def shown(a: str, b: str, order: Order) -> tuple[str, str]:
    """(first shown, second shown) of candidates a and b in ``order``."""
    return (a, b) if order == "ab" else (b, a)


def to_candidate_frame(verdict: str | None, order: Order) -> str | None:
    """A verdict about the shown positions as a verdict about the candidates ("1" = a);
    a tie/"equal" or an unreadable verdict (None) is the same in both frames."""
    if verdict not in ("1", "2") or order == "ab":
        return verdict
    return "2" if verdict == "1" else "1"


def combine_orders(ab: str | None, ba: str | None) -> str:
    """Both orders' verdicts (candidate frame) → "1" / "2" / "tie" / "unparsable": a
    choice counts only when both orders make it; any disagreement is a tie."""
    if ab is None or ba is None:
        return UNPARSABLE
    if ab == ba and ab in ("1", "2"):
        return ab
    return "tie"


def order_agreement(verdicts: Iterable[tuple[Hashable, Order, str]]) -> float:
    """Share of comparisons judged in both orders whose two (candidate-frame) verdicts
    agree; ``verdicts`` are (comparison key, order, verdict). NaN when none has both."""
    by_key: dict[Hashable, dict[str, str]] = {}
    for key, order, verdict in verdicts:
        by_key.setdefault(key, {})[order] = verdict
    both = [v for v in by_key.values() if len(v) == 2]
    return sum(v["ab"] == v["ba"] for v in both) / len(both) if both else float("nan")


def position_shares(verdicts: Sequence[str | None],
                    labels: Sequence[str] = ("1", "2", "tie")) -> dict[str, float]:
    """Shares of each positional verdict and of unreadable ones (None) over all calls."""
    counts = {label: 0 for label in [*labels, UNPARSABLE]}
    for v in verdicts:
        counts[UNPARSABLE if v is None else v] += 1
    n = max(1, len(verdicts))
    return {f"share_{k}": v / n for k, v in counts.items()}


@dataclass(frozen=True)
class PairwiseAnswer:
    """One judge call: what was compared, in which order, and the verdict read from it."""

    key: Any
    order: Order
    completion: Completion
    shown_verdict: str | None    # about the positions; None: the call failed or unreadable
    reason: str | None = None    # why there is no verdict

    @property
    def verdict(self) -> str | None:
        """The verdict about the candidates ("1" = a, "2" = b)."""
        return to_candidate_frame(self.shown_verdict, self.order)


def read_verdict(comp: Completion, parse: Callable[[str], str | None]
                 ) -> tuple[str | None, str | None]:
    """(verdict, reason): ``parse`` returns None or raises ValueError when unreadable."""
    if not comp.ok:
        return None, f"judge call failed: {comp.error}"
    try:
        verdict = parse(comp.text)
    except ValueError as exc:
        return None, str(exc)
    return verdict, None if verdict is not None else "unparsable verdict"


def judge_pairs(client: LLMClient, jobs: Sequence[tuple[Any, Order]],
                messages: Callable[[Any, Order], list[dict[str, str]]],
                parse: Callable[[str], str | None], call: CallSpec,
                **overrides: Any) -> list[PairwiseAnswer]:
    """Ask the judge every (key, order) job in one batch, as ``call`` says; one answer
    per job, in order. ``messages(key, order)`` renders a job's prompt; ``overrides``
    go to the client."""
    completions = client.chat_many([messages(k, o) for k, o in jobs], call, **overrides)
    out = []
    for (key, order), comp in zip(jobs, completions):
        verdict, reason = read_verdict(comp, parse)
        out.append(PairwiseAnswer(key, order, comp, verdict, reason))
    return out
