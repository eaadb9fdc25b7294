"""Simulated patients behind one interface, registered by name (``patient.kind``).

A patient answers the doctor's newest turn of every open consultation in one batch
(:meth:`reply`), returning one :class:`PatientReply` each. Two are registered:

- ``extractive`` (the default with the embedded 135M model): answers only with text of
  its own case. With a script, the scripted answer whose doctor question is closest to
  each question of the doctor's turn (MiniLM cosine for English; character-bigram Dice
  with the question frame removed for Chinese); else the history sentence of the patient
  information closest to it, where a line that lists findings (AgentClinic's "Gait
  ataxia, Limb ataxia, ...") offers each of them too: a question about one finding gets
  that one, as a standardized patient answers what was asked and says no more of the
  list, while a question closer to the whole line (one naming several of them) still
  gets the line; examination and test findings only when the doctor asks for an
  examination or a test; "what brings you in?" gets the chief complaint. Nothing above
  its threshold: "I'm not sure about that."; a turn that asks nothing: a neutral
  sentence (``patient.nothing_asked``, "I'm not sure what else to tell you."), never a
  request for a diagnosis, which would steer a doctor that has not asked towards naming
  one. Both are *fallbacks* (the case answered nothing), recorded in each reply's
  ``step["fallback"]`` and counted per doctor. It cannot invent a fact and never speaks
  as the doctor.
- ``llm``: PLPF's retrieval-augmented patient (the last rounds as the query, the top
  chunks of the case's knowledge base in its prompt), for served models that can keep
  the role.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from medpref.contracts import SPCase
from medpref.echo import ZH_QUESTION_FRAME, is_chinese, speech_act
from medpref.registry import PATIENTS, register_patient
from medpref.sentences import split_sentences
from medpref.simulation.knowledge import (
    Encoder,
    KnowledgeBase,
    listed_findings,
    retrieval_query,
    section_sentences,
)
from medpref.simulation.patient import parse_patient_answer, render_patient_prompt
from medpref.simulation.voice import (
    FINDINGS_SECTION,
    asks_for_test,
    patient_facts,
    without_stage_directions,
)

DONT_KNOW = {"en": "I'm not sure about that.", "zh": "这个我不太清楚。"}
# the two ways the extractive patient answers with no case text (step["fallback"])
FALLBACKS = ("nothing_asked", "dont_know")
# sections whose sentences are findings: given only after a test or examination is asked for
FINDINGS = FINDINGS_SECTION
# an open question about why the patient came: answered with the chief complaint
OPENING = re.compile(r"what brings you|how can i help|what seems to be|what can i do for you|"
                     r"what(?:'s| is) (?:the|your) (?:problem|trouble|matter|concern)|"
                     r"what (?:happened|is going on|'s going on)|tell me (?:what|about (?:your|"
                     r"the) (?:problem|symptoms|complaint))|哪里不舒服|怎么了|什么问题|"
                     r"有什么(?:不舒服|症状)", re.IGNORECASE)
_PUNCT = re.compile(r"[，。？！、?!,.\s]")


_CLOSED = re.compile(r"[.!?;。！？；]$")


def closed(sentence: str, zh: bool = False) -> str:
    """A sentence with its closing mark, so that sentences joined into one answer stay
    apart (an AgentClinic line, "Platelets: Normal", has none)."""
    return sentence if _CLOSED.search(sentence) else sentence + ("。" if zh else ".")


def is_dont_know(text: str) -> bool:
    return text.strip() in DONT_KNOW.values()


def fallback_sentences(p) -> frozenset[str]:
    """The patient's sentences that state no fact of the case (``p``: PatientParams): its
    "don't know" and its answer to a turn that asks nothing. The fidelity check skips
    them; they are no claim the case could support."""
    return frozenset([*DONT_KNOW.values(), *(t.strip() for t in p.nothing_asked.values())])


# who is asked about, not what: dropped from a Chinese question before matching
_ZH_SUBJECT = re.compile(r"孩子|宝宝|小孩|患者|病人|家里人|父母")


def _zh_grams(t: str) -> set[str]:
    t = _PUNCT.sub("", _ZH_SUBJECT.sub("", ZH_QUESTION_FRAME.sub("", t)))
    return {t[i:i + 2] for i in range(len(t) - 1)} or ({t} if t else set())


def bigram_dice(a: str, b: str) -> float:
    """Dice overlap of the two texts' character bigrams, question frame and subject removed:
    a Chinese question against a scripted question."""
    x, y = _zh_grams(a), _zh_grams(b)
    return 2 * len(x & y) / (len(x) + len(y)) if x and y else 0.0


def bigram_containment(question: str, sentence: str) -> float:
    """Share of the question's content bigrams found in the sentence: a short Chinese
    question against a long history or findings sentence, which Dice would penalise."""
    x, y = _zh_grams(question), _zh_grams(sentence)
    return len(x & y) / len(x) if x and y else 0.0


@dataclass
class PatientReply:
    text: str
    ended: bool = False
    empty: bool = False
    error: str | None = None
    step: dict[str, Any] = field(default_factory=dict)   # what produced it, for the record


@dataclass
class PatientContext:
    """What a patient may need (the LLM patient's client is built only when asked)."""

    params: Any                          # PatientParams
    cases: dict[str, SPCase]
    kbs: dict[str, KnowledgeBase]
    encode: Encoder
    template: Any = None                 # the LLM patient's prompt
    make_client: Callable[[], Any] | None = None
    call: Any = None                     # the LLM patient's CallSpec (simulation.calls.patient)


def build_patient(name: str, ctx: PatientContext):
    return PATIENTS.get(name)(ctx)


@register_patient("llm")
class LLMPatient:
    """PLPF's patient: retrieval over the last rounds, top chunks, the patient prompt."""

    def __init__(self, ctx: PatientContext):
        if ctx.make_client is None or ctx.template is None or ctx.call is None:
            raise ValueError("the llm patient needs a patient role, its prompt and its call "
                             "(simulation.calls.patient)")
        self.p, self.kbs, self.encode = ctx.params, ctx.kbs, ctx.encode
        self.client, self.template, self.call = ctx.make_client(), ctx.template, ctx.call
        self.informants = {cid: c.informant for cid, c in ctx.cases.items()}

    def reply(self, consults: Sequence[Any]) -> list[PatientReply]:
        p = self.p
        queries = [retrieval_query(c.turns, p.query_rounds) for c in consults]
        prompts, retrieved = [], []
        for c, qv in zip(consults, self.encode(queries)):
            kb = self.kbs[c.case_id]
            top = kb.top(qv, p.top_k)
            retrieved.append(top)
            prompts.append(render_patient_prompt(self.template, [kb.chunks[i] for i in top],
                                                 c.turns[:-1], c.turns[-1].text, p.end_marker,
                                                 self.informants.get(c.case_id)))
        out = []
        for comp, top, q in zip(self.client.chat_many(prompts, self.call),
                                retrieved, queries):
            if comp.error:
                out.append(PatientReply("", error=comp.error))
                continue
            ans = parse_patient_answer(comp.text, p.end_marker, p.max_sentences)
            out.append(PatientReply(ans.text, ans.ended, ans.empty,
                                    step={"raw": comp.text, "query": q, "chunks": top}))
        return out


@dataclass
class _Source:
    """One case's answerable text: script pairs, history and findings sentences (a
    history line that lists findings is followed by each of them, :func:`said_alone`)."""

    questions: list[str]
    answers: list[str]
    history: list[str]
    findings: list[str]
    complaint: str = ""


def said_alone(history: Sequence[str]) -> list[str]:
    """The history sentences a patient may answer with: each line, and after a line that
    lists findings (:func:`~medpref.simulation.knowledge.listed_findings`) each of its
    findings, so that a question about one of them is answered with that one. Findings
    lines are not split: they are one test or examination a sentence already, and a
    comma there is often inside one result ("blood group A, Rh-negative")."""
    return list(dict.fromkeys(s for line in history for s in [line, *listed_findings(line)]))


@register_patient("extractive")
class ExtractivePatient:
    """Answers with its own case's text only (see the module text)."""

    def __init__(self, ctx: PatientContext):
        self.p, self.encode = ctx.params, ctx.encode
        self.sources = {cid: self._source(c, self.p.voice) for cid, c in ctx.cases.items()}
        self._vec_cache: dict[str, np.ndarray] = {}

    @staticmethod
    def _source(case: SPCase, voice: str = "patient") -> _Source:
        """The case's answerable text. ``voice`` "patient": its information in the
        patient's own words (:func:`medpref.simulation.voice.patient_facts`); "verbatim":
        each section's sentences as the source wrote them."""
        if voice == "patient":
            facts = patient_facts(case)
            history, findings = list(facts.history), list(facts.findings)
        else:
            history, findings = [], []
            for section, text in case.patient_info.items():
                (findings if FINDINGS.search(section) else history).extend(
                    section_sentences(text))
        pairs = [(q.get("doctor", "").strip(), q.get("patient", "").strip()) for q in case.script]
        if voice == "patient":     # a script's stage directions are not said ("（手捂下腹部）")
            pairs = [(q, without_stage_directions(a)) for q, a in pairs]
        pairs = [(q, a) for q, a in pairs if q and a]
        return _Source([q for q, _ in pairs], [a for _, a in pairs], said_alone(history),
                       findings, case.chief_complaint)

    def _vectors(self, texts: Sequence[str]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in self._vec_cache]
        if todo:
            self._vec_cache.update(zip(todo, self.encode(todo)))
        return np.array([self._vec_cache[t] for t in texts]) if texts else np.zeros((0, 1))

    def _similarity(self, query: str, texts: Sequence[str], zh: bool,
                    scripted: bool = False) -> np.ndarray:
        if not texts:
            return np.zeros(0)
        if zh:
            score = bigram_dice if scripted else bigram_containment
            return np.array([score(query, t) for t in texts])
        return self._vectors(texts) @ self._vectors([query])[0]

    def answer(self, case_id: str, lang: str, doctor_turn: str) -> tuple[str, list[dict]]:
        """The answer to one doctor turn and, per question sentence, where it came from."""
        src, p = self.sources[case_id], self.p
        zh = lang == "zh" or is_chinese(doctor_turn)
        asked = [s for s in split_sentences(doctor_turn)
                 if speech_act(s) in ("question", "recommendation")]
        if not asked:
            said = p.nothing_asked.get("zh" if zh else "en", p.nothing_asked["en"])
            return said, [{"question": None, "from": "nothing_asked"}]
        said, trace = [], []
        for q in asked:
            pick = self._pick(src, q, zh, p)
            trace.append({"question": q, **pick})
            if pick["text"] and pick["text"] not in said:
                said.append(pick["text"])
        said = said[:p.max_sentences] if p.max_sentences else said
        if not said:
            return DONT_KNOW["zh" if zh else "en"], trace
        return " ".join(closed(s, zh) if len(said) > 1 else s for s in said), trace

    def _pick(self, src: _Source, q: str, zh: bool, p) -> dict:
        cut = ((p.zh_script_threshold, p.zh_findings_threshold, p.zh_history_threshold) if zh
               else (p.script_threshold, p.findings_threshold, p.history_threshold))
        sims = self._similarity(q, src.questions, zh, scripted=True)
        if len(sims) and sims.max() >= cut[0]:
            k = int(sims.argmax())
            return {"text": src.answers[k], "from": "script", "score": round(float(sims[k]), 3)}
        if OPENING.search(q):
            return {"text": src.complaint, "from": "complaint", "score": None}
        if asks_for_test(q):            # a test or an examination asked for: its finding
            sims = self._similarity(q, src.findings, zh)
            if len(sims) and sims.max() >= cut[1]:
                k = int(sims.argmax())
                return {"text": src.findings[k], "from": "findings",
                        "score": round(float(sims[k]), 3)}
        sims = self._similarity(q, src.history, zh)
        if len(sims) and sims.max() >= cut[2]:
            k = int(sims.argmax())
            return {"text": src.history[k], "from": "history", "score": round(float(sims[k]), 3)}
        return {"text": "", "from": "dont_know",
                "score": round(float(sims.max()), 3) if len(sims) else None}

    def reply(self, consults: Sequence[Any]) -> list[PatientReply]:
        out = []
        for c in consults:
            text, trace = self.answer(c.case_id, c.lang, c.turns[-1].text)
            out.append(PatientReply(text, step={"answered_from": trace,
                                                "fallback": fallback_of(trace)}))
        return out


def fallback_of(trace: Sequence[dict]) -> str | None:
    """Which fallback an extractive answer was (``FALLBACKS``), None when some question
    got case text."""
    if any(t.get("from") == "nothing_asked" for t in trace):
        return "nothing_asked"
    if all(t.get("from") == "dont_know" for t in trace):
        return "dont_know"
    return None
