"""The one small interface every model backend implements."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from medpref.llm.types import ChatRequest, Completion, Message, OptionScores

OnComplete = Callable[[int, Completion], None]
OnOptions = Callable[[int, OptionScores], None]
#: run before request ``i`` is sent; raises (e.g. BudgetExceededError) to stop the batch
CallGate = Callable[[int], None]


class Backend(ABC):
    """A chat-completion backend.

    ``generate`` answers a batch of requests in order and calls ``on_complete(i, c)`` as
    soon as request ``i`` is answered, so callers can persist each completion at once.
    Backends that expose next-token probabilities also implement ``option_probs``
    (``hf`` from its logits, ``openai`` from a server's top log-probs).

    The client calls the ``*_gated``/``score_options`` forms, which add ``before_call``
    (the budget guard). Their defaults pass every request through the gate up front, then
    run the batch; a backend that sends calls one by one (``openai``) gates each call.
    """

    kind: str = "abstract"
    #: True when the backend bills per token (the budget guard then needs a price)
    paid: bool = False
    #: False when the backend cannot apply ``GenerationParams.loop_controls()``; the
    #: client then sends (and caches) its calls without them and says so once
    loop_controls: bool = True

    @abstractmethod
    def identity(self) -> dict[str, Any]:
        """What identifies this backend's answers in the cache (never a secret)."""

    def model_label(self) -> str:
        """The model's name as people and price lists know it (no disk access)."""
        return self.identity()["model"]

    def describe(self) -> str:
        """Where calls go, for messages (never a secret)."""
        return f"backend '{self.kind}'"

    @abstractmethod
    def generate(self, requests: Sequence[ChatRequest],
                 on_complete: OnComplete | None = None) -> list[Completion]:
        """Answer every request; failures are returned as completions with ``error``."""

    def generate_gated(self, requests: Sequence[ChatRequest],
                       on_complete: OnComplete | None = None,
                       before_call: CallGate | None = None) -> list[Completion]:
        if before_call is not None:
            for i in range(len(requests)):
                before_call(i)
        return self.generate(requests, on_complete)

    def option_probs(self, prompts: Sequence[list[Message]], options: Sequence[str],
                     assistant_prefixes: Sequence[str]) -> list[tuple[dict[str, float], float]]:
        """For each prompt, p(option) of the token that follows ``assistant_prefix``.

        Returns (probabilities renormalised over the options, mass the options covered).
        """
        raise NotImplementedError(
            f"the '{self.kind}' backend cannot score answer options from logits; "
            "use an 'hf' or 'openai' backend for this role, or the sampled mode")

    def score_options(self, prompts: Sequence[list[Message]], options: Sequence[str],
                      assistant_prefixes: Sequence[str], on_complete: OnOptions | None = None,
                      before_call: CallGate | None = None) -> list[OptionScores]:
        """``option_probs`` as :class:`OptionScores` (with latency), reported one by one."""
        if before_call is not None:
            for i in range(len(prompts)):
                before_call(i)
        t0 = time.perf_counter()
        rows = self.option_probs(prompts, options, assistant_prefixes)
        each = (time.perf_counter() - t0) / max(1, len(rows))
        out = []
        for i, (probs, mass) in enumerate(rows):
            out.append(OptionScores(probs, mass, latency_s=each))
            if on_complete is not None:
                on_complete(i, out[-1])
        return out
