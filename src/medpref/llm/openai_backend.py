"""Any OpenAI-compatible chat server: OpenAI itself, vLLM, Ollama, llama.cpp's server.

The base URL and key come from environment variables whose *names* are set in params
(defaults ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``), read when the backend is built,
never at import time. The key is never part of the backend's identity, so it cannot
reach the cache, a ledger or a log. Calls run with bounded concurrency; 429, 5xx,
time-outs and connection errors are retried with exponential backoff and jitter, then
returned as a recorded failure (``Completion.error``), which is never cached.

Option scoring (the REM's expected score, Σ s·p(s)) reads ``top_logprobs``: with
``continue_prefix`` the server continues the assistant prefix (vLLM's
``continue_final_message``) and the first generated token is the option; otherwise the
model answers plainly and the position right after the prefix's text (``Score:``) in its
greedy answer is read. Options are matched on the stripped token text.
"""

from __future__ import annotations

import math
import os
import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from medpref.llm.base import Backend, OnComplete
from medpref.llm.errors import BackendConfigError, BackendError
from medpref.llm.types import ChatRequest, Completion, Message

RETRYABLE_STATUS = {408, 409, 429, 500, 502, 503, 504}


def _is_retryable(exc: Exception) -> bool:
    import openai

    if isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError,
                        openai.RateLimitError, openai.InternalServerError)):
        return True
    return isinstance(exc, openai.APIStatusError) and exc.status_code in RETRYABLE_STATUS


class OpenAIBackend(Backend):
    kind = "openai"

    def __init__(self, model: str, base_url_env: str = "OPENAI_BASE_URL",
                 api_key_env: str = "OPENAI_API_KEY", max_concurrency: int = 8,
                 max_retries: int = 4, backoff_s: float = 1.0, timeout_s: float = 60.0,
                 base_url: str | None = None, continue_prefix: bool = False,
                 top_logprobs: int = 20, option_search_tokens: int = 24):
        import openai

        self.model = model
        self.base_url = base_url or os.environ.get(base_url_env) or None
        key = os.environ.get(api_key_env)
        if not key:
            if self.base_url is None:
                raise BackendConfigError(
                    f"the openai backend needs an API key in ${api_key_env} (or a local "
                    f"server URL in ${base_url_env}, which may run without a key)")
            key = "not-needed"  # local OpenAI-compatible servers accept any key
        self.max_concurrency = max(1, max_concurrency)
        self.max_retries = max(0, max_retries)
        self.backoff_s = backoff_s
        self.continue_prefix = continue_prefix
        self.top_logprobs = top_logprobs
        self.option_search_tokens = option_search_tokens
        self._client = openai.OpenAI(api_key=key, base_url=self.base_url, max_retries=0,
                                     timeout=timeout_s)
        self._rng = random.Random(0)
        self._rng_lock = threading.Lock()

    def identity(self) -> dict[str, Any]:
        # The server's host is not part of the identity: the same model served by vLLM
        # or by OpenAI answers alike for caching purposes; the key is never included.
        return {"backend": self.kind, "model": self.model}

    def generate(self, requests: Sequence[ChatRequest],
                 on_complete: OnComplete | None = None) -> list[Completion]:
        results: list[Completion | None] = [None] * len(requests)

        def run(i: int) -> None:
            comp = self._call_with_retries(requests[i])
            results[i] = comp
            if on_complete is not None:
                on_complete(i, comp)

        with ThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
            list(pool.map(run, range(len(requests))))
        return [r for r in results if r is not None]

    def _sleep_before_retry(self, attempt: int) -> None:
        with self._rng_lock:
            jitter = self._rng.uniform(0, 0.5)
        time.sleep(self.backoff_s * (2 ** attempt) * (1 + jitter))

    def option_probs(self, prompts: Sequence[list[Message]], options: Sequence[str],
                     assistant_prefixes: Sequence[str]) -> list[tuple[dict[str, float], float]]:
        """p(option) of the token after each prefix, from the server's top log-probs.

        A call that still fails after its retries raises :class:`BackendError` (an option
        distribution has no "failed" value that could be recorded instead)."""
        def run(i: int) -> tuple[dict[str, float], float]:
            return self._with_retries(lambda: self._options_once(
                prompts[i], options, assistant_prefixes[i]))

        with ThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
            out = list(pool.map(run, range(len(prompts))))
        for i, got in enumerate(out):
            if isinstance(got, str):
                raise BackendError(f"option scoring of prompt {i} failed: {got}")
        return out

    def _options_once(self, messages: list[Message], options: Sequence[str],
                      prefix: str) -> tuple[dict[str, float], float]:
        kwargs: dict[str, Any] = {"model": self.model, "temperature": 0.0, "logprobs": True,
                                  "top_logprobs": self.top_logprobs}
        if self.continue_prefix:
            kwargs.update(messages=[*messages, {"role": "assistant", "content": prefix}],
                          max_tokens=1, extra_body={"continue_final_message": True,
                                                    "add_generation_prompt": False})
        else:
            kwargs.update(messages=list(messages), max_tokens=self.option_search_tokens)
        resp = self._client.chat.completions.create(**kwargs)
        logprobs = getattr(resp.choices[0], "logprobs", None)
        content = list(getattr(logprobs, "content", None) or [])
        if not content:
            raise BackendError(f"the server returned no logprobs for model '{self.model}'")
        position = 0 if self.continue_prefix else option_position(
            [c.token for c in content], prefix)
        if position is None:  # the answer never reached the prefix: no option was read
            return {o: 1 / len(options) for o in options}, 0.0
        return option_distribution(content[position].top_logprobs, options)

    def _call_with_retries(self, req: ChatRequest) -> Completion:
        t0 = time.perf_counter()
        got = self._with_retries(lambda: self._call_once(req, t0))
        if isinstance(got, str):
            return Completion(text="", error=got, latency_s=time.perf_counter() - t0)
        return got

    def _with_retries(self, call):
        """``call()``, retried on transient errors; an error message (str) when it gives up."""
        last_error = ""
        for attempt in range(self.max_retries + 1):
            try:
                return call()
            except Exception as exc:  # noqa: BLE001 - classified just below
                if not _is_retryable(exc):
                    return f"{type(exc).__name__}: {exc}"
                last_error = f"{type(exc).__name__}: {exc}"
                if attempt < self.max_retries:
                    self._sleep_before_retry(attempt)
        return f"gave up after {self.max_retries + 1} attempts: {last_error}"

    def _call_once(self, req: ChatRequest, t0: float) -> Completion:
        p = req.params
        kwargs: dict[str, Any] = {"model": self.model, "messages": list(req.messages),
                                  "max_tokens": p.max_new_tokens,
                                  "temperature": p.temperature}
        if p.sampled:
            kwargs.update(top_p=p.top_p, seed=p.seed)
        if p.stop:
            kwargs["stop"] = list(p.stop)
        if req.tools:
            kwargs["tools"] = list(req.tools)
        resp = self._client.chat.completions.create(**kwargs)
        choice = resp.choices[0]
        tool_calls = None
        if getattr(choice.message, "tool_calls", None):
            tool_calls = [{"name": tc.function.name, "arguments": tc.function.arguments}
                          for tc in choice.message.tool_calls]
        usage = resp.usage
        text = (choice.message.content or "").strip()
        if req.prefix and text.startswith(req.prefix.strip()):
            text = text[len(req.prefix.strip()):].strip()
        return Completion(text=text,
                          tokens_in=getattr(usage, "prompt_tokens", 0) or 0,
                          tokens_out=getattr(usage, "completion_tokens", 0) or 0,
                          latency_s=time.perf_counter() - t0,
                          finish_reason=choice.finish_reason, tool_calls=tool_calls)


def option_position(tokens: Sequence[str], prefix: str) -> int | None:
    """Index of the first generated token after the text of ``prefix`` (e.g. ``Score:``)
    in a greedy answer; 0 when the prefix is empty, None when the answer never writes it
    (or writes it as its last token)."""
    anchor = prefix.strip()
    if not anchor:
        return 0
    text = ""
    for i, token in enumerate(tokens):
        if text.rstrip().endswith(anchor):
            return i
        text += token
    return None


def option_distribution(top_logprobs, options: Sequence[str]) -> tuple[dict[str, float], float]:
    """(p renormalised over the options, their total mass) from one position's top
    log-probs; candidates are matched on stripped text, so ' 2' and '2' both count."""
    mass = {o: 0.0 for o in options}
    for cand in top_logprobs or []:
        text = cand.token.strip() if hasattr(cand, "token") else str(cand["token"]).strip()
        lp = cand.logprob if hasattr(cand, "logprob") else cand["logprob"]
        if text in mass:
            mass[text] += math.exp(lp)
    total = sum(mass.values())
    if total <= 0:
        return {o: 1 / len(options) for o in options}, 0.0
    return {o: v / total for o, v in mass.items()}, total
