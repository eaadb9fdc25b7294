"""The ontology path of imapScore's value relations (the paper's medical KG).

A small reader of UMLS Rich Release Format files — the embedded synthetic lexicon
(``data/embedded/lexicon``) or a user's licensed UMLS ``META/`` folder, same layout:

* ``MRCONSO.RRF`` — concepts and their strings (preferred names and synonyms);
* ``MRSTY.RRF``   — each concept's semantic type (shown in reports only);
* ``MRREL.RRF``   — ``CUI1|…|CHD|CUI2`` means CUI2 is a child of CUI1 (``PAR`` the
  inverse); only these parent/child rows are kept.

Values are linked to concepts (:class:`ConceptLinker`): the whole normalised value as a
lexicon string, else the longest lexicon strings found inside it (the paper re-ranks
candidates by "the presence of the candidate entity in the value"), else, optionally,
the nearest lexicon string by sentence-embedding cosine above a threshold (the paper's
BERT-based candidate ranking). Relations (:meth:`OntologyMatcher.relate`): synonyms
(a shared concept) are exact; a label concept below a response concept is belonging; a
label concept above a response concept is containment; a pair that cannot be linked
has no ontology relation (None).

This is a reader of its own, separate from any NoteChat index; loading a full UMLS
release keeps every English string in memory (several GB): restrict it with ``sabs``.
"""

from __future__ import annotations

import re
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from medpref.contracts import ContractError
from medpref.imap.score import Relation

# Fields per row (the README of the lexicon lists them):
MRCONSO_FIELDS = 18   # CUI|LAT|TS|LUI|STT|SUI|ISPREF|AUI|SAUI|SCUI|SDUI|SAB|TTY|CODE|STR|...
MRSTY_FIELDS = 6      # CUI|TUI|STN|STY|ATUI|CVF
MRREL_FIELDS = 16     # CUI1|AUI1|STYPE1|REL|CUI2|AUI2|STYPE2|RELA|RUI|SRUI|SAB|...


def normalise(text: str) -> str:
    """Lower case, punctuation to spaces, single spaces: the key strings are matched on."""
    return re.sub(r"\s+", " ", re.sub(r"[^a-z0-9]+", " ", text.lower())).strip()


def _rrf_rows(path: Path, n_fields: int) -> Iterator[tuple[int, list[str]]]:
    """``(line, fields)`` of an RRF file; a short row is a ContractError naming the line."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: RRF file missing (expected MRCONSO, MRSTY and "
                                "MRREL .RRF in the lexicon/UMLS folder)")
    with open(path, encoding="utf-8") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            fields = raw.rstrip("\n").split("|")
            if len(fields) < n_fields:
                raise ContractError(path, lineno, "<row>", f"{len(fields)} fields, expected "
                                    f"{n_fields} ('|'-separated, trailing '|')")
            yield lineno, fields


@dataclass
class Lexicon:
    """Concepts, their strings and parent links, read from RRF files."""

    names: dict[str, str] = field(default_factory=dict)              # CUI → preferred name
    strings: dict[str, set[str]] = field(default_factory=dict)       # normalised → CUIs
    parents: dict[str, set[str]] = field(default_factory=dict)       # CUI → parent CUIs
    semantic_types: dict[str, str] = field(default_factory=dict)     # CUI → STY
    source: str = ""

    @classmethod
    def from_rrf(cls, folder: str | Path, sabs: Sequence[str] | None = None,
                 language: str = "ENG") -> Lexicon:
        """Read ``MRCONSO/MRSTY/MRREL.RRF`` from ``folder`` (suppressed strings skipped)."""
        folder = Path(folder)
        lex = cls(source=str(folder))
        keep = set(sabs) if sabs else None
        named: set[str] = set()  # concepts whose preferred name (TS=P, STT=PF) was seen
        for line, f in _rrf_rows(folder / "MRCONSO.RRF", MRCONSO_FIELDS):
            cui, lat, ts, stt, ispref, sab, text, suppress = (f[0], f[1], f[2], f[4], f[6],
                                                               f[11], f[14], f[16])
            if lat != language or suppress not in ("N", "") or (keep and sab not in keep):
                continue
            if not cui:
                raise ContractError(folder / "MRCONSO.RRF", line, "CUI", "empty")
            key = normalise(text)
            if key:
                lex.strings.setdefault(key, set()).add(cui)
            preferred = ts == "P" and stt == "PF" and ispref == "Y"
            if cui not in lex.names or (preferred and cui not in named):
                lex.names[cui] = text
                if preferred:
                    named.add(cui)
        for _, f in _rrf_rows(folder / "MRSTY.RRF", MRSTY_FIELDS):
            if f[0] in lex.names:
                lex.semantic_types.setdefault(f[0], f[3])
        for _, f in _rrf_rows(folder / "MRREL.RRF", MRREL_FIELDS):
            cui1, rel, cui2, sab = f[0], f[3], f[4], f[10]
            if cui1 == cui2 or (keep and sab not in keep):
                continue
            if rel == "CHD":    # CUI2 is a child of CUI1
                lex.parents.setdefault(cui2, set()).add(cui1)
            elif rel == "PAR":  # CUI2 is a parent of CUI1
                lex.parents.setdefault(cui1, set()).add(cui2)
        return lex

    @property
    def max_words(self) -> int:
        return max((len(s.split()) for s in self.strings), default=0)

    def concepts_of(self, text: str) -> frozenset[str]:
        return frozenset(self.strings.get(normalise(text), ()))

    def ancestors(self, cui: str, max_hops: int) -> set[str]:
        """Concepts above ``cui`` within ``max_hops`` parent links (cycles are safe)."""
        seen: set[str] = set()
        frontier = deque([(cui, 0)])
        while frontier:
            node, depth = frontier.popleft()
            if depth == max_hops:
                continue
            for parent in self.parents.get(node, ()):
                if parent not in seen and parent != cui:
                    seen.add(parent)
                    frontier.append((parent, depth + 1))
        return seen


@dataclass(frozen=True)
class Link:
    """A value's concepts and how they were found (``exact``/``span``/``embedding``)."""

    cuis: frozenset[str]
    how: str | None
    matched: tuple[str, ...] = ()


NO_LINK = Link(frozenset(), None)
Encoder = Callable[[list[str]], np.ndarray]  # texts → L2-normalised embeddings (rows)


class ConceptLinker:
    """Links free-text imap values to lexicon concepts (see the module docstring)."""

    def __init__(self, lexicon: Lexicon, encode: Encoder | None = None,
                 min_similarity: float | None = None):
        if min_similarity is not None and encode is None:
            raise ValueError("embedding linking (min_similarity) needs an encoder")
        self.lexicon = lexicon
        self.encode = encode
        self.min_similarity = min_similarity
        self._keys = sorted(lexicon.strings)
        self._key_vectors: np.ndarray | None = None
        self._cache: dict[str, Link] = {}

    def link_by_string(self, value: str) -> Link:
        """The whole value as a lexicon string, else the longest strings inside it."""
        key = normalise(value)
        if key in self.lexicon.strings:
            return Link(frozenset(self.lexicon.strings[key]), "exact", (key,))
        words = key.split()
        for n in range(min(len(words), self.lexicon.max_words), 0, -1):
            spans = [" ".join(words[i:i + n]) for i in range(len(words) - n + 1)]
            found = tuple(dict.fromkeys(s for s in spans if s in self.lexicon.strings))
            if found:
                cuis = frozenset(c for s in found for c in self.lexicon.strings[s])
                return Link(cuis, "span", found)
        return NO_LINK

    def _link_by_embedding(self, values: list[str]) -> list[Link]:
        if self._key_vectors is None:
            self._key_vectors = self.encode(self._keys)
        sims = self.encode(values) @ self._key_vectors.T
        links = []
        for row in sims:
            best = int(np.argmax(row))
            if row[best] >= self.min_similarity:
                key = self._keys[best]
                links.append(Link(frozenset(self.lexicon.strings[key]), "embedding", (key,)))
            else:
                links.append(NO_LINK)
        return links

    def link_many(self, values: Iterable[str]) -> dict[str, Link]:
        """Link every distinct value once (embedding fallback batched)."""
        todo = [v for v in dict.fromkeys(values) if v not in self._cache]
        unlinked = []
        for v in todo:
            self._cache[v] = self.link_by_string(v)
            if not self._cache[v].cuis and normalise(v):
                unlinked.append(v)
        if unlinked and self.min_similarity is not None:
            for v, link in zip(unlinked, self._link_by_embedding(unlinked)):
                self._cache[v] = link
        return {v: self._cache[v] for v in values}

    def link(self, value: str) -> Link:
        return self.link_many([value])[value]


class OntologyMatcher:
    """Relation of a label value to a response value from the lexicon's concepts."""

    def __init__(self, linker: ConceptLinker, max_hops: int = 3):
        self.linker = linker
        self.max_hops = max_hops
        self._ancestors = lru_cache(maxsize=None)(
            lambda cui: frozenset(linker.lexicon.ancestors(cui, max_hops)))

    def relate_links(self, label: Link, response: Link) -> Relation | None:
        """exact > belonging > containment > unmatched; None when a side is unlinked."""
        if not label.cuis or not response.cuis:
            return None
        if label.cuis & response.cuis:
            return Relation.EXACT
        if any(self._ancestors(a) & response.cuis for a in label.cuis):
            return Relation.BELONGING      # the label value is below the response value
        if any(self._ancestors(b) & label.cuis for b in response.cuis):
            return Relation.CONTAINMENT    # the label value is above the response value
        return Relation.UNMATCHED

    def relate(self, term: str, label_value: str, response_value: str) -> Relation | None:
        """The ontology's relation of two values of ``term`` (same text is exact)."""
        if normalise(label_value) and normalise(label_value) == normalise(response_value):
            return Relation.EXACT
        return self.relate_links(self.linker.link(label_value), self.linker.link(response_value))


#: the columns of the report's links table (a projection of :func:`link_records`)
LINK_COLUMNS = ("value", "how", "concepts", "semantic_types")


def link_records(links: dict[str, Link], lexicon: Lexicon) -> list[dict]:
    """One record per linked value: how it linked, its concepts (ids and names), the
    lexicon strings matched and the concepts' semantic types."""
    rows = []
    for value, link in links.items():
        cuis = sorted(link.cuis)
        rows.append({"value": value, "how": link.how or "unlinked", "cuis": cuis,
                     "matched": list(link.matched),
                     "concepts": "; ".join(lexicon.names.get(c, c) for c in cuis),
                     "semantic_types": "; ".join(sorted({lexicon.semantic_types.get(c, "?")
                                                         for c in cuis}))})
    return rows


def count_links(links: Iterable[Link]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for link in links:
        counts[link.how or "unlinked"] += 1
    return dict(counts)
