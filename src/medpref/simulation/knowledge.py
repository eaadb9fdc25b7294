"""The simulated patient's knowledge base (PLPF App. B.2): chunks, embeddings, retrieval.

Each case's patient information (one unit per section) and dialogue script (one unit per
question–answer pair) are split into chunks of at most ``chunk_tokens`` tokens, counted
by the shared text metrics (``medpref.metrics.text.word_count``: a Han character is one
token, any other run of letters/digits is one). Chunks are embedded once; each patient turn's
query is the text of the last two rounds (the previous doctor–patient exchange and the
doctor's new turn), and the ``top_k`` most similar chunks go into the patient's prompt.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from medpref.contracts import SPCase, Turn
from medpref.metrics.text import word_count
from medpref.sentences import split_sentences
from medpref.simulation.voice import facts_by_section

Encoder = Callable[[Sequence[str]], np.ndarray]

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TOKEN = re.compile(f"[{_CJK}]|[^\\W_{_CJK}]+")   # the spans medpref.metrics.text counts


def count_tokens(text: str) -> int:
    """Tokens as the shared text metrics count them (one per Han character)."""
    return word_count(text)


def section_sentences(text: str) -> list[str]:
    """A case section's sentences: each line cut as :func:`split_sentences` cuts. A line
    break ends a sentence too: AgentClinic's sections give one finding or one list a line
    ("Electromyography: Findings: ..."), with no full stop between them."""
    return [s for line in str(text).splitlines() for s in split_sentences(line)]


#: where a record's list breaks: a comma before the next item's capital letter (AgentClinic
#: writes a JSON list as "Gait ataxia, Limb ataxia, Reduced strength in the right upper
#: limb"); "I" after a comma starts a clause ("When I stand up, I feel dizzy"), not an item
_LIST_BREAK = re.compile(r",\s+(?=[A-Z])(?!I\b)")


def listed_findings(line: str) -> list[str]:
    """The findings of a line that lists them as a record's list is written ("Difficulty
    climbing stairs, Weakness in upper limbs, Improvement of symptoms after rest" -> its
    three findings); [] for any other line. A comma before a lower-case word is the prose
    of one sentence ("Crying, especially intense with abdominal palpation"; "No fever,
    vomiting or diarrhoea"), not a break between findings."""
    items = [s.strip() for s in _LIST_BREAK.split(line) if s.strip()]
    return items if len(items) > 1 else []


def _hard_split(text: str, limit: int) -> list[str]:
    """Cut a text with no usable sentence break into pieces of ``limit`` tokens."""
    spans = [m.span() for m in _TOKEN.finditer(text)]
    pieces = []
    for start in range(0, len(spans), limit):
        group = spans[start:start + limit]
        pieces.append(text[group[0][0]:group[-1][1]].strip())
    return [p for p in pieces if p]


def chunk_text(text: str, limit: int) -> list[str]:
    """A unit of text as chunks of ≤ ``limit`` tokens: whole sentences packed greedily,
    a sentence longer than the limit cut by tokens. The title line (before the first
    ``:``) is repeated on every chunk of a split unit so each chunk says what it is."""
    text = text.strip()
    if count_tokens(text) <= limit:
        return [text] if text else []
    head, sep, body = text.partition(": ")
    title = f"{head}: " if sep and count_tokens(head) < limit // 4 else ""
    body = body if title else text
    room = limit - count_tokens(title)
    chunks, current = [], ""
    for sentence in split_sentences(body):
        pieces = [sentence] if count_tokens(sentence) <= room else _hard_split(sentence, room)
        for piece in pieces:
            joined = f"{current} {piece}".strip() if current else piece
            if current and count_tokens(joined) > room:
                chunks.append(title + current)
                current = piece
            else:
                current = joined
    if current:
        chunks.append(title + current)
    return chunks


def information(case: SPCase, voice: str = "patient") -> dict[str, str]:
    """The case's information sections as the patient knows them: in the patient's own
    words (``voice`` "patient", :func:`medpref.simulation.voice.facts_by_section`) or as
    the source wrote them ("verbatim")."""
    if voice == "patient":
        return dict(facts_by_section(case))
    return {k: str(v) for k, v in case.patient_info.items()}


def knowledge_units(case: SPCase, voice: str = "patient") -> list[str]:
    """The case's knowledge as units: its opening words (the chief complaint, which the
    patient says first and repeats when asked what brings it in), each information
    section (:func:`information`), each script Q–A pair."""
    units = [f"Chief complaint: {case.chief_complaint.strip()}"]
    units += [f"{key}: {value}" for key, value in information(case, voice).items()
              if value.strip()]
    for pair in case.script:
        q, a = pair.get("doctor", "").strip(), pair.get("patient", "").strip()
        if a:
            units.append(f"Doctor: {q}\nPatient: {a}" if q else f"Patient: {a}")
    return units


def build_chunks(case: SPCase, limit: int, voice: str = "patient") -> list[str]:
    return [c for unit in knowledge_units(case, voice) for c in chunk_text(unit, limit)]


def normalise_sentence(text: str) -> str:
    """Lower case, single spaces, no closing punctuation: how a verbatim match compares."""
    return " ".join(text.lower().split()).rstrip(" .!?;。！？；")


def case_sentences(case: SPCase, voice: str = "patient") -> frozenset[str]:
    """Every sentence of the case's opening words (chief complaint), information (as
    :func:`information` gives it) and scripted answers, and each finding of a line that
    lists them (:func:`listed_findings`, which the patient says one at a time), normalised.
    The opening words are the patient's own for every case source: an adapter may derive
    them (AgentClinic NEJM: "Gross hematuria") from text that is not in any section."""
    texts = [case.chief_complaint, *information(case, voice).values()]
    texts += [pair.get("patient", "") for pair in case.script]
    return frozenset(n for t in texts for line in section_sentences(t)
                     for s in [line, *listed_findings(line)] if (n := normalise_sentence(s)))


@dataclass
class KnowledgeBase:
    """One case's chunks and their (L2-normalised) vectors, and its sentences verbatim
    (a short scripted answer such as "No." is the case's own text, whatever MiniLM makes
    of it)."""

    case_id: str
    chunks: list[str]
    vectors: np.ndarray
    verbatim: frozenset[str] = frozenset()

    def top(self, query_vec: np.ndarray, k: int) -> list[int]:
        """Indices of the ``k`` chunks most similar to the query, best first."""
        sims = self.vectors @ query_vec
        return [int(i) for i in np.argsort(-sims, kind="stable")[:k]]

    def best_similarity(self, vecs: np.ndarray) -> np.ndarray:
        """Each row's highest cosine similarity to any chunk."""
        if len(self.chunks) == 0 or len(vecs) == 0:
            return np.full(len(vecs), -1.0)
        return (vecs @ self.vectors.T).max(axis=1)


def build_knowledge_bases(cases: Sequence[SPCase], encode: Encoder,
                          limit: int, voice: str = "patient") -> dict[str, KnowledgeBase]:
    """Every case's knowledge base (its information in ``voice``), embedded in one batch."""
    chunks = {c.id: build_chunks(c, limit, voice) for c in cases}
    flat = [t for c in cases for t in chunks[c.id]]
    vecs = encode(flat) if flat else np.zeros((0, 1), dtype=np.float32)
    out, start = {}, 0
    for c in cases:
        n = len(chunks[c.id])
        out[c.id] = KnowledgeBase(c.id, chunks[c.id], vecs[start:start + n],
                                  case_sentences(c, voice))
        start += n
    return out


def retrieval_query(turns: Sequence[Turn], rounds: int = 2) -> str:
    """The text of the last ``rounds`` rounds: the doctor's new turn and the
    ``2·rounds − 2`` turns before it (a round is a doctor turn and the patient's answer)."""
    if not turns or turns[-1].role != "doctor":
        raise ValueError("the retrieval query is built when the doctor has just spoken")
    last = turns[-(2 * rounds - 1):]
    names = {"doctor": "Doctor", "patient": "Patient"}
    return "\n".join(f"{names[t.role]}: {t.text}" for t in last)
