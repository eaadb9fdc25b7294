"""One sentence-encoder loader for every stage that embeds text.

Stage 06's SP knowledge bases and grader, stage 07's MiniLM rows (+imap) and stage 08's
medicine database embed with the same local sentence-transformers model
(``models/all-minilm-l6-v2``); :func:`load_encoder` is the one way they load it: from a
local folder on the CPU, never from the network.
"""

from __future__ import annotations

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
