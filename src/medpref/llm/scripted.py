"""A scripted backend: answers come from a Python function. For tests and dry runs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from medpref.llm.base import Backend, OnComplete
from medpref.llm.types import ChatRequest, Completion, Message

Responder = Callable[[ChatRequest], str]


class ScriptedBackend(Backend):
    """Answers each request with ``responder(request)``; counts what it was asked."""

    kind = "scripted"

    def __init__(self, responder: Responder, name: str = "scripted",
                 option_responder: Callable[[list[Message], Sequence[str], str],
                                            dict[str, float]] | None = None):
        self.responder = responder
        self.option_responder = option_responder
        self.name = name
        self.requests: list[ChatRequest] = []

    def identity(self) -> dict[str, Any]:
        return {"backend": self.kind, "model": self.name}

    def generate(self, requests: Sequence[ChatRequest],
                 on_complete: OnComplete | None = None) -> list[Completion]:
        out = []
        for i, req in enumerate(requests):
            self.requests.append(req)
            text = self.responder(req)
            comp = Completion(text=text, tokens_in=sum(len(m["content"].split())
                                                       for m in req.messages),
                              tokens_out=len(text.split()), finish_reason="stop")
            out.append(comp)
            if on_complete is not None:
                on_complete(i, comp)
        return out

    def option_probs(self, prompts, options, assistant_prefixes):
        if self.option_responder is None:
            return super().option_probs(prompts, options, assistant_prefixes)
        return [(self.option_responder(p, options, pre), 1.0)
                for p, pre in zip(prompts, assistant_prefixes)]
