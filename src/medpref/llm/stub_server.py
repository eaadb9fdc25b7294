"""A tiny OpenAI-compatible chat server on loopback, for tests and benchmarks.

It answers ``POST /v1/chat/completions`` after ``latency_s`` with a deterministic echo,
can fail on purpose (a scripted list of HTTP status codes to return first), and records
the peak number of requests in flight, so tests can check retries and the concurrency
bound without any network. With ``option_logprobs`` it answers ``logprobs`` requests:
the reply text is split into word tokens and the token after ``Score:`` (or, when the last
message is an assistant prefix being continued, the first token) carries those
alternatives as its ``top_logprobs``. Start it with ``with StubServer(...) as server:``; its
``base_url`` goes into the variable that the role's server config names.

Faults it can inject, for the tests that check a run fails or recovers the right way:
``retry_after`` (a ``Retry-After`` header on every error), ``echo_key`` (error bodies quote
the key they were sent, as some servers do), ``fail_when`` (requests whose last message
contains a text always get ``fail_status``), ``reply=None`` (a null completion),
``usage`` (the token counts it bills, whatever it generated) and ``logprobs=False`` (it
ignores log-prob requests, as ``transformers serve`` does). ``request_times`` records when
each request arrived.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Server(ThreadingHTTPServer):
    # the default listen backlog (5) drops connections when many clients connect at once,
    # and a dropped SYN is retried after ~1 s: that would measure TCP, not the backend
    request_queue_size = 128


class StubServer:
    def __init__(self, latency_s: float = 0.0, fail_with: list[int] | None = None,
                 always_fail: int | None = None, reply: str | None = "stub answer",
                 option_logprobs: dict[str, float] | None = None,
                 retry_after: float | None = None, echo_key: bool = False,
                 fail_when: str | None = None, fail_status: int = 503,
                 usage: tuple[int, int] | None = None, logprobs: bool = True):
        self.latency_s = latency_s
        self.retry_after = retry_after
        self.echo_key = echo_key
        self.fail_when = fail_when
        self.fail_status = fail_status
        self.usage = usage
        self.logprobs = logprobs
        self.request_times: list[float] = []
        self.fail_with = list(fail_with or [])
        self.always_fail = always_fail
        self.reply = reply
        self.option_logprobs = dict(option_logprobs or {})
        self.requests: list[dict] = []
        self.auth_headers: list[str] = []
        self.in_flight = 0
        self.peak_in_flight = 0
        self._lock = threading.Lock()
        self._httpd = _Server(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> StubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _next_status(self, body: dict) -> int:
        last = str(body.get("messages", [{}])[-1].get("content", ""))
        if self.fail_when is not None and self.fail_when in last:
            return self.fail_status
        with self._lock:
            if self.always_fail is not None:
                return self.always_fail
            return self.fail_with.pop(0) if self.fail_with else 200

    def _logprobs(self, body: dict, text: str) -> dict:
        continuing = body["messages"][-1]["role"] == "assistant"
        tokens = re.findall(r"\s*\S+", text)[:1 if continuing else body.get("max_tokens")]
        options = [{"token": f" {o}", "logprob": lp} for o, lp in self.option_logprobs.items()]
        content, seen = [], ""
        for i, tok in enumerate(tokens):
            at_option = (i == 0) if continuing else seen.rstrip().endswith("Score:")
            top = options if at_option else [{"token": tok, "logprob": -0.01}]
            content.append({"token": tok, "logprob": top[0]["logprob"], "top_logprobs": top})
            seen += tok
        return {"content": content}

    def _answer(self, body: dict) -> dict:
        last = body["messages"][-1]["content"]
        if self.reply is None:
            text = None
        else:
            text = self.reply if body.get("logprobs") or not self.reply else \
                f"{self.reply}: {last[:40]}"
        choice = {"index": 0, "finish_reason": "stop",
                  "message": {"role": "assistant", "content": text}}
        if body.get("logprobs") and self.logprobs and text:
            choice["logprobs"] = self._logprobs(body, text)
        text = text or ""
        n_in, n_out = self.usage or (len(last.split()), len(text.split()))
        return {"id": "stub", "object": "chat.completion", "created": 0,
                "model": body.get("model", "stub"),
                "choices": [choice],
                "usage": {"prompt_tokens": n_in, "completion_tokens": n_out,
                          "total_tokens": n_in + n_out}}

    def _error(self, status: int, auth: str) -> dict:
        message = f"stub error {status}"
        if self.echo_key:
            message += f": the key provided was {auth.removeprefix('Bearer ')}"
        return {"error": {"message": message, "type": "stub"}}

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def do_POST(self):  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    server.request_times.append(time.monotonic())
                    server.requests.append(body)
                    server.auth_headers.append(self.headers.get("Authorization", ""))
                    server.in_flight += 1
                    server.peak_in_flight = max(server.peak_in_flight, server.in_flight)
                try:
                    time.sleep(server.latency_s)
                    status = server._next_status(body)
                    payload = (server._answer(body) if status == 200 else
                               server._error(status, self.headers.get("Authorization", "")))
                    data = json.dumps(payload).encode()
                    self.send_response(status)
                    if status != 200 and server.retry_after is not None:
                        self.send_header("Retry-After", f"{server.retry_after:g}")
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                finally:
                    with server._lock:
                        server.in_flight -= 1

        return Handler
