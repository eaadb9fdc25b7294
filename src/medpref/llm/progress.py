"""A progress bar over one batch of model calls: calls, cache hits, failures, tokens/s.

Shown for every batch that sends at least one call and has more than one request (single
calls in a loop would print a bar each). It writes to stdout, so an executed notebook
shows it as plain output rather than a red stderr block. ``MEDPREF_PROGRESS=0`` turns it
off (read when a batch starts, not at import).
"""

from __future__ import annotations

import os
import sys
import threading
import time

from tqdm.std import tqdm


def progress_enabled() -> bool:
    return os.environ.get("MEDPREF_PROGRESS", "1").lower() not in {"0", "false", "no", "off"}


class BatchProgress:
    def __init__(self, label: str, total: int, hits: int, to_send: int):
        self.hits = hits
        self.calls = self.failures = self.tokens_out = 0
        self._t0 = time.perf_counter()
        self._lock = threading.Lock()
        self._bar = None
        if to_send > 0 and total > 1 and progress_enabled():
            self._bar = tqdm(total=total, initial=hits, desc=label, unit="req",
                             file=sys.stdout, mininterval=0.5, dynamic_ncols=False, ncols=100,
                             leave=True)
            self._show()

    def _show(self) -> None:
        elapsed = max(1e-9, time.perf_counter() - self._t0)
        self._bar.set_postfix_str(f"calls={self.calls} hits={self.hits} "
                                  f"failed={self.failures} tok/s={self.tokens_out / elapsed:.1f}",
                                  refresh=False)

    def update(self, ok: bool, tokens_out: int) -> None:
        with self._lock:
            self.calls += 1
            self.failures += 0 if ok else 1
            self.tokens_out += tokens_out
            if self._bar is not None:
                self._show()
                self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._show()
            self._bar.close()

    def __enter__(self) -> BatchProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
