"""Replay: answers only from the cache, and fails loudly on a miss.

A reviewer given the cache files of a run sets a role's backend to ``replay`` (naming
the backend and model that made the answers) and reruns every notebook with no key and
no GPU. Any request that was not made in the original run raises :class:`CacheMissError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from medpref.llm.base import Backend, OnComplete
from medpref.llm.errors import CacheMissError
from medpref.llm.types import ChatRequest, Completion, Message


class ReplayBackend(Backend):
    kind = "replay"

    def __init__(self, replays: dict[str, Any]):
        if "backend" not in replays or "model" not in replays:
            raise ValueError("replay needs the identity it replays: {backend: ..., model: ...}")
        self._identity = dict(replays)

    def identity(self) -> dict[str, Any]:
        return dict(self._identity)

    def generate(self, requests: Sequence[ChatRequest],
                 on_complete: OnComplete | None = None) -> list[Completion]:
        raise CacheMissError(
            f"replay of {self._identity}: {len(requests)} request(s) are not in the cache; "
            f"first one begins {str(requests[0].messages)[:200]!r}")

    def option_probs(self, prompts: Sequence[list[Message]], options: Sequence[str],
                     assistant_prefixes: Sequence[str]):
        raise CacheMissError(f"replay of {self._identity}: {len(prompts)} option-scoring "
                             "request(s) are not in the cache")
