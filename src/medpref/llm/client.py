"""A role's view of a model: cache lookups, batching of misses, accounting, budget.

Every model call of every stage goes through :class:`LLMClient`. It looks each request
up in the content-addressed cache, sends only the misses to the backend in one batch,
stores each completion the moment it arrives, and tallies calls, hits, tokens, cost and
latency in the stage's ledger. Failed calls are tallied but never cached.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from medpref.llm.base import Backend
from medpref.llm.cache import ResponseCache, request_key
from medpref.llm.ledger import Ledger, Price
from medpref.llm.types import ChatRequest, Completion, GenerationParams, Message, OptionScores


def _estimate_tokens(messages: Sequence[Message]) -> int:
    return sum(len(m.get("content", "")) for m in messages) // 4 + 4 * len(messages)


class LLMClient:
    def __init__(self, role: str, backend: Backend, defaults: GenerationParams,
                 cache: ResponseCache | None = None, ledger: Ledger | None = None,
                 price: Price | None = None):
        self.role = role
        self.backend = backend
        self.defaults = defaults
        self.cache = cache
        self.ledger = ledger or Ledger(stage="adhoc")
        self.price = price or Price()

    @property
    def identity(self) -> dict[str, Any]:
        return self.backend.identity()

    @property
    def model_id(self) -> str:
        ident = self.identity
        return f"{ident['backend']}:{ident['model']}" + (
            f"+{ident['adapter']}" if "adapter" in ident else "")

    def params(self, **overrides: Any) -> GenerationParams:
        return self.defaults.with_overrides(**overrides)

    # -- chat ---------------------------------------------------------------------------
    def _chat_request_record(self, req: ChatRequest) -> dict[str, Any]:
        rec = {"kind": "chat", **self.identity, "messages": list(req.messages),
               "params": req.params.cache_fields()}
        if req.tools:
            rec["tools"] = list(req.tools)
        if req.prefix:
            rec["prefix"] = req.prefix
        return rec

    def chat(self, messages: list[Message], tools: list[dict] | None = None,
             prefix: str = "", **overrides: Any) -> Completion:
        return self.chat_many([messages], tools=tools, prefix=prefix, **overrides)[0]

    def chat_many(self, conversations: Sequence[list[Message]],
                  tools: list[dict] | None = None, prefix: str = "",
                  **overrides: Any) -> list[Completion]:
        """Answer many conversations with the same settings; misses go out in one batch.

        ``prefix`` starts every answer (e.g. ``"Doctor:"``); it is not part of the text.
        """
        params = self.params(**overrides)
        requests = [ChatRequest.of(list(m), params, tools, prefix) for m in conversations]
        return self.complete(requests)

    def complete(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        """Answer prepared requests (they may differ in settings, e.g. seeds)."""
        results: list[Completion | None] = [None] * len(requests)
        records = [self._chat_request_record(r) for r in requests]
        keys = [request_key(r) for r in records]
        missing: list[int] = []
        first_of_key: dict[str, int] = {}
        duplicates: dict[int, int] = {}
        for i, key in enumerate(keys):
            hit = self.cache.get(key) if self.cache is not None else None
            if hit is not None:
                results[i] = _completion_from_record(hit, cached=True)
            elif key in first_of_key:  # the same request twice in one batch: ask once
                duplicates[i] = first_of_key[key]
            else:
                first_of_key[key] = i
                missing.append(i)
        # a repeat inside the batch is served like a hit: calls + hits = requests
        self.ledger.record_hit(self.role, len(requests) - len(missing))
        if missing:
            self._check_budget([requests[i] for i in missing])

            def on_complete(j: int, comp: Completion) -> None:
                i = missing[j]
                self.ledger.record_call(self.role, comp, self.price)
                if comp.ok and self.cache is not None:
                    self.cache.put(keys[i], "chat", records[i], comp.to_record())

            answers = self.backend.generate([requests[i] for i in missing], on_complete)
            for j, comp in enumerate(answers):
                results[missing[j]] = comp
        for i, src in duplicates.items():
            results[i] = results[src]
        return [r for r in results if r is not None]

    def _check_budget(self, requests: Sequence[ChatRequest]) -> None:
        tokens_in = sum(_estimate_tokens(r.messages) for r in requests)
        tokens_out = sum(r.params.max_new_tokens for r in requests)
        self.ledger.check_budget(self.role, self.price.cost(tokens_in, tokens_out))

    # -- option scoring -----------------------------------------------------------------
    def option_scores(self, prompts: Sequence[list[Message]], options: Sequence[str],
                      assistant_prefixes: Sequence[str] | str = "") -> list[OptionScores]:
        """p(option) of the next token after each assistant prefix (one forward pass)."""
        if isinstance(assistant_prefixes, str):
            assistant_prefixes = [assistant_prefixes] * len(prompts)
        results: list[OptionScores | None] = [None] * len(prompts)
        records = [{"kind": "options", **self.identity, "messages": list(p),
                    "options": list(options), "assistant_prefix": pre}
                   for p, pre in zip(prompts, assistant_prefixes)]
        keys = [request_key(r) for r in records]
        missing = []
        for i, key in enumerate(keys):
            hit = self.cache.get(key) if self.cache is not None else None
            if hit is not None:
                results[i] = OptionScores(hit["probs"], hit["mass"], cached=True)
            else:
                missing.append(i)
        self.ledger.record_hit(self.role, len(prompts) - len(missing))
        if missing:
            scored = self.backend.option_probs([prompts[i] for i in missing], options,
                                               [assistant_prefixes[i] for i in missing])
            for i, (probs, mass) in zip(missing, scored):
                results[i] = OptionScores(probs, mass)
                n_in = _estimate_tokens(prompts[i])
                self.ledger.record_call(self.role, Completion(text="", tokens_in=n_in),
                                        self.price)
                if self.cache is not None:
                    self.cache.put(keys[i], "options", records[i],
                                   {"probs": probs, "mass": mass})
        return [r for r in results if r is not None]


def _completion_from_record(rec: dict[str, Any], cached: bool) -> Completion:
    fields = {k: rec[k] for k in ("text", "tokens_in", "tokens_out", "latency_s",
                                  "finish_reason", "tool_calls", "error") if k in rec}
    return Completion(**fields, cached=cached)
