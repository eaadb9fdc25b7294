"""The one small interface every model backend implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from medpref.llm.types import ChatRequest, Completion, Message

OnComplete = Callable[[int, Completion], None]


class Backend(ABC):
    """A chat-completion backend.

    ``generate`` answers a batch of requests in order and calls ``on_complete(i, c)`` as
    soon as request ``i`` is answered, so callers can persist each completion at once.
    Backends that expose next-token probabilities also implement ``option_probs``
    (``hf`` from its logits, ``openai`` from a server's top log-probs).
    """

    kind: str = "abstract"

    @abstractmethod
    def identity(self) -> dict[str, Any]:
        """What identifies this backend's answers in the cache (never a secret)."""

    @abstractmethod
    def generate(self, requests: Sequence[ChatRequest],
                 on_complete: OnComplete | None = None) -> list[Completion]:
        """Answer every request; failures are returned as completions with ``error``."""

    def option_probs(self, prompts: Sequence[list[Message]], options: Sequence[str],
                     assistant_prefixes: Sequence[str]) -> list[tuple[dict[str, float], float]]:
        """For each prompt, p(option) of the token that follows ``assistant_prefix``.

        Returns (probabilities renormalised over the options, mass the options covered).
        """
        raise NotImplementedError(
            f"the '{self.kind}' backend cannot score answer options from logits; "
            "use an 'hf' or 'openai' backend for this role, or the sampled mode")
