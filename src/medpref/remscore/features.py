"""What the fitted REM scorers read of a state (a history ending with a doctor turn).

Every fitted scorer (:mod:`medpref.remscore.fitted`) turns a state into one row of numbers
here, by a named feature set:

* ``none``      — nothing (the majority label per rule);
* ``length``    — log(1 + words) of the doctor turn (the length-only baseline);
* ``surface``   — the doctor turn has a question mark, names a disease, names a test
  (word lists from the lexicon's semantic types);
* ``encoder``   — frozen sentence embeddings of the doctor turn, the last patient turn and
  the earlier doctor turns (their mean), and a few structural counts: question marks in the
  turn, questions asked before, doctor turns so far, and the two surface word flags; then
  how the turn relates to what was said (rule A's "builds on what the patient said"): its
  cosine with the last patient turn, its highest cosine with an earlier doctor turn (a
  repeat), and the element-wise product of its embedding and the patient turn's (a
  similarity the regression weighs per dimension). The relation features were chosen on
  the labelled turns' development part (docs/rem.md, "The encoder REM and the baselines").

Embeddings are cached per text for the life of a :class:`StateFeatures` (a stage embeds
each distinct text once, however many rules and scorers read it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from medpref.contracts import Turn

FEATURE_SETS = ("none", "length", "surface", "encoder")


@dataclass(frozen=True)
class StateParts:
    """The texts of a state a fitted scorer reads."""

    turn: str                 # the doctor turn being judged (the state's last turn)
    patient: str              # the last patient turn before it ("" when none)
    earlier: tuple[str, ...]  # the doctor turns before it


def state_parts(state: Sequence[Turn]) -> StateParts:
    """Split a state into the judged doctor turn, the last patient turn and the earlier
    doctor turns; a state that does not end with a doctor turn is an error."""
    if not state or state[-1].role != "doctor":
        raise ValueError("a REM state ends with the doctor turn it judges")
    before = state[:-1]
    patient = next((t.text for t in reversed(before) if t.role == "patient"), "")
    earlier = tuple(t.text for t in before if t.role == "doctor")
    return StateParts(state[-1].text, patient, earlier)


def word_count(text: str) -> int:
    return len(text.split())


def _normalise(text: str) -> list[str]:
    """Lower case, punctuation to spaces, split: how the lexicon's strings are keyed
    (the same reading as stage 07's ontology, which a library may not import)."""
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).split()


def _rrf(path: Path) -> list[list[str]]:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: RRF file missing (rem.fitted.lexicon)")
    return [line.split("|") for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def _lexicon_by_type(folder: Path) -> dict[str, set[tuple[str, ...]]]:
    """Semantic type → the normalised strings (as word tuples) of its English,
    unsuppressed concepts, from the lexicon's MRCONSO and MRSTY files."""
    strings: dict[str, set[tuple[str, ...]]] = {}
    for f in _rrf(folder / "MRCONSO.RRF"):
        if f[1] == "ENG" and f[16] in ("N", ""):
            words = tuple(_normalise(f[14]))
            strings.setdefault(f[0], set())
            if words:
                strings[f[0]].add(words)
    types: dict[str, str] = {}
    for f in _rrf(folder / "MRSTY.RRF"):
        if f[0] in strings:
            types.setdefault(f[0], f[3])
    by_type: dict[str, set[tuple[str, ...]]] = {t: set() for t in types.values()}
    for cui, words in strings.items():
        by_type.setdefault(types.get(cui, ""), set()).update(words)
    return by_type


@dataclass(frozen=True)
class WordLists:
    """Disease and test phrases (normalised, as word tuples) the surface flags look for."""

    disease: frozenset[tuple[str, ...]]
    test: frozenset[tuple[str, ...]]

    @classmethod
    def from_lexicon(cls, folder: str | Path, disease_types: Sequence[str],
                     test_types: Sequence[str]) -> WordLists:
        """The strings of the lexicon's concepts of the given semantic types (STY names)."""
        by_type = _lexicon_by_type(Path(folder))
        known = set(by_type) - {""}
        unknown = sorted(set(disease_types) - known | set(test_types) - known)
        if unknown:
            raise ValueError(f"{folder}: no concept has semantic type(s) {unknown} "
                             f"(rem.fitted.disease_types/test_types; known: {sorted(known)})")
        return cls(frozenset().union(*(by_type.get(t, set()) for t in disease_types)),
                   frozenset().union(*(by_type.get(t, set()) for t in test_types)))

    def has(self, kind: str, text: str) -> bool:
        """Whether ``text`` contains one of the ``kind`` ("disease"/"test") phrases as
        whole words."""
        phrases = self.disease if kind == "disease" else self.test
        words = _normalise(text)
        longest = max((len(p) for p in phrases), default=0)
        return any(tuple(words[i:i + n]) in phrases
                   for n in range(1, longest + 1) for i in range(len(words) - n + 1))


def surface_row(turn: str, words: WordLists) -> list[float]:
    """Question mark present, disease named, test named (0/1 each)."""
    return [float("?" in turn), float(words.has("disease", turn)), float(words.has("test", turn))]


def structure_row(parts: StateParts, words: WordLists) -> list[float]:
    """Counts the encoder scorer reads beside the embeddings."""
    return [float(parts.turn.count("?")), float(sum(t.count("?") for t in parts.earlier)),
            float(len(parts.earlier)), *surface_row(parts.turn, words)[1:]]


@dataclass
class StateFeatures:
    """Feature rows of states by feature set; embeddings cached per text.

    ``encode``: texts → L2-normalised vectors (:func:`medpref.embedding.load_encoder`),
    called lazily (only the ``encoder`` set needs it); ``words``: the surface lists,
    likewise built when first needed by ``load_words``."""

    encode: Callable[[Sequence[str]], np.ndarray] | None = None
    load_words: Callable[[], WordLists] | None = None
    _cache: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _words: WordLists | None = field(default=None, repr=False)

    @property
    def words(self) -> WordLists:
        if self._words is None:
            if self.load_words is None:
                raise ValueError("the surface and encoder features need the word lists "
                                 "(rem.fitted.lexicon)")
            self._words = self.load_words()
        return self._words

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of ``texts`` (each distinct text encoded once per instance)."""
        if self.encode is None:
            raise ValueError("the encoder features need a sentence encoder "
                             "(rem.fitted.embedding_model)")
        new = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if new:
            self._cache.update(zip(new, self.encode(new)))
        return np.stack([self._cache[t] for t in texts]) if texts else np.zeros((0, 0))

    def matrix(self, kind: str, states: Sequence[Sequence[Turn]]) -> np.ndarray:
        """One row per state of feature set ``kind`` (:data:`FEATURE_SETS`)."""
        parts = [state_parts(s) for s in states]
        if kind == "none":
            return np.zeros((len(parts), 0))
        if kind == "length":
            return np.array([[math.log1p(word_count(p.turn))] for p in parts])
        if kind == "surface":
            return np.array([surface_row(p.turn, self.words) for p in parts]).reshape(
                len(parts), 3)
        if kind == "encoder":
            return self._encoder_matrix(parts)
        raise ValueError(f"unknown feature set '{kind}' (known: {', '.join(FEATURE_SETS)})")

    def _encoder_matrix(self, parts: Sequence[StateParts]) -> np.ndarray:
        if not parts:
            return np.zeros((0, 0))
        turn = self.embed([p.turn for p in parts])
        patient = self.embed([p.patient for p in parts])
        earlier = np.stack([self.embed(list(p.earlier)).mean(axis=0) if p.earlier
                            else np.zeros(turn.shape[1], dtype=turn.dtype) for p in parts])
        structure = np.array([structure_row(p, self.words) for p in parts])
        return np.hstack([turn, patient, earlier, structure, self._relation(parts, turn, patient)])

    def _relation(self, parts: Sequence[StateParts], turn: np.ndarray, patient: np.ndarray
                  ) -> np.ndarray:
        """The turn against what was said: cosine with the last patient turn, the highest
        cosine with an earlier doctor turn (0 with none), and the element-wise product with
        the patient turn's embedding (the vectors are L2-normalised: a dot is a cosine)."""
        to_patient = (turn * patient).sum(axis=1, keepdims=True)
        repeat = np.array([[max(float((self.embed(list(p.earlier)) @ t).max()), 0.0)
                            if p.earlier else 0.0] for p, t in zip(parts, turn, strict=True)])
        return np.hstack([to_patient, repeat, turn * patient])
