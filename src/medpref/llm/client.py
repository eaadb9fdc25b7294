"""A role's view of a model: cache lookups, batching of misses, accounting, budget.

Every model call of every stage goes through :class:`LLMClient` — chat completions and
option scoring alike. It looks each request up in the content-addressed cache, sends only
the misses to the backend in one batch, and for each call: passes the budget guard just
before it is sent (the estimate is held until the server's reported usage is charged),
stores the answer the moment it arrives (a killed run loses at most the calls in flight),
tallies calls, hits, failures, real tokens, cost and latency in the stage's ledger, and
moves a progress bar. Failed calls are tallied but never cached; an authentication error
stops the run at once with the role and server named.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from medpref.llm.base import Backend
from medpref.llm.cache import ResponseCache, request_key
from medpref.llm.errors import AuthenticationError
from medpref.llm.ledger import Ledger, Price
from medpref.llm.progress import BatchProgress
from medpref.llm.types import (
    CallSpec,
    ChatRequest,
    Completion,
    GenerationParams,
    Message,
    OptionScores,
)

log = logging.getLogger(__name__)


def estimate_tokens(messages: Sequence[Message]) -> int:
    """A generous token count for the budget guard: ~4 ASCII characters per token, one
    token per other character (CJK text runs near one token per character)."""
    text = "".join(m.get("content") or "" for m in messages)
    ascii_chars = sum(1 for ch in text if ord(ch) < 128)
    return ascii_chars // 4 + (len(text) - ascii_chars) + 4 * len(messages) + 1


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
        self._told_loop_controls = False

    @property
    def identity(self) -> dict[str, Any]:
        return self.backend.identity()

    @property
    def model_id(self) -> str:
        ident = self.identity
        return f"{ident['backend']}:{ident['model']}" + (
            f"+{ident['adapter']}" if "adapter" in ident else "")

    def params(self, call: CallSpec, **overrides: Any) -> GenerationParams:
        """The role's decoding with ``call``'s token budget and the call's overrides
        (temperature, seed, stop, ...; the budget comes from ``call`` only)."""
        return self.defaults.with_overrides(max_new_tokens=call.max_new_tokens, **overrides)

    def request(self, messages: list[Message], call: CallSpec, tools: list[dict] | None = None,
                **overrides: Any) -> ChatRequest:
        """One conversation as ``call`` asks it (budget and answer prefix from ``call``)."""
        return ChatRequest.of(list(messages), self.params(call, **overrides), tools,
                              call.answer_prefix)

    # -- chat ---------------------------------------------------------------------------
    def _chat_request_record(self, req: ChatRequest) -> dict[str, Any]:
        rec = {"kind": "chat", **self.identity, "messages": list(req.messages),
               "params": req.params.cache_fields()}
        if req.tools:
            rec["tools"] = list(req.tools)
        if req.prefix:
            rec["prefix"] = req.prefix
        return rec

    def chat(self, messages: list[Message], call: CallSpec, tools: list[dict] | None = None,
             **overrides: Any) -> Completion:
        return self.chat_many([messages], call, tools=tools, **overrides)[0]

    def chat_many(self, conversations: Sequence[list[Message]], call: CallSpec,
                  tools: list[dict] | None = None, **overrides: Any) -> list[Completion]:
        """Answer many conversations as ``call`` asks them; misses go out in one batch.

        ``call.answer_prefix`` starts every answer (e.g. ``"Doctor:"``); it is not part of
        the text.
        """
        return self.complete([self.request(m, call, tools, **overrides) for m in conversations])

    def _without_loop_controls(self, requests: Sequence[ChatRequest]) -> list[ChatRequest]:
        """The requests as a backend without loop controls runs them (see
        ``Backend.loop_controls``), said once per client."""
        if self.backend.loop_controls:
            return list(requests)
        out = []
        for req in requests:
            dropped = req.params.loop_controls()
            if dropped and not self._told_loop_controls:
                log.warning("role '%s': %s takes no loop controls (loop_controls: false); "
                            "decoding without %s", self.role, self.backend.describe(),
                            ", ".join(f"{k} {v}" for k, v in dropped.items()))
                self._told_loop_controls = True
            out.append(dataclasses.replace(req, params=req.params.with_overrides(
                repetition_penalty=1.0, no_repeat_ngram_size=0)) if dropped else req)
        return out

    def complete(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        """Answer prepared requests (they may differ in settings, e.g. seeds)."""
        batch = self._chat_batch(requests)
        if batch.missing:
            with self._sending(*batch.sending()) as (gate, done):
                answers = self.backend.generate_gated(batch.todo(), done, gate)
            batch.fill(answers)
        return self._finish_chat(batch)

    def _chat_batch(self, requests: Sequence[ChatRequest]) -> _ChatBatch:
        """Requests looked up in the cache: the hits in place, the misses to send."""
        requests = self._without_loop_controls(requests)
        records = [self._chat_request_record(r) for r in requests]
        results, missing, keys = self._lookup(records, lambda hit: _completion_from_record(
            hit, cached=True))
        return _ChatBatch(self, requests, records, results, missing, keys)

    def _finish_chat(self, batch: _ChatBatch) -> list[Completion]:
        out = _fill_duplicates(batch.results)
        self._warn_identical_samples(batch.requests, out)
        return out

    def _lookup(self, records: list[dict], from_hit: Callable[[dict], Any]):
        """Cache hits in place; the indices to send (a repeat inside the batch is asked
        once and served like a hit, so calls + hits = requests)."""
        keys = [request_key(r) for r in records]
        results: list[Any] = [None] * len(records)
        missing: list[int] = []
        first_of_key: dict[str, int] = {}
        for i, key in enumerate(keys):
            hit = self.cache.get(key) if self.cache is not None else None
            if hit is not None:
                results[i] = from_hit(hit)
            elif key in first_of_key:
                results[i] = ("duplicate", first_of_key[key])
            else:
                first_of_key[key] = i
                missing.append(i)
        self.ledger.record_hit(self.role, len(records) - len(missing))
        return results, missing, keys

    def _send(self, kind: str, total: int, missing: list[int], estimates: list[float],
              store: Callable[[int, Any], None], run: Callable, as_completion: Callable):
        """Send the misses: gate, ledger, cache write and progress for each call."""
        with self._sending(kind, total, missing, estimates, store, as_completion) as (gate,
                                                                                     done):
            return run(gate, done)

    @contextlib.contextmanager
    def _sending(self, kind: str, total: int, missing: list[int], estimates: list[float],
                 store: Callable[[int, Any], None], as_completion: Callable):
        """The (gate, done) pair a backend run calls for the misses (gate before call
        ``j``, done with its answer), with the progress bar open and every held budget
        reservation released on the way out."""
        held: dict[int, float] = {}

        def gate(j: int) -> None:
            self.ledger.reserve(self.role, estimates[j])
            held[j] = estimates[j]

        with BatchProgress(f"{self.role} · {kind}", total, total - len(missing),
                           len(missing)) as bar:
            def done(j: int, answer: Any) -> None:
                comp = as_completion(answer)
                self.ledger.record_call(self.role, comp, self.price, reserved=held.pop(j, 0.0))
                store(j, answer)
                bar.update(comp.ok, comp.tokens_out)

            try:
                yield gate, done
            except AuthenticationError as exc:
                raise AuthenticationError(f"role '{self.role}': {exc}") from None
            finally:
                for j in list(held):
                    self.ledger.release(held.pop(j))

    def _warn_identical_samples(self, requests: Sequence[ChatRequest],
                                answers: Sequence[Completion]) -> None:
        """k sampled answers to one prompt that are all the same: the server most likely
        ignores temperature/seed (then Eq. 2's average is over one sample, k times)."""
        groups: dict[str, dict[Any, str]] = defaultdict(dict)
        for req, comp in zip(requests, answers):
            if req.params.sampled and comp.ok:
                groups[repr((req.messages, req.prefix))][req.params.seed] = comp.text
        sampled = [set(g.values()) for g in groups.values() if len(g) > 1]
        same = sum(1 for texts in sampled if len(texts) == 1)
        sampled = len(sampled)
        if sampled and same == sampled:
            log.warning("role '%s' (%s): all %d prompts sampled k>1 times got k identical "
                        "answers; the server may ignore temperature/seed", self.role,
                        self.backend.describe(), sampled)

    # -- option scoring -----------------------------------------------------------------
    def option_scores(self, prompts: Sequence[list[Message]], options: Sequence[str],
                      assistant_prefixes: Sequence[str] | str = "") -> list[OptionScores]:
        """p(option) of the next token after each assistant prefix (one forward pass).

        A failed call gives an ``OptionScores`` with ``error`` set, mass 0 and no probs,
        which the scorers count as unusable; it is recorded in the ledger, never cached."""
        if isinstance(assistant_prefixes, str):
            assistant_prefixes = [assistant_prefixes] * len(prompts)
        records = [{"kind": "options", **self.identity, "messages": list(p),
                    "options": list(options), "assistant_prefix": pre}
                   for p, pre in zip(prompts, assistant_prefixes)]
        # the cache stores canonical (key-sorted) JSON: a hit's probs come back in the
        # options' order, as a fresh call gives them, so records match cold or warm
        results, missing, keys = self._lookup(
            records, lambda hit: OptionScores(
                {o: hit["probs"][o] for o in options if o in hit["probs"]}
                | {o: v for o, v in hit["probs"].items() if o not in options},
                hit["mass"], cached=True))
        if missing:
            out_tokens = getattr(self.backend, "option_search_tokens", 1)
            estimates = [self.price.cost(estimate_tokens(prompts[i]), out_tokens)
                         for i in missing]

            def store(j: int, scores: OptionScores) -> None:
                if scores.ok and self.cache is not None:
                    self.cache.put(keys[missing[j]], "options", records[missing[j]],
                                   scores.to_record())

            scored = self._send("options", len(prompts), missing, estimates, store,
                                lambda gate, done: self.backend.score_options(
                                    [prompts[i] for i in missing], options,
                                    [assistant_prefixes[i] for i in missing], done, gate),
                                OptionScores.as_completion)
            for j, scores in enumerate(scored):
                results[missing[j]] = scores
        return _fill_duplicates(results)


@dataclasses.dataclass
class _ChatBatch:
    """One client's chat requests between the cache lookup and the answers: what
    :meth:`LLMClient.complete` and :func:`complete_across` send and store."""

    client: LLMClient
    requests: list[ChatRequest]
    records: list[dict[str, Any]]
    results: list[Any]
    missing: list[int]
    keys: list[str]

    def todo(self) -> list[ChatRequest]:
        return [self.requests[i] for i in self.missing]

    def store(self, j: int, comp: Completion) -> None:
        cache = self.client.cache
        if comp.ok and cache is not None:
            i = self.missing[j]
            cache.put(self.keys[i], "chat", self.records[i], comp.to_record())

    def sending(self) -> tuple:
        """The arguments of :meth:`LLMClient._sending` for these misses."""
        price = self.client.price
        estimates = [price.cost(estimate_tokens(r.messages), r.params.max_new_tokens)
                     for r in self.todo()]
        return ("chat", len(self.requests), self.missing, estimates, self.store, lambda c: c)

    def fill(self, answers: Sequence[Completion]) -> None:
        for j, comp in enumerate(answers):
            self.results[self.missing[j]] = comp


def complete_across(jobs: Sequence[tuple[LLMClient, Sequence[ChatRequest]]]
                    ) -> list[list[Completion]]:
    """Answer several clients' requests, the local models' misses in shared batches.

    ``jobs`` is a list of (client, requests), e.g. every policy's doctor turn of one SP
    round (each policy a client of the ``policy`` role with its adapter). Each client
    looks its requests up in the cache and records, stores and tallies its own calls as
    :meth:`LLMClient.complete` does (its cache key names its own adapter); when every
    client runs on a local ``hf`` model of one base (one folder, device and dtype), the
    misses of all of them are generated together (:class:`medpref.llm.hf.AdapterSet`:
    batches of the role's ``batch_size`` rows, each row through its own LoRA adapter).
    Otherwise each client answers its own, one after the other. Returns each job's
    completions in order."""
    batches = [client._chat_batch(requests) for client, requests in jobs]
    sending = [b for b in batches if b.missing]
    if len(sending) > 1 and _one_hf_base([b.client.backend for b in sending]):
        from medpref.llm.hf import AdapterSet

        backend = AdapterSet([b.client.backend for b in sending])
        with contextlib.ExitStack() as stack:
            hooks = [stack.enter_context(b.client._sending(*b.sending())) for b in sending]
            answers = backend.generate_parts(
                [b.todo() for b in sending],
                on_complete=lambda k, j, comp: hooks[k][1](j, comp),
                before_call=lambda k, j: hooks[k][0](j))
        for b, part in zip(sending, answers):
            b.fill(part)
    else:
        for b in sending:
            with b.client._sending(*b.sending()) as (gate, done):
                b.fill(b.client.backend.generate_gated(b.todo(), done, gate))
    return [b.client._finish_chat(b) for b in batches]


def _one_hf_base(backends: Sequence[Backend]) -> bool:
    """Every backend a local hf model of the same weights, device and dtype."""
    from medpref.llm.hf import HFBackend, _resolve_device

    if not all(isinstance(b, HFBackend) for b in backends):
        return False
    return len({(b.identity()["weights"], _resolve_device(b.device), b.dtype)
                for b in backends}) == 1


def _fill_duplicates(results: list[Any]) -> list[Any]:
    return [results[r[1]] if isinstance(r, tuple) else r for r in results]


def _completion_from_record(rec: dict[str, Any], cached: bool) -> Completion:
    fields = {k: rec[k] for k in ("text", "tokens_in", "tokens_out", "latency_s",
                                  "finish_reason", "tool_calls", "error") if k in rec}
    return Completion(**fields, cached=cached)
