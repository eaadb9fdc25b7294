"""Where the shared data sets live and how their rows are read, for every adapter.

The data sets are read at run time from the shared data directory (see
:func:`shared_data_dir`); nothing is copied into the repository. Row readers yield
``(line, row)`` so a row that cannot be converted raises
:class:`~medpref.contracts.ContractError` naming the file, the line where the row starts
and the field; :func:`collect_rows` can skip such rows instead and logs their number.
"""

from __future__ import annotations

import csv
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from medpref.contracts import ContractError, text_lines

_log = logging.getLogger(__name__)
T = TypeVar("T")

ENV_VAR = "MEDPREF_SHARED_DATA"


def shared_data_dir() -> Path | None:
    """The shared data directory, or None when it is absent.

    ``$MEDPREF_SHARED_DATA`` when set, else ``<repo>/../shared/data`` with the repository
    root found from this file. Read at call time so tests and stages can redirect it.
    """
    env = os.environ.get(ENV_VAR)
    repo = Path(__file__).resolve().parents[3]
    path = Path(env) if env else repo.parent / "shared" / "data"
    return path if path.is_dir() else None


def data_root(root: str | os.PathLike | None) -> Path:
    """``root`` when given, else the shared data directory (an error when absent)."""
    if root is not None:
        return Path(root)
    found = shared_data_dir()
    if found is None:
        raise FileNotFoundError(f"no shared data directory: set ${ENV_VAR} "
                                "or place the data sets in <repo>/../shared/data")
    return found


def split_file(folder: Path, splits: Mapping[str, str], split: str) -> Path:
    if split not in splits:
        raise ValueError(f"unknown split {split!r}; expected one of {sorted(splits)}")
    return folder / splits[split]


def csv_rows(path: Path, required: Iterable[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield ``(line where the row starts, row)``; a missing column is a ContractError, a
    file that is not UTF-8 a DataFileError naming the line."""
    reader = csv.DictReader(line for _, line in text_lines(path))
    missing = [c for c in required if c not in (reader.fieldnames or [])]
    if missing:
        raise ContractError(path, 1, missing[0], "missing column")
    start = reader.line_num + 1
    for row in reader:
        yield start, {k: v or "" for k, v in row.items() if k is not None}
        start = reader.line_num + 1


def jsonl_lines(path: Path) -> Iterator[tuple[int, str]]:
    for lineno, raw in text_lines(path):
        if raw.strip():
            yield lineno, raw


def collect_rows(rows: Iterable[tuple[int, Any]], convert: Callable[[int, Any], T],
             path: Path, limit: int | None, skip_bad: bool) -> list[T]:
    """Convert rows until ``limit`` good ones; skip (and count) bad ones if asked."""
    out: list[T] = []
    skipped = 0
    for line, row in rows:
        if limit is not None and len(out) >= limit:
            break
        try:
            out.append(convert(line, row))
        except ContractError:
            if not skip_bad:
                raise
            skipped += 1
    if skipped:
        _log.warning("%s: skipped %d malformed row(s)", path, skipped)
    return out


def source_id(prefix: str, raw: str, path: Path, line: int, field: str) -> str:
    raw = raw.strip()
    if not raw:
        raise ContractError(path, line, field, "empty id")
    return f"{prefix}-{int(raw):04d}" if raw.isdigit() else f"{prefix}-{raw}"


def require_field(data: Any, dotted: str, path: Path, line: int) -> Any:
    """The non-empty value at ``dotted`` (``"a.b.c"``) in nested dicts, else a ContractError."""
    for key in dotted.split("."):
        if not isinstance(data, dict) or key not in data:
            raise ContractError(path, line, dotted, "missing")
        data = data[key]
    if data in (None, "", [], {}):
        raise ContractError(path, line, dotted, "empty")
    return data
