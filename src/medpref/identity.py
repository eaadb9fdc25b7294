"""One content identity for everything a model is made of: base models, LoRA adapters,
embedding models, training inputs.

A model is known by what its files hold, not by its folder's name, so replacing the
weights behind ``models/policy-base`` makes every cached answer of the old model miss.

* :func:`file_sha256` — a file's SHA-256. Hashing a 14 GB model takes about a minute, so
  each file's hash is remembered by its resolved path, size and modification time
  (nanoseconds) in a small JSON memo (``data/cache/fingerprints.json``; the
  ``MEDPREF_FINGERPRINTS`` environment variable moves it): a folder is hashed once, and
  later only ``stat`` is called on its files. A file rewritten in place changes its size
  or modification time, and is hashed again.
* :func:`content_id` — 16 hex digits: a file's SHA-256, or for a folder the SHA-256 of its
  content files' relative names and SHA-256s. What is not content is left out: the files
  in :data:`NOT_CONTENT` (a model card, a training record with its timings) and the folders
  in :data:`NOT_CONTENT_DIRS` (download caches, checkpoints). An ``adapter_config.json``
  counts in its canonical form (:func:`canonical_adapter_config`), so two saves of one
  training that list LoRA's target modules in another order are the same adapter.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

from medpref import REPO_ROOT

#: files of a model or adapter folder that are not what the model computes with
NOT_CONTENT = frozenset({"README.md", ".gitattributes", "medpref_task.json", "fit.json",
                         "run.json", "manifest.json"})
#: folders inside a model or adapter folder that are not part of it
NOT_CONTENT_DIRS = frozenset({".cache", ".git", "__pycache__", ".ipynb_checkpoints"})

#: adapter_config.json lists that peft fills from a set: their order changes from one
#: process to the next (string hashing is salted), not their meaning
_SET_VALUED = ("target_modules", "exclude_modules", "modules_to_save")

_MEMO_ENV = "MEDPREF_FINGERPRINTS"
_lock = threading.Lock()
_memo: dict[str, list] | None = None
_memo_path: Path | None = None


def canonical_adapter_config(text: str) -> str:
    """An adapter_config.json with its set-valued lists sorted and its keys in order, so
    the same training writes the same bytes (DVC hash) and has the same identity."""
    config = json.loads(text)
    for key in _SET_VALUED:
        if isinstance(config.get(key), list):
            config[key] = sorted(config[key])
    return json.dumps(config, indent=2, sort_keys=True) + "\n"


def memo_path() -> Path:
    return Path(os.environ.get(_MEMO_ENV) or REPO_ROOT / "data" / "cache" / "fingerprints.json")


def _load_memo() -> dict[str, list]:
    global _memo, _memo_path
    path = memo_path()
    if _memo is None or _memo_path != path:
        try:
            _memo = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            _memo = {}
        _memo_path = path
    return _memo


def _save_memo(entries: dict[str, list]) -> None:
    """Merge ``entries`` into the memo file (another process may have added its own) and
    replace it atomically; a memo that cannot be written only costs a rehash later."""
    path = memo_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            on_disk = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            on_disk = {}
        on_disk.update(entries)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(on_disk, indent=0, sort_keys=True), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass


def sha256_of(path: str | Path) -> str:
    """SHA-256 (hex) of a file's bytes, read in 1 MiB chunks (no memo)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_sha256(path: str | Path) -> str:
    """SHA-256 (hex) of a file, remembered by resolved path, size and mtime (ns)."""
    real = Path(path).resolve()
    st = real.stat()
    stamp = [st.st_size, st.st_mtime_ns]
    with _lock:
        memo = _load_memo()
        hit = memo.get(str(real))
        if hit is not None and hit[:2] == stamp:
            return hit[2]
    sha = sha256_of(real)
    with _lock:
        memo = _load_memo()
        memo[str(real)] = [*stamp, sha]
        _save_memo({str(real): memo[str(real)]})
    return sha


def content_files(folder: str | Path) -> list[Path]:
    """The files of ``folder`` that count for its identity, sorted by relative name."""
    folder = Path(folder)
    out = []
    for p in folder.rglob("*"):
        rel = p.relative_to(folder).parts
        if (not p.is_file() or p.name in NOT_CONTENT
                or any(part in NOT_CONTENT_DIRS or part.startswith("checkpoint-")
                       for part in rel[:-1])):
            continue
        out.append(p)
    return sorted(out, key=lambda p: p.relative_to(folder).as_posix())


def content_id(path: str | Path) -> str:
    """Content identity (16 hex digits) of a file or a folder (see the module doc)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: nothing to identify (no such file or folder)")
    if path.is_file():
        return file_sha256(path)[:16]
    h = hashlib.sha256()
    for f in content_files(path):
        rel = f.relative_to(path).as_posix()
        if f.name == "adapter_config.json":
            digest = hashlib.sha256(canonical_adapter_config(
                f.read_text(encoding="utf-8")).encode()).hexdigest()
        else:
            digest = file_sha256(f)
        h.update(f"{rel}\t{digest}\n".encode())
    return h.hexdigest()[:16]


def forget_memo() -> None:
    """Drop this process's copy of the memo (tests; the file stays)."""
    global _memo, _memo_path
    with _lock:
        _memo, _memo_path = None, None
