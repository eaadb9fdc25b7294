"""The simulated patient's turn: its prompt, the parser of its answer, and its honesty.

The prompt (``configs/prompts/sp_patient.yaml``) carries PLPF's five behaviours in our
words. :func:`parse_patient_answer` is pure: it drops a speaker label the model may
write, cuts where the model starts writing the doctor's part, detects the end marker
and keeps at most ``max_sentences`` sentences. :func:`patient_fidelity` counts, per
patient sentence, whether it was asked for and whether the knowledge base supports it
(embedding similarity: a cheap check beyond the paper, named as such in the reports).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from medpref.contracts import Turn
from medpref.prompts import PromptTemplate, format_dialogue
from medpref.sentences import split_sentences
from medpref.simulation.knowledge import (
    Encoder,
    KnowledgeBase,
    normalise_sentence,
)

_LABEL = re.compile(r"^\s*(?:patient|患者|病人)\s*[:：]\s*", re.IGNORECASE)
_PROMPT_ECHO = re.compile(r"\n?\s*your (?:answer|response|reply)[^\n:]*:.*$",
                          re.IGNORECASE | re.DOTALL)
_DOCTOR_START = re.compile(r"\n\s*(?:doctor|医生|dr\.?)\s*[:：]|(?:^|\s)(?:doctor|医生)\s*[:：]",
                           re.IGNORECASE)


@dataclass(frozen=True)
class PatientAnswer:
    text: str          # what goes into the transcript
    ended: bool        # the end marker was written
    empty: bool        # nothing usable was left (counted; the turn says so)


def _normalise_marker(marker: str) -> str:
    return re.sub(r"[\s()（）]", "", marker).lower()


def parse_patient_answer(raw: str, end_marker: str, max_sentences: int | None) -> PatientAnswer:
    """The patient's turn from a raw completion (pure): speaker label and an echoed
    "Your answer as ...:" line dropped, cut where a doctor turn starts, end marker
    detected and removed, repeated sentences kept once, at most ``max_sentences``."""
    text = _PROMPT_ECHO.sub("", _LABEL.sub("", raw or "")).strip()
    cut = _DOCTOR_START.search(text)
    if cut:
        text = text[:cut.start()].strip()
    core = _normalise_marker(end_marker)
    pattern = r"[\s(（]*".join(re.escape(ch) for ch in core) if core else None
    ended = False
    if pattern:
        found = re.search(r"[(（]?\s*" + pattern + r"\s*[)）]?", text, re.IGNORECASE)
        if found:
            ended = True
            text = text[:found.start()].strip()
    sentences = list(dict.fromkeys(split_sentences(text)))   # a repeated sentence once
    text = " ".join(sentences[:max_sentences] if max_sentences is not None else sentences)
    return PatientAnswer(text=text, ended=ended, empty=not text)


# a family informant (CSPT's sender names) as the prompt says who is speaking
_INFORMANTS = {"患儿家属": "a parent of the child who is the patient",
               "病人家属": "a family member of the patient",
               "患者家属": "a family member of the patient",
               "患者母亲": "the patient's mother", "患者父亲": "the patient's father",
               "患者配偶": "the patient's spouse", "患者子女": "the patient's son or daughter"}


def speaker_of(informant: str | None) -> str:
    """Who answers the doctor: the patient, or the case's family informant."""
    if not informant:
        return "the patient"
    return _INFORMANTS.get(informant, f"the person who accompanies the patient ({informant})")


def render_patient_prompt(template: PromptTemplate, chunks: Sequence[str],
                          history: Sequence[Turn], question: str, end_marker: str,
                          informant: str | None = None) -> list[dict[str, str]]:
    """The patient's prompt: knowledge chunks, the conversation before the doctor's new
    turn, that turn, and who speaks (the patient or the case's informant)."""
    knowledge = "\n".join(f"[{i + 1}] {c}" for i, c in enumerate(chunks))
    return template.render(knowledge=knowledge, history=format_dialogue(history) or "(none)",
                           question=question, end_marker=end_marker,
                           speaker=speaker_of(informant))


@dataclass
class Fidelity:
    """Per case: patient sentences that answered nothing asked, or that its knowledge
    base does not support."""

    sentences: int = 0
    volunteered: int = 0
    unsupported: int = 0
    examples: list[dict] = field(default_factory=list)
    unsupported_at: list[str] = field(default_factory=list)   # the unsupported sentences


_AS_DOCTOR = re.compile(r"\b(?:i am|i'm) (?:dr\b|dr\.|doctor\b|your doctor|a doctor)|"
                        r"\bi'll be your doctor|\bas your doctor|我是.{0,4}医生|我是大夫",
                        re.IGNORECASE)


def speaks_as_doctor(text: str) -> bool:
    """The patient's turn claims the doctor's role ("I'm Dr. Alex, your doctor")."""
    return bool(_AS_DOCTOR.search(text or ""))


def judge_sentences(turns: Sequence[Turn], kb: KnowledgeBase, encode: Encoder,
                    support: float, relevance: float,
                    skip: Callable[[str], bool] | None = None) -> list[dict]:
    """One judgement per patient sentence after the opening one (the record of the
    patient's honesty): the transcript index of its turn, the sentence, its best MiniLM
    similarity to a knowledge chunk (``kb_similarity``) and to the question it answers
    (``question_similarity``: the sentence's, or its source chunk's), whether it is one of
    the case's own sentences verbatim, and the verdict.

    Unsupported: no knowledge chunk reaches ``support`` similarity and the sentence is
    not one of the case's own sentences verbatim. Volunteered: grounded in the knowledge
    base, but neither the sentence nor the chunk it comes from reaches ``relevance``
    similarity to the doctor turn it answers (a fact nobody asked for). Questions the
    patient asks are skipped, and sentences ``skip`` names (the extractive patient's "I'm
    not sure about that.", which states no fact).
    """
    pairs = [(i, turns[i - 1].text, s) for i in range(1, len(turns))
             if turns[i].role == "patient" and turns[i - 1].role == "doctor"
             for s in split_sentences(turns[i].text) if not s.rstrip().endswith(("?", "？"))
             and not (skip and skip(s))]
    if not pairs:
        return []
    sent_vecs = encode([s for _, _, s in pairs])
    q_vecs = encode([q for _, q, _ in pairs])
    grounded = kb.best_similarity(sent_vecs)
    # asked-for: the sentence, or the chunk it comes from (a script pair holds its
    # question), is close to the doctor's turn
    asked = np.sum(sent_vecs * q_vecs, axis=1)
    if len(kb.chunks):
        source = kb.vectors[np.argmax(sent_vecs @ kb.vectors.T, axis=1)]
        asked = np.maximum(asked, np.sum(source * q_vecs, axis=1))
    out = []
    for (i, _, s), g, a in zip(pairs, grounded, asked):
        verbatim = normalise_sentence(s) in kb.verbatim
        verdict = None
        if g < support and not verbatim:
            verdict = "unsupported"
        elif a < relevance:
            verdict = "volunteered"
        out.append({"turn": i, "sentence": s, "kb_similarity": round(float(g), 4),
                    "question_similarity": round(float(a), 4), "verbatim": verbatim,
                    "verdict": verdict})
    return out


def fidelity_of(judged: Sequence[dict], turns: Sequence[Turn], keep_examples: int = 3
                ) -> Fidelity:
    """The counts of one consultation's sentence judgements (:func:`judge_sentences`), in
    order: sentences, volunteered and unsupported ones, the unsupported sentences and the
    first ``keep_examples`` judged either way (with the doctor turn each answered)."""
    out = Fidelity(sentences=len(judged))
    for j in judged:
        kind = j["verdict"]
        if kind == "unsupported":
            out.unsupported += 1
            out.unsupported_at.append(j["sentence"])
        elif kind == "volunteered":
            out.volunteered += 1
        if kind and len(out.examples) < keep_examples:
            out.examples.append({"kind": kind, "doctor": turns[j["turn"] - 1].text,
                                 "patient": j["sentence"],
                                 "kb_similarity": round(j["kb_similarity"], 3),
                                 "question_similarity": round(j["question_similarity"], 3)})
    return out


def patient_fidelity(turns: Sequence[Turn], kb: KnowledgeBase, encode: Encoder,
                     support: float, relevance: float, keep_examples: int = 3,
                     skip: Callable[[str], bool] | None = None) -> Fidelity:
    """Check every patient sentence after the opening one (:func:`judge_sentences`) and
    count (:func:`fidelity_of`)."""
    return fidelity_of(judge_sentences(turns, kb, encode, support, relevance, skip), turns,
                       keep_examples)
