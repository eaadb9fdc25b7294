"""A persistent, content-addressed cache of every model call.

The key is the SHA-256 of a canonical JSON of everything that determines an answer:
backend, model (with adapter), the full messages, the generation settings and, for
sampled calls only, the seed. Editing one character of a prompt therefore misses.

Storage is one SQLite file per writer (a DVC stage writes its own file, declared as a
persistent output), opened in WAL mode so that threads and processes can write
concurrently. Reads also look in every other ``*.sqlite`` file of the same folder, so a
completion made by one stage is a hit for the next. Raw completions are stored; parsing
happens outside the cache, so a parser can change without a new call.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1

_DDL = """
CREATE TABLE IF NOT EXISTS completions (
    key      TEXT PRIMARY KEY,
    kind     TEXT NOT NULL,
    request  TEXT NOT NULL,
    response TEXT NOT NULL,
    created  REAL NOT NULL
)"""


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def request_key(request: dict[str, Any]) -> str:
    """Content address of a request description (already free of secrets)."""
    payload = {"schema": SCHEMA_VERSION, **request}
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()


def _connect(path: Path, readonly: bool) -> sqlite3.Connection:
    if readonly:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False,
                               timeout=30)
    else:
        conn = sqlite3.connect(path, check_same_thread=False, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(_DDL)
        conn.commit()
    return conn


class ResponseCache:
    """SQLite-backed cache; ``path`` is this writer's file, its folder is searched on reads."""

    def __init__(self, path: str | Path, read_siblings: bool = True):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = _connect(self.path, readonly=False)
        self._siblings: list[sqlite3.Connection] = []
        if read_siblings:
            for other in sorted(self.path.parent.glob("*.sqlite")):
                if other.resolve() != self.path.resolve():
                    self._siblings.append(_connect(other, readonly=True))

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            for conn in (self._conn, *self._siblings):
                try:
                    row = conn.execute("SELECT response FROM completions WHERE key = ?",
                                       (key,)).fetchone()
                except sqlite3.OperationalError:  # a sibling without the table yet
                    continue
                if row is not None:
                    return json.loads(row[0])
        return None

    def put(self, key: str, kind: str, request: dict[str, Any], response: dict[str, Any]) -> None:
        """Store one completion now (each call is written as it completes)."""
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO completions VALUES (?, ?, ?, ?, ?)",
                (key, kind, canonical_json(request), canonical_json(response), time.time()),
            )
            self._conn.commit()

    def __len__(self) -> int:
        with self._lock:
            return self._conn.execute("SELECT COUNT(*) FROM completions").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            for conn in (self._conn, *self._siblings):
                conn.close()
            self._siblings = []
