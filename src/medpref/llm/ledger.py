"""Per-stage accounting of model use, and the budget guard.

The ledger counts, per role: calls that reached a backend, cache hits, failures,
tokens in and out, estimated cost (from the price table in params) and latency. It is
written as a DVC metric at the end of a stage, so a warm rerun visibly makes zero calls.
A stage whose methods share a role (NoteChat's planner and its single-prompt baselines)
also counts its batches per (method, step) here (:meth:`Ledger.record_batch`); that
breakdown is the stage's to report and stays out of ``ledger.json``.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from medpref.llm.errors import BudgetExceededError
from medpref.llm.types import Completion


@dataclass
class Price:
    input_per_1m: float = 0.0
    output_per_1m: float = 0.0

    def cost(self, tokens_in: int, tokens_out: int) -> float:
        return (tokens_in * self.input_per_1m + tokens_out * self.output_per_1m) / 1e6


@dataclass
class RoleTally:
    calls: int = 0
    cache_hits: int = 0
    failures: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0


@dataclass
class StepTally:
    """The batches one step of one method sent, counted from their completions."""

    method: str
    step: str
    batches: int = 0
    requests: int = 0
    cache_hits: int = 0
    failures: int = 0
    tokens_out: int = 0
    #: model time of the completions when they were generated (cached ones included),
    #: i.e. what a cold run costs; the role tallies count only this run's calls
    model_s: float = 0.0


class Ledger:
    """Thread-safe tally of one stage's model use, with a spending limit."""

    def __init__(self, stage: str, max_cost_usd: float | None = None):
        self.stage = stage
        self.max_cost_usd = max_cost_usd
        self._roles: dict[str, RoleTally] = defaultdict(RoleTally)
        self._first_errors: dict[str, str] = {}
        self._steps: dict[tuple[str, str], StepTally] = {}
        self._reserved_usd = 0.0  # estimates of calls in flight (not yet charged)
        self._lock = threading.Lock()

    @property
    def spent_usd(self) -> float:
        with self._lock:
            return sum(t.cost_usd for t in self._roles.values())

    def check_budget(self, role: str, estimated_usd: float) -> None:
        """Stop before a call that would take the stage over its budget."""
        self.reserve(role, estimated_usd)
        self.release(estimated_usd)

    def reserve(self, role: str, estimated_usd: float) -> None:
        """Hold ``estimated_usd`` for a call about to be sent, or raise
        :class:`BudgetExceededError` when what was charged (the servers' reported usage),
        what is in flight and this call would pass the budget. :meth:`record_call` with
        ``reserved=`` releases the hold and charges the real cost."""
        if self.max_cost_usd is None or estimated_usd <= 0:
            return
        with self._lock:
            spent = sum(t.cost_usd for t in self._roles.values())
            if spent + self._reserved_usd + estimated_usd > self.max_cost_usd:
                raise BudgetExceededError(
                    f"stage '{self.stage}', role '{role}': the next call would cost up to "
                    f"${estimated_usd:.4f} on top of ${spent:.4f} charged and "
                    f"${self._reserved_usd:.4f} in flight, over the budget of "
                    f"${self.max_cost_usd:.2f} (shared.llm.max_cost_usd)")
            self._reserved_usd += estimated_usd

    def release(self, estimated_usd: float) -> None:
        if self.max_cost_usd is None or estimated_usd <= 0:
            return
        with self._lock:
            self._reserved_usd = max(0.0, self._reserved_usd - estimated_usd)

    def record_hit(self, role: str, n: int = 1) -> None:
        with self._lock:
            self._roles[role].cache_hits += n

    def record_call(self, role: str, completion: Completion, price: Price,
                    reserved: float = 0.0) -> None:
        """Count one call that reached a backend and charge its reported usage."""
        self.release(reserved)
        with self._lock:
            tally = self._roles[role]
            tally.calls += 1
            tally.failures += 0 if completion.ok else 1
            if not completion.ok:
                self._first_errors.setdefault(role, str(completion.error or "failed")[:200])
            tally.tokens_in += completion.tokens_in
            tally.tokens_out += completion.tokens_out
            tally.cost_usd += price.cost(completion.tokens_in, completion.tokens_out)
            tally.latency_s += completion.latency_s

    def record_batch(self, method: str, step: str, completions: Sequence[Completion]) -> None:
        """Count one batch sent for ``step`` of ``method``, cached answers included."""
        with self._lock:
            tally = self._steps.setdefault((method, step), StepTally(method, step))
            tally.batches += 1
            tally.requests += len(completions)
            tally.cache_hits += sum(c.cached for c in completions)
            tally.failures += sum(not c.ok for c in completions)
            tally.tokens_out += sum(c.tokens_out for c in completions)
            tally.model_s += sum(c.latency_s for c in completions)

    def steps(self) -> dict[tuple[str, str], StepTally]:
        """The per-(method, step) tallies, in the order the steps first ran."""
        with self._lock:
            return dict(self._steps)

    def first_error(self, role: str) -> str:
        """The first recorded failure of a role ('' when none), for one-line messages."""
        with self._lock:
            return self._first_errors.get(role, "")

    def totals(self) -> dict:
        with self._lock:
            roles = {name: asdict(t) for name, t in sorted(self._roles.items())}
        total = RoleTally()
        for t in roles.values():
            for k, v in t.items():
                setattr(total, k, getattr(total, k) + v)
        out = {"stage": self.stage, "total": asdict(total), "roles": roles}
        out["total"]["cost_usd"] = round(out["total"]["cost_usd"], 6)
        out["total"]["latency_s"] = round(out["total"]["latency_s"], 3)
        return out

    def write(self, path: str | Path) -> dict:
        from medpref.contracts import atomic_write_text

        data = self.totals()
        atomic_write_text(path, json.dumps(data, indent=2) + "\n")
        return data
