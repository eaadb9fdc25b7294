"""Any OpenAI-compatible chat server: OpenAI itself, vLLM, Ollama, ``transformers serve``.

The base URL and key come from environment variables whose *names* are set in params
(defaults ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``), read when the backend is built,
never at import time. The key never reaches the cache, a ledger, a record or a log:
every error text is redacted (the key, any ``user:pass@``) before it leaves this module.
The server's URL (without credentials) is part of the backend's identity, so two servers
never share cache entries.

Calls and retries:

* one retry policy (tenacity, below): 408/409/429/5xx, time-outs and connection errors
  are retried with exponential backoff and jitter, or after the server's ``Retry-After``;
  every call has one total deadline (``deadline_s``) that its attempts and waits share;
* 401/403 stop the run at once (:class:`AuthenticationError`, no retry);
* any other failure, or an empty/null answer, is returned as a recorded failure
  (``Completion.error`` / ``OptionScores.error``), which is never cached;
* ``before_call(i)`` runs before request ``i`` is sent (the client's budget guard), so a
  batch stops as soon as the spend reported so far would pass the budget.

The assistant prefix (``"Doctor:"``, ``"Score:"``) is pre-filled as the hf backend does when
the server can continue an assistant message (``continue_prefix``: vLLM's
``continue_final_message``); otherwise the model is asked to start with it
(``prefix_instruction``) and an echoed prefix is removed from the answer.

Option scoring (the REM's expected score, Σ s·p(s)) reads ``top_logprobs``: with
``continue_prefix`` the first generated token is the option; otherwise the position right
after the prefix's text in a short greedy answer is read. Whether the server returns
log-probs at all is checked on the first call; if not, the run stops with a message that
names the mode to use instead.
"""

from __future__ import annotations

import email.utils
import math
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

import tenacity

from medpref.llm.base import Backend, CallGate, OnComplete, OnOptions
from medpref.llm.errors import (
    FATAL_ERRORS,
    AuthenticationError,
    BackendConfigError,
    BackendError,
)
from medpref.llm.redact import redact, url_without_credentials
from medpref.llm.types import ChatRequest, Completion, Message, OptionScores

RETRYABLE_STATUS = {408, 409, 429, 500, 502, 503, 504}
AUTH_STATUS = {401, 403}
OPENAI_URL = "https://api.openai.com/v1"
#: servers that bill per token: a model there needs a price (or ``free: true``)
PAID_HOSTS = {"api.openai.com"}
NO_LOGPROBS_HINT = ("option scoring needs log-probs: use the sampled mode instead "
                    "(rem.compliance_scorers / annotation.rem_scorer: a rem.scorers entry "
                    "with mode: sampled; imapscore.relation_mode: generate; "
                    "simulation.grader.mode: generate; simulation.rem_scorer: a sampled or "
                    "fitted rem.scorers entry), or a server that returns them (vLLM, OpenAI)")


class EmptyCompletion(Exception):
    """The server answered 200 with no text and no tool call."""


def _status(exc: BaseException) -> int | None:
    return getattr(exc, "status_code", None)


def is_retryable(exc: BaseException) -> bool:
    import openai

    if isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError)):
        return True
    return _status(exc) in RETRYABLE_STATUS


def retry_after_s(exc: BaseException) -> float | None:
    """Seconds the server asked us to wait (``Retry-After``: seconds or an HTTP date;
    ``retry-after-ms``), or None."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    if headers.get("retry-after-ms"):
        try:
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time()) if when else None


def is_paid_server(base_url: str | None) -> bool:
    """OpenAI's own API (the default when no base URL is set) bills every token."""
    return base_url is None or (urlsplit(base_url).hostname or "") in PAID_HOSTS


class OpenAIBackend(Backend):
    kind = "openai"

    def __init__(self, model: str, base_url_env: str = "OPENAI_BASE_URL",
                 api_key_env: str = "OPENAI_API_KEY", max_concurrency: int = 4,
                 max_retries: int = 3, backoff_s: float = 2.0, timeout_s: float = 300.0,
                 deadline_s: float = 900.0, base_url: str | None = None,
                 continue_prefix: bool = False, top_logprobs: int = 20,
                 option_search_tokens: int = 24, server: str = "openai",
                 prefix_instruction: str = 'Start your reply with "{prefix}".',
                 max_backoff_s: float = 60.0, loop_controls: bool = True,
                 logprobs: bool = True):
        import openai

        self.model = model
        self.loop_controls = loop_controls
        self.server = server
        self.base_url = base_url or os.environ.get(base_url_env) or None
        self.api_key_env = api_key_env
        key = os.environ.get(api_key_env)
        if not key:
            if self.base_url is None:
                raise BackendConfigError(
                    f"the openai backend needs an API key in ${api_key_env} (or a local "
                    f"server URL in ${base_url_env}, which may run without a key)")
            key = "not-needed"  # local OpenAI-compatible servers accept any key
        self._secrets = (key, self.base_url)
        self.paid = is_paid_server(self.base_url)
        self.max_concurrency = max(1, max_concurrency)
        self.max_retries = max(0, max_retries)
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.timeout_s = timeout_s
        self.deadline_s = deadline_s
        self.continue_prefix = continue_prefix
        self.prefix_instruction = prefix_instruction
        self.top_logprobs = top_logprobs
        #: False: the server says it returns no log-probs, so an option call is refused
        #: before any request (params refuse option-scoring settings on it at load)
        self.logprobs = logprobs
        self.option_search_tokens = option_search_tokens
        # retries live in _retrying() only: the client's own retry loop is off
        self._client = openai.OpenAI(api_key=key, base_url=self.base_url, max_retries=0,
                                     timeout=timeout_s)
        self._rng = random.Random(0)
        self._rng_lock = threading.Lock()
        self._logprobs_ok: bool | None = None  # checked on the first option call
        self._logprobs_lock = threading.Lock()

    # -- identity and messages -------------------------------------------------------------
    @property
    def server_url(self) -> str:
        return url_without_credentials(self.base_url or OPENAI_URL) or OPENAI_URL

    def identity(self) -> dict[str, Any]:
        # the server is part of the identity (two servers may serve different weights under
        # one name); its URL carries no credentials, and the key is never included
        return {"backend": self.kind, "model": self.model, "server": self.server_url}

    def describe(self) -> str:
        return f"server '{self.server}' ({self.server_url})"

    def redact(self, text: str) -> str:
        return redact(text, self._secrets)

    def _with_prefix(self, messages: Sequence[Message], prefix: str) -> tuple[list, dict]:
        """Messages (and extra body) that start the answer with ``prefix``."""
        messages = [dict(m) for m in messages]
        if not prefix:
            return messages, {}
        if self.continue_prefix:
            return ([*messages, {"role": "assistant", "content": prefix}],
                    {"continue_final_message": True, "add_generation_prompt": False})
        if self.prefix_instruction and messages and messages[-1]["role"] == "user":
            note = self.prefix_instruction.format(prefix=prefix.strip())
            messages[-1]["content"] = f"{messages[-1]['content']}\n\n{note}"
        return messages, {}

    # -- retries: the one place ------------------------------------------------------------
    def _wait(self, rs: tenacity.RetryCallState) -> float:
        exc = rs.outcome.exception() if rs.outcome else None
        asked = retry_after_s(exc) if exc is not None else None
        if asked is not None:
            return asked
        with self._rng_lock:
            jitter = self._rng.uniform(0, 0.5)
        return min(self.max_backoff_s, self.backoff_s * 2 ** (rs.attempt_number - 1)) * (1 + jitter)

    def _stop(self, rs: tenacity.RetryCallState) -> bool:
        if rs.attempt_number > self.max_retries:
            return True
        return rs.seconds_since_start + rs.upcoming_sleep >= self.deadline_s

    def _call(self, send: Callable[[float], Any]) -> Any:
        """``send(timeout)`` under the retry policy and the call's total deadline."""
        started = time.monotonic()

        def attempt() -> Any:
            left = self.deadline_s - (time.monotonic() - started)
            return send(max(1.0, min(self.timeout_s, left)))

        retrying = tenacity.Retrying(retry=tenacity.retry_if_exception(is_retryable),
                                     wait=self._wait, stop=self._stop, reraise=True)
        try:
            return retrying(attempt)
        except Exception as exc:  # noqa: BLE001 - classified here, once
            raise self._classify(exc, retrying.statistics.get("attempt_number", 1)) from None

    def _classify(self, exc: Exception, attempts: int) -> Exception:
        """The error to raise or record, with every secret removed."""
        if isinstance(exc, FATAL_ERRORS + (BackendError,)):
            return exc
        message = self.redact(f"{type(exc).__name__}: {exc}")
        if _status(exc) in AUTH_STATUS:
            return AuthenticationError(
                f"{self.describe()} refused the credentials (HTTP {_status(exc)}) for model "
                f"'{self.model}'; check ${self.api_key_env}. Not retried. {message}"[:400])
        if isinstance(exc, EmptyCompletion):
            return _RecordedFailure("empty completion (the server returned no text)")
        if is_retryable(exc):
            return _RecordedFailure(f"gave up after {attempts} attempts "
                                    f"(deadline {self.deadline_s:g}s): {message}")
        return _RecordedFailure(message)

    # -- chat --------------------------------------------------------------------------------
    def generate(self, requests: Sequence[ChatRequest],
                 on_complete: OnComplete | None = None) -> list[Completion]:
        return self.generate_gated(requests, on_complete)

    def generate_gated(self, requests: Sequence[ChatRequest],
                       on_complete: OnComplete | None = None,
                       before_call: CallGate | None = None) -> list[Completion]:
        return self._run_all(len(requests), lambda i: self._complete(requests[i]),
                             on_complete, before_call)

    def _run_all(self, n: int, one: Callable[[int], Any], on_complete, before_call) -> list:
        """Run ``one(i)`` for every i with bounded concurrency; the first fatal error
        (authentication, budget, no log-probs) stops the rest and is raised."""
        results: list[Any] = [None] * n
        fatal: list[Exception] = []

        def run(i: int) -> None:
            if fatal:
                return
            try:
                if before_call is not None:
                    before_call(i)
                results[i] = one(i)
            except FATAL_ERRORS + (BackendError,) as exc:
                fatal.append(exc)
                return
            if on_complete is not None:
                on_complete(i, results[i])

        with ThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
            list(pool.map(run, range(n)))
        if fatal:
            raise fatal[0]
        return results

    def _complete(self, req: ChatRequest) -> Completion:
        t0 = time.perf_counter()
        try:
            return self._call(lambda timeout: self._chat_once(req, t0, timeout))
        except _RecordedFailure as failure:
            return Completion(text="", error=str(failure), latency_s=time.perf_counter() - t0)

    def _chat_once(self, req: ChatRequest, t0: float, timeout: float) -> Completion:
        p = req.params
        messages, extra = self._with_prefix(req.messages, req.prefix)
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages,
                                  "max_tokens": p.max_new_tokens,
                                  "temperature": p.temperature, "timeout": timeout}
        if p.sampled:
            kwargs.update(top_p=p.top_p, seed=p.seed)
        if p.stop:
            kwargs["stop"] = list(p.stop)
        if req.tools:
            kwargs["tools"] = list(req.tools)
        extra = {**(extra or {}), **p.loop_controls()}   # vLLM-style sampling extras, when on
        if extra:
            kwargs["extra_body"] = extra
        resp = self._client.chat.completions.create(**kwargs)
        if not resp.choices:
            raise EmptyCompletion()
        choice = resp.choices[0]
        tool_calls = None
        if getattr(choice.message, "tool_calls", None):
            tool_calls = [{"name": tc.function.name, "arguments": tc.function.arguments}
                          for tc in choice.message.tool_calls]
        text = (choice.message.content or "").strip()
        if req.prefix and text.startswith(req.prefix.strip()):
            text = text[len(req.prefix.strip()):].strip()
        if not text and not tool_calls:
            raise EmptyCompletion()
        usage = resp.usage
        return Completion(text=text,
                          tokens_in=getattr(usage, "prompt_tokens", 0) or 0,
                          tokens_out=getattr(usage, "completion_tokens", 0) or 0,
                          latency_s=time.perf_counter() - t0,
                          finish_reason=choice.finish_reason, tool_calls=tool_calls)

    # -- option scoring ----------------------------------------------------------------------
    def score_options(self, prompts: Sequence[list[Message]], options: Sequence[str],
                      assistant_prefixes: Sequence[str], on_complete: OnOptions | None = None,
                      before_call: CallGate | None = None) -> list[OptionScores]:
        """p(option) after each prefix from top log-probs, one call per prompt; a failed
        call is an ``OptionScores`` with ``error`` set (the scorers skip it)."""
        if not self.logprobs and prompts:   # declared: refused at once, nothing is sent
            raise BackendError(f"{self.describe()} declares `logprobs: false` "
                               f"(shared.llm.servers.{self.server}.logprobs), so model "
                               f"'{self.model}' cannot score answer options; {NO_LOGPROBS_HINT}")
        if self._logprobs_ok is None and prompts:  # the first call alone: checks support
            first = self._run_all(1, lambda i: self._options(prompts[0], options,
                                                             assistant_prefixes[0]),
                                  on_complete, before_call)
            rest = self._run_all(len(prompts) - 1, lambda i: self._options(
                prompts[i + 1], options, assistant_prefixes[i + 1]),
                None if on_complete is None else lambda i, s: on_complete(i + 1, s),
                None if before_call is None else lambda i: before_call(i + 1))
            return first + rest
        return self._run_all(len(prompts), lambda i: self._options(
            prompts[i], options, assistant_prefixes[i]), on_complete, before_call)

    def option_probs(self, prompts: Sequence[list[Message]], options: Sequence[str],
                     assistant_prefixes: Sequence[str]) -> list[tuple[dict[str, float], float]]:
        """(probs, mass) per prompt; raises :class:`BackendError` on a failed call (the
        client uses :meth:`score_options`, which records failures instead)."""
        scored = self.score_options(prompts, options, assistant_prefixes)
        for i, s in enumerate(scored):
            if not s.ok:
                raise BackendError(f"option scoring of prompt {i} failed: {s.error}")
        return [(s.probs, s.mass) for s in scored]

    def _options(self, messages: list[Message], options: Sequence[str],
                 prefix: str) -> OptionScores:
        t0 = time.perf_counter()
        try:
            return self._call(lambda timeout: self._options_once(messages, options, prefix,
                                                                 t0, timeout))
        except _RecordedFailure as failure:
            return OptionScores({}, 0.0, error=str(failure), latency_s=time.perf_counter() - t0)

    def _options_once(self, messages: list[Message], options: Sequence[str], prefix: str,
                      t0: float, timeout: float) -> OptionScores:
        kwargs: dict[str, Any] = {"model": self.model, "temperature": 0.0, "logprobs": True,
                                  "top_logprobs": self.top_logprobs, "timeout": timeout}
        if self.continue_prefix:
            msgs, extra = self._with_prefix(messages, prefix)
            kwargs.update(messages=msgs, max_tokens=1, extra_body=extra)
        else:
            kwargs.update(messages=list(messages), max_tokens=self.option_search_tokens)
        resp = self._client.chat.completions.create(**kwargs)
        logprobs = getattr(resp.choices[0], "logprobs", None) if resp.choices else None
        content = list(getattr(logprobs, "content", None) or [])
        self._check_logprobs(bool(content))
        usage = resp.usage
        counts = {"tokens_in": getattr(usage, "prompt_tokens", 0) or 0,
                  "tokens_out": getattr(usage, "completion_tokens", 0) or 0,
                  "latency_s": time.perf_counter() - t0}
        position = 0 if self.continue_prefix else option_position(
            [c.token for c in content], prefix)
        if position is None:  # the answer never reached the prefix: no option was read
            return OptionScores({o: 1 / len(options) for o in options}, 0.0, **counts)
        probs, mass = option_distribution(content[position].top_logprobs, options)
        return OptionScores(probs, mass, **counts)

    def _check_logprobs(self, present: bool) -> None:
        """Once per backend: a server that returns no log-probs stops the run."""
        with self._logprobs_lock:
            if present:
                self._logprobs_ok = True
            elif not self._logprobs_ok:
                self._logprobs_ok = False
                raise BackendError(f"{self.describe()} returned no log-probs for model "
                                   f"'{self.model}'; {NO_LOGPROBS_HINT}")


class _RecordedFailure(Exception):
    """A call that failed for good; its (redacted) message becomes the recorded error."""


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
