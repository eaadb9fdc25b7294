"""Bookkeeping of model calls per NoteChat step, and the raw-completion trace.

The stage ledger counts calls per role; the report also needs them per *method* and
step (planning, doctor, patient, polish, each baseline), with wall time, so NoteChat's
cost can be set against the single-prompt baselines'. ``model_s`` sums the model time
stored with every completion, cached or not, so even a warm rerun reports what the
generation cost when it was cold. Every raw completion is kept in
the trace with what the parser made of it, so parsing can be redone without a model.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from medpref.llm.client import LLMClient
from medpref.llm.types import Completion, Message


def step_seed(seed: int, *parts: object) -> int:
    """A stable seed for one batched call (a batch shares its decoding settings)."""
    return zlib.crc32(":".join(map(str, (seed, *parts))).encode()) & 0x7FFFFFFF


@dataclass
class StepTally:
    method: str
    step: str
    batches: int = 0
    requests: int = 0
    cache_hits: int = 0
    failures: int = 0
    tokens_out: int = 0
    #: model time of the completions when they were generated (cached ones included),
    #: i.e. what a cold run costs; the ledger counts only this run's calls
    model_s: float = 0.0
    wall_s: float = 0.0


@dataclass
class CallLog:
    """Tallies per (method, step) and the trace of every completion."""

    tallies: dict[tuple[str, str], StepTally] = field(default_factory=dict)
    trace: list[dict[str, Any]] = field(default_factory=list)

    def chat_many(self, client: LLMClient, method: str, step: str,
                  conversations: Sequence[list[Message]], **kwargs: Any) -> list[Completion]:
        """``client.chat_many`` with the call counted and timed."""
        if not conversations:
            return []
        t0 = time.perf_counter()
        comps = client.chat_many(conversations, **kwargs)
        tally = self.tallies.setdefault((method, step), StepTally(method, step))
        tally.batches += 1
        tally.requests += len(comps)
        tally.cache_hits += sum(c.cached for c in comps)
        tally.failures += sum(not c.ok for c in comps)
        tally.tokens_out += sum(c.tokens_out for c in comps)
        tally.model_s += sum(c.latency_s for c in comps)
        tally.wall_s += time.perf_counter() - t0
        return comps

    def record(self, method: str, step: str, key: str, completion: Completion,
               **parsed: Any) -> None:
        self.trace.append({"method": method, "step": step, "key": key,
                           "raw": completion.text, "error": completion.error,
                           "finish_reason": completion.finish_reason,
                           "cached": completion.cached, **parsed})

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for t in self.tallies.values():
            row = asdict(t)
            row["model_calls"] = t.requests - t.cache_hits
            row["wall_s"] = round(t.wall_s, 2)
            row["model_s"] = round(t.model_s, 2)
            out.append(row)
        return out
