"""NoteChat's model calls: counted per method and step on the ledger, timed on the stage,
and the raw-completion trace.

The stage ledger counts calls per role; the report also needs them per *method* and
step (planning, doctor, patient, polish, each baseline), with wall time, so NoteChat's
cost can be set against the single-prompt baselines'. NoteChat's planner and the
baselines share a role, so every batch is also counted by (method, step) on the ledger
(:meth:`~medpref.llm.ledger.Ledger.record_batch`) and timed as a step of the stage
(``generate:<method>/<step>``). ``model_s`` sums the model time stored with every
completion, cached or not, so even a warm rerun reports what the generation cost when it
was cold. Every raw completion is kept in the trace with what the parser made of it, so
parsing can be redone without a model.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from medpref.llm.client import LLMClient
from medpref.llm.ledger import Ledger, StepTally
from medpref.llm.types import CallSpec, Completion, Message

#: ``stage.step``: times a labelled step of the stage (no timing outside a stage)
StepTimer = Callable[[str], AbstractContextManager]


def step_seed(seed: int, *parts: object) -> int:
    """A stable seed for one batched call (a batch shares its decoding settings)."""
    return zlib.crc32(":".join(map(str, (seed, *parts))).encode()) & 0x7FFFFFFF


def step_label(method: str, step: str | None = None) -> str:
    """The stage timing label of a method's generation (or of one of its steps)."""
    return f"generate:{method}" + (f"/{step}" if step else "")


def _untimed(label: str) -> AbstractContextManager:
    return nullcontext()


@dataclass
class CallLog:
    """The trace of every completion; the batches are counted on the clients' ledgers
    and timed by ``step`` (the stage's ``step``; untimed outside a stage)."""

    step: StepTimer = _untimed
    timings: dict[str, float] = field(default_factory=dict)
    trace: list[dict[str, Any]] = field(default_factory=list)
    _ledgers: dict[int, Ledger] = field(default_factory=dict, init=False, repr=False)

    def chat_many(self, client: LLMClient, method: str, step: str,
                  conversations: Sequence[list[Message]], call: CallSpec,
                  **overrides: Any) -> list[Completion]:
        """``client.chat_many`` counted on its ledger and timed as a stage step."""
        if not conversations:
            return []
        with self.step(step_label(method, step)):
            comps = client.chat_many(conversations, call, **overrides)
        client.ledger.record_batch(method, step, comps)
        self._ledgers.setdefault(id(client.ledger), client.ledger)
        return comps

    def record(self, method: str, step: str, key: str, completion: Completion,
               **parsed: Any) -> None:
        self.trace.append({"method": method, "step": step, "key": key,
                           "raw": completion.text, "error": completion.error,
                           "finish_reason": completion.finish_reason,
                           "cached": completion.cached, **parsed})

    @property
    def tallies(self) -> dict[tuple[str, str], StepTally]:
        """Per (method, step), from the ledgers of the clients this log called."""
        out: dict[tuple[str, str], StepTally] = {}
        for ledger in self._ledgers.values():
            for key, t in ledger.steps().items():
                out[key] = _add(out[key], t) if key in out else t
        return out

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for t in self.tallies.values():
            row = asdict(t)
            row["model_calls"] = t.requests - t.cache_hits
            row["wall_s"] = round(self.timings.get(step_label(t.method, t.step), float("nan")), 2)
            row["model_s"] = round(t.model_s, 2)
            out.append(row)
        return out


def _add(a: StepTally, b: StepTally) -> StepTally:
    return replace(a, batches=a.batches + b.batches, requests=a.requests + b.requests,
                   cache_hits=a.cache_hits + b.cache_hits, failures=a.failures + b.failures,
                   tokens_out=a.tokens_out + b.tokens_out, model_s=a.model_s + b.model_s)
