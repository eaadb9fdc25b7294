"""Keep secrets out of everything a run writes: records, logs, reports, cache keys.

A server's error body may echo the key it was sent, and a base URL may carry
``user:pass@``. Every error text from a backend goes through :func:`redact` before it
becomes a ``Completion.error``, an exception message or a log line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit, urlunsplit

REDACTED = "***"
_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@")
#: secrets shorter than this are not searched for (a placeholder like "x" would blank text)
MIN_SECRET_LEN = 6


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with every configured secret and every ``user:pass@`` of a URL masked."""
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", str(text))
    for secret in secrets:
        if secret and len(secret) >= MIN_SECRET_LEN:
            text = text.replace(secret, REDACTED)
    return text


def url_without_credentials(url: str | None) -> str | None:
    """A base URL as it may appear in a cache key or a message (no user, no password)."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), parts.query, ""))
