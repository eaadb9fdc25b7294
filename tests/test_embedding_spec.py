"""medpref.embedding.encoder_for: one setting names a packaged encoder or a model folder."""

from __future__ import annotations

import numpy as np

from medpref import REPO_ROOT, embedding


def test_a_packaged_name_loads_that_encoder_and_anything_else_a_folder(monkeypatch):
    calls = []
    monkeypatch.setitem(embedding.PACKAGED_ENCODERS, "toy",
                        lambda: (lambda texts: np.ones((len(texts), 2), dtype=np.float32)))
    monkeypatch.setattr(embedding, "load_encoder",
                        lambda path, batch_size=32: calls.append((path, batch_size)) or "folder")
    assert embedding.encoder_for("toy")(["a", "b"]).shape == (2, 2)
    assert calls == []
    assert embedding.encoder_for("models/x", 8) == "folder"
    assert calls == [(REPO_ROOT / "models/x", 8)]


def test_the_multilingual_encoder_gives_unit_vectors_that_rank_by_meaning():
    encode = embedding.encoder_for("use_multilingual")
    v = encode(["Do you have a fever?", "Have you had a high temperature?",
                "What medicines do you take?", "你发烧吗？"])
    assert v.dtype == np.float32 and v.shape[0] == 4
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    sims = v @ v.T
    assert sims[0, 1] > sims[0, 2] and sims[0, 3] > sims[0, 2]


def test_a_packaged_encoder_is_loaded_once_per_process(monkeypatch):
    """The REM's encoder scorer and the SP grader's Chinese match name the same packaged
    encoder in one stage-06 process: it is built once and shared."""
    from medpref.simulation import zh_encoder

    built = []

    def factory():
        built.append(1)
        return lambda texts: np.ones((len(texts), 2), dtype=np.float32)

    monkeypatch.setitem(embedding.PACKAGED_ENCODERS, "toy", factory)
    embedding.packaged_encoder.cache_clear()
    zh_encoder.zh_encoder.cache_clear()
    try:
        first = embedding.encoder_for("toy")
        assert embedding.encoder_for("toy") is first
        assert zh_encoder.zh_encoder("toy")(["a"]).shape == (1, 2)
        assert built == [1]
    finally:
        embedding.packaged_encoder.cache_clear()
        zh_encoder.zh_encoder.cache_clear()
