"""SP checklist graders behind one interface, registered by name (``grader.mode``).

A grader turns consultations and their cases into one :class:`ItemGrade` per checklist
item. Four are registered:

- ``embedding``: MiniLM cosine of the item and each whole doctor turn (the grade the
  project used before; it credits a doctor who repeats the complaint, kept to compare);
- ``options`` / ``generate``: the judge role (p(yes) of one pass, or votes of ``k``
  answers) on the transcript with the doctor's echo sentences removed when
  ``strip_echoes`` is on; an item without a usable answer abstains;
- ``echo_aware`` (the default): only the doctor's own sentences count (echoes of the
  patient are excluded, :mod:`medpref.echo`), the sentence's act must fit
  the category (a symptom asked, a test asked about or recommended, a disease named, not
  declined), and it must match the item by MiniLM cosine (English) or by content-unit
  share (any language). A disease must be named, not alluded to: the sentence shares a
  unit of the disease's name beyond its modifiers and does not negate it ("no signs of
  asthma"); it passes only in a turn naming fewer than ``max_candidates`` candidates,
  counting list pieces or disease-shaped words, whichever is more. In every category, a
  sentence that names ``max_candidates`` or more candidates at once (checklist items it
  names by their words, in any category, or its list pieces:
  :func:`~medpref.echo.lists_too_many`) earns nothing: listing is not asking; nor does
  a question about someone other than the patient and the patient's family, home or
  contacts ("Does anyone have diabetes…?", "Have I had…?":
  :func:`~medpref.echo.about_someone_else`).

  Since issue 41's run-sentence batches (``data/embedded/sp_grader_changes.yaml``,
  ``clause-and-meaning``): a question asks only by its asking clauses
  (:func:`asking_part`: "That's depression…: does anyone notice…?" asks after the colon;
  a long statement closed with "?" asks nothing); a symptom needs a shared content
  share of ``lexical_threshold`` or a MiniLM cosine of ``strong_match_threshold``
  (tests keep ``match_threshold``); a question that lost its question mark ("Have there
  been any changes to your appetite") is a question; words put in someone else's mouth
  (",' says Dr. …") earn nothing; a disease's candidates are counted in the clause that
  names it, and a word that only modifies another disease ("diabetic ketoacidosis")
  does not name it.

Adding a grader: one class with ``grade(consults, cases)`` and ``@register_grader``.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from medpref.contracts import SPCase, Turn
from medpref.echo import (
    ZH_ITEM_FRAME,
    DoctorSentence,
    about_someone_else,
    content_units,
    disease_core,
    disease_words,
    doctor_sentences,
    is_chinese,
    item_parts,
    list_pieces,
    lists_too_many,
    names_disease,
    zh_item_parts,
    zh_share,
)
from medpref.registry import GRADERS, register_grader
from medpref.sentences import split_sentences
from medpref.simulation.grading import (
    CATEGORIES,
    GradingSetup,
    ItemGrade,
    Judge,
    grade_consultations,
    heuristic_disease_count,
)
from medpref.simulation.zh_encoder import zh_encoder

#: a question mentioning this many checklist items of more than one category recites them
RECITAL_ITEMS = 3

# which speech acts can earn an item of each category
ACTS_FOR = {"symptoms": ("question",), "tests": ("question", "recommendation"),
            "diseases": ("question", "recommendation", "statement")}

# clauses of one sentence: a colon, a dash between spaces, a semicolon
_CLAUSE_CUT = re.compile(r"\s*:\s+|\s+[-–—]+\s+|\s*;\s*")
_ASKS = re.compile(
    r"^\W*(?:so\s+|and\s+|also\s+|now\s+|okay\s*,?\s+|ok\s*,?\s+|but\s+)?(?:how|what|when|"
    r"where|which|who|why|do|does|did|have|has|had|are|is|was|were|can|could|would|will|any|"
    r"tell me|describe|please (?:tell|describe))\b", re.IGNORECASE)
#: a clause with a question mark but no question word asks only when it is this short
#: ("You've had a fever?"); a longer one is a statement the model closed with "?"
DECLARATIVE_QUESTION_WORDS = 12
#: a family-history item ("family history of asthma") is asked only by a question that
#: names the family: "Have he had any asthma attacks?" asks about the patient
FAMILY_ITEM = re.compile(r"\s*family history\b", re.IGNORECASE)
FAMILY_WORDS = re.compile(
    r"\b(?:famil\w*|mother|mum|mom|father|dad|parents?|siblings?|brothers?|sisters?|"
    r"relatives?|grand(?:mother|father|parents?|ma|pa)|aunts?|uncles?|cousins?|"
    r"twins?|runs? in)\b", re.IGNORECASE)
#: a symptom question longer than this many words (its asking clauses) needs the strong
#: cosine to match by meaning alone
STRICT_AFTER_WORDS = 10


def asking_part(sentence: str) -> str:
    """The clauses of an English question that ask (rubric: a run-on turn is judged clause
    by clause; "That's depression…: does anyone notice…?" asks only after the colon):
    each clause opening with a question word, or ending with a question mark and at most
    :data:`DECLARATIVE_QUESTION_WORDS` words long; "" when none does. A Chinese sentence
    is kept whole."""
    if is_chinese(sentence):
        return sentence
    clauses = [c for c in _CLAUSE_CUT.split(sentence.strip()) if c.strip()]
    return " ".join(c for c in clauses
                    if _ASKS.match(c) or (c.rstrip().endswith("?")
                                          and len(c.split()) <= DECLARATIVE_QUESTION_WORDS))


_AUX_QUESTION = re.compile(r"^\W*(?:so\s+|and\s+)?(?:have|has|had|do|does|did|is|are|was|were)\s+"
                           r"(?:there|you|he|she|they|we|it)\b", re.IGNORECASE)


#: words put in someone else's mouth ("That suggests prediabetes,' says Dr. …"): a made-up
#: quotation is not the doctor's own act
_REPORTED = re.compile(r"['\"’”]\s*,?\s*(?:says|said|adds|added|replies|replied|explains)\b|"
                       r"\b(?:says|said) (?:dr|doctor|nurse|professor)\b", re.IGNORECASE)


def _question_act(s: DoctorSentence) -> DoctorSentence:
    """A question that lost its question mark ("Have there been any changes to your
    appetite since then") is a question, not the request its opening verb looks like."""
    if s.act == "recommendation" and _AUX_QUESTION.match(s.text):
        return dataclasses.replace(s, act="question")
    return s


def naming_clause(sentence: str, item: str) -> str:
    """The clause of the sentence that names the disease (the whole sentence when none
    does by a unit of its name, or for Chinese)."""
    if is_chinese(sentence):
        return sentence
    core = disease_core(item)
    return next((c for c in _CLAUSE_CUT.split(sentence) if core & content_units(c)), sentence)


#: a checklist word used as the modifier of another disease ("diabetic ketoacidosis" does
#: not name diabetes)
_MODIFIED = r"\s+[a-z]+(?:itis|osis|pathy|a?emia|uria)\b"


class ZhHeading(BaseModel):
    """A Chinese history heading: its words in an item and the words that ask it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    item: re.Pattern
    asks: re.Pattern


class ZhHistory(BaseModel):
    """The file of ``simulation.grader.zh_headings``: the headings, and the relatives a
    question may list without listing candidates (both as regular expressions)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    relatives: re.Pattern
    headings: tuple[ZhHeading, ...] = Field(min_length=1)


class ItemSense(BaseModel):
    """Item words a sentence may use in another sense: the items it guards (``item``, not
    ``not_item``) and the sentences in the other sense (``other_sense``, not ``unless``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    item: re.Pattern
    not_item: re.Pattern | None = None
    other_sense: re.Pattern
    unless: re.Pattern | None = None

    @field_validator("item", "not_item", "other_sense", "unless", mode="before")
    @classmethod
    def _ignore_case(cls, v):
        return re.compile(v, re.IGNORECASE) if isinstance(v, str) else v

    def guards(self, item: str) -> bool:
        return bool(self.item.search(item)) and not (self.not_item and
                                                     self.not_item.search(item))

    def other(self, sentence: str) -> bool:
        return bool(self.other_sense.search(sentence)) and not (self.unless and
                                                                self.unless.search(sentence))


class ItemSenses(BaseModel):
    """The file of ``simulation.grader.item_senses``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    senses: tuple[ItemSense, ...] = Field(min_length=1)


@functools.cache
def load_item_senses(path: str) -> ItemSenses:
    """``simulation.grader.item_senses`` read once per process; a bad entry names the file
    and the field (:func:`~medpref.contracts.parse_record`)."""
    from medpref.contracts import parse_record
    from medpref.params import repo_path

    full = repo_path(path)
    return parse_record(ItemSenses, yaml.safe_load(full.read_text(encoding="utf-8")), full)


@functools.cache
def load_zh_headings(path: str) -> ZhHistory:
    """``simulation.grader.zh_headings`` read once per process; a bad entry names the file
    and the field (:func:`~medpref.contracts.parse_record`)."""
    from medpref.contracts import parse_record
    from medpref.params import repo_path

    full = repo_path(path)
    return parse_record(ZhHistory, yaml.safe_load(full.read_text(encoding="utf-8")), full)


def zh_item_texts(item: str) -> list[str]:
    """A Chinese checklist item as the texts the encoder reads: the item and each of its
    parts, its frame removed (the text form of :func:`~medpref.echo.zh_item_parts`)."""
    core = ZH_ITEM_FRAME.sub(" ", item)
    parts = [core, *re.split(r"[、，,；;/（）()]|或者|或|及|和", core)]
    return list(dict.fromkeys(p.strip(" 。？?") for p in parts if p.strip(" 。？?")))


def _cosines(encode, per, items, parts_of, readable) -> dict[tuple[int, str], np.ndarray]:
    """Per (consultation, item): each doctor sentence's best cosine with one of the item's
    parts (``parts_of(item)``), -1 for a sentence the encoder does not read (``readable``
    false); one encoder batch; empty without an encoder."""
    if encode is None:
        return {}
    parts = {item: parts_of(item) for _, _, item in items}
    texts = sorted({s.text for ci, _, _ in items for s in per[ci] if s.text and readable(s.text)}
                   | {x for xs in parts.values() for x in xs})
    if not texts:
        return {}
    vecs = dict(zip(texts, encode(texts)))
    return {(ci, item): np.array([max(float(vecs[s.text] @ vecs[x]) for x in parts[item])
                                  if s.text in vecs else -1.0 for s in per[ci]])
            for ci, _, item in items if parts[item]}


class Grader(Protocol):
    name: str

    def grade(self, consults: Sequence[Any], cases: dict[str, SPCase]) -> list[ItemGrade]:
        ...


@dataclass
class GraderContext:
    """What a grader may need: the grader params, the shared grading pieces (templates,
    encoder, thresholds) and a factory for the judge (called only by graders that use
    one, so the embedding graders load no model)."""

    params: Any                                   # GraderParams
    setup: GradingSetup
    make_judge: Callable[[], Judge] | None = None


def build_grader(name: str, ctx: GraderContext) -> Grader:
    return GRADERS.get(name)(ctx)


def check_names(g) -> None:
    """Every grader ``simulation.grader`` names (``mode``, ``compare``) is registered; an
    unknown one is an error naming the key and the known graders. The grading stage checks
    this when it opens (the params model does not, so that the other stages of stage 06,
    which grade nothing, do not read the graders' code)."""
    GRADERS.get(g.mode)
    for name in g.compare:
        GRADERS.get(name, key="simulation.grader.compare")


def without_echoes(turns: Sequence[Turn], echo_overlap: float, min_new: int) -> list[Turn]:
    """The transcript with every echo sentence of the doctor removed (a doctor turn
    left empty keeps a marker so the turn order stays readable)."""
    echoes = {(s.turn, s.text) for s in doctor_sentences(turns, echo_overlap, min_new)
              if s.echo}
    out = []
    for i, t in enumerate(turns):
        if t.role != "doctor":
            out.append(t)
            continue
        kept = [s for s in split_sentences(t.text) if (i, s) not in echoes]
        out.append(Turn(role="doctor", text=" ".join(kept) or "(repeats the patient)"))
    return out


@register_grader("embedding")
class EmbeddingGrader:
    """Whole doctor turns against the item by MiniLM cosine (no echo check)."""

    def __init__(self, ctx: GraderContext):
        self.setup = dataclasses.replace(ctx.setup, judge=None)

    def grade(self, consults, cases):
        return grade_consultations(consults, cases, self.setup)


class JudgeGrader:
    """The judge role asked about every item; abstains on unusable answers."""

    mode = "options"

    def __init__(self, ctx: GraderContext):
        p = ctx.params
        if ctx.make_judge is None:
            raise ValueError(f"grader '{self.mode}' needs a judge role")
        self.setup = dataclasses.replace(ctx.setup, judge=ctx.make_judge())
        self.strip = p.strip_echoes
        self.echo = (p.echo_overlap, p.echo_min_new)

    def grade(self, consults, cases):
        if self.strip:
            consults = [dataclasses.replace(c, turns=without_echoes(c.turns, *self.echo))
                        for c in consults]
        return grade_consultations(consults, cases, self.setup)


@register_grader("options")
class OptionsJudgeGrader(JudgeGrader):
    mode = "options"


@register_grader("generate")
class GenerateJudgeGrader(JudgeGrader):
    mode = "generate"


@register_grader("echo_aware")
class EchoAwareGrader:
    """Own sentences of the right act, matched to the item (see the module text)."""

    def __init__(self, ctx: GraderContext):
        p = ctx.params
        self.encode = ctx.setup.encode
        self.match = p.match_threshold
        self.strong = p.strong_match_threshold
        self.lexical = p.lexical_threshold
        self.zh_chars = p.zh_char_threshold
        self.zh_match = p.zh_match_threshold
        self.zh_encoder = p.zh_encoder
        self.zh_history = load_zh_headings(p.zh_headings) if p.zh_headings else None
        self.senses = load_item_senses(p.item_senses).senses if p.item_senses else ()
        self.max_requests = p.max_requests
        self.echo = (p.echo_overlap, p.echo_min_new)
        self.max_candidates = ctx.setup.max_candidates

    def grade(self, consults, cases):
        per = [[_question_act(s) for s in doctor_sentences(c.turns, *self.echo)]
               for c in consults]
        # a question asks by the clauses that ask, not by a statement before them
        asks = [[dataclasses.replace(s, text=asking_part(s.text)) if s.act == "question"
                 else s for s in sents] for sents in per]
        items = [(ci, cat, item) for ci, c in enumerate(consults)
                 for cat in CATEGORIES for item in getattr(cases[c.case_id].checklist, cat)]
        sims = self._similarities(per, items)
        ask_sims = self._similarities(asks, [x for x in items if x[1] != "diseases"])
        hits = {(ci, cat, item): (self._matches(item, asks[ci], ask_sims.get((ci, item)),
                                                strict=cat == "symptoms")
                                  if cat != "diseases" else
                                  self._matches(item, per[ci], sims.get((ci, item))))
                for ci, cat, item in items}
        # the items a sentence names by their words (no cosine: MiniLM's loose match puts a
        # single-topic question near several items of one case)
        named = {(ci, cat, item): self._own(per[ci], cat, item, self._matches(item, per[ci],
                                                                              None))
                 for ci, cat, item in items}
        # the items each sentence mentions by their words, whatever its act (a recital)
        mentioned = {key: self._matches(key[2], asks[key[0]], None) for key in items}
        listing = [self._listing(sents, [named[key] for key in items if key[0] == ci],
                                 [(key[1], mentioned[key]) for key in items if key[0] == ci])
                   for ci, sents in enumerate(per)]
        return [self._grade(consults[ci], per[ci], cat, item, sims.get((ci, item)),
                            hits[(ci, cat, item)], listing[ci])
                for ci, cat, item in items]

    @staticmethod
    def _own(sents: Sequence[DoctorSentence], cat: str, item: str, hits: list[int]
             ) -> list[int]:
        """The matched sentences that could earn the item: the doctor's own (no echo), of
        the act the category needs, and for a disease, naming it."""
        own = [k for k in hits if not sents[k].echo and sents[k].act in ACTS_FOR[cat]
               and not about_someone_else(sents[k].text) and not _REPORTED.search(sents[k].text)
               and not (sents[k].act == "question"
                        and about_someone_else(asking_part(sents[k].text)))]
        if cat == "diseases":
            own = [k for k in own if names_disease(sents[k].text, item)]
        return own

    def _listing(self, sents: Sequence[DoctorSentence], earners: Sequence[list[int]],
                 mentions: Sequence[tuple[str, list[int]]] = ()) -> set[int]:
        """The sentences that list instead of asking: those naming too many candidates at
        once (counted by the checklist items each names by their words and would earn, in
        any category, or by its list pieces); a question that mentions
        ``RECITAL_ITEMS`` or more checklist items of more than one category (a symptom, a
        test and a diagnosis in one breath is the checklist read out, not a question);
        and a request listing ``max_requests`` or more tests (an order for everything)."""
        matched = [sum(k in own for own in earners) for k in range(len(sents))]
        out = set()
        for k, s in enumerate(sents):
            cats = [cat for cat, hits in mentions if k in hits]
            if (lists_too_many(self._without_relatives(s.text), matched[k], s.act,
                               self.max_candidates)
                    or (s.act == "question" and len(cats) >= RECITAL_ITEMS
                        and len(set(cats)) > 1)
                    or (s.act == "recommendation" and list_pieces(s.text) >= self.max_requests)):
                out.add(k)
        return out

    def _without_relatives(self, text: str) -> str:
        """A Chinese sentence with the relatives it lists taken out (``zh_headings``):
        "父母、兄弟姐妹、爱人、子女身体好吗？" lists people, not candidates."""
        if self.zh_history is None or not is_chinese(text):
            return text
        return self.zh_history.relatives.sub("", text)

    def _similarities(self, per, items) -> dict[tuple[int, str], np.ndarray]:
        """Per consultation and item: each doctor sentence's best cosine with the item or
        one of its parts, one batch per language: MiniLM for English, the Chinese encoder
        (``zh_encoder``, :mod:`~medpref.simulation.zh_encoder`) for a Chinese symptom item
        and Chinese sentences (none when it is off: characters alone then). A Chinese test
        or disease is matched by its characters only: a test is asked for by its name, and
        the encoder puts a question on the same topic near it ("得过肝炎吗？" near 肝功能)."""
        english = _cosines(self.encode, per, items, lambda item: [
            x for x in item_parts(item) if not is_chinese(x)], lambda text: not is_chinese(text))
        chinese = _cosines(zh_encoder(self.zh_encoder), per,
                           [x for x in items if is_chinese(x[2]) and x[1] == "symptoms"],
                           zh_item_texts, is_chinese)
        return {**english, **chinese}

    def _matches(self, item: str, sents: Sequence[DoctorSentence],
                 cos: np.ndarray | None, strict: bool = False) -> list[int]:
        """The sentences that match the item: by a share of its content units
        (``lexical_threshold``) or by MiniLM cosine. ``strict`` (a symptom question) adds
        the symptom rules: a long question needs the strong cosine, and a family-history
        item is asked only with a family word (:data:`FAMILY_WORDS`)."""
        if is_chinese(item):
            return self._matches_zh(item, sents, cos)
        wants = [u for u in (content_units(x) for x in item_parts(item)) if u]
        senses = [sense for sense in self.senses if sense.guards(item)]
        family_item = strict and bool(FAMILY_ITEM.match(item))
        hits = []
        for k, s in enumerate(sents):
            if not s.text or any(sense.other(s.text) for sense in senses):   # another sense
                continue
            if family_item and not FAMILY_WORDS.search(s.text):
                continue
            have = content_units(s.text)
            lexical = max((len(w & have) / len(w) for w in wants), default=0.0)
            # a symptom question is matched by meaning only when MiniLM is sure: at the
            # match threshold its loose match puts the model doctors' questions near items
            # they do not ask ("Have your kidneys checked?" near nocturia)
            strict_here = strict and len(s.text.split()) > STRICT_AFTER_WORDS
            near = cos is not None and cos[k] >= (self.strong if strict_here else self.match)
            if lexical >= self.lexical or near:
                hits.append(k)
        return hits

    @staticmethod
    def _only_as_modifier(sentence: str, item: str) -> bool:
        """Every English word of the sentence that names the disease modifies another
        disease right after it ("diabetic ketoacidosis" for type 2 diabetes mellitus)."""
        if is_chinese(sentence):
            return False
        core = disease_core(item)
        words = [m for m in re.finditer(r"[a-z]+", sentence.lower())
                 if content_units(m.group(0)) & core]
        if not words:
            return False
        return all(re.match(_MODIFIED, sentence.lower()[m.end():])
                   and not content_units(re.match(_MODIFIED, sentence.lower()[m.end():])
                                         .group(0)) & core for m in words)

    def _matches_zh(self, item: str, sents: Sequence[DoctorSentence],
                    cos: np.ndarray | None = None) -> list[int]:
        """A Chinese item: the sentences that ask one of its parts by its characters, the
        item's frame removed (:func:`~medpref.echo.zh_item_parts`, ``zh_char_threshold``),
        or by meaning (the Chinese encoder's cosine, ``zh_match_threshold``)."""
        parts = zh_item_parts(item)
        asks = [h.asks for h in self.zh_history.headings
                if h.item.search(item)] if self.zh_history else []
        return [k for k, s in enumerate(sents)
                if max((zh_share(x, s.text) for x in parts), default=0.0) >= self.zh_chars
                or (cos is not None and cos[k] >= self.zh_match)
                or any(a.search(s.text) for a in asks)]

    def _grade(self, c, sents, cat, item, cos, hits, listing) -> ItemGrade:
        echoes = [sents[k].text for k in hits if sents[k].echo]
        # a disease is named, not alluded to or denied: the matched sentence shares a
        # unit of the disease's name and does not negate it (echo.names_disease)
        own = self._own(sents, cat, item, hits)
        grade = ItemGrade(c.case_id, c.doctor, cat, item, False, "echo_aware",
                          echo_excluded=echoes)
        if cat == "diseases":
            # candidates: the list pieces of the clause that names it (rubric: "in one
            # sentence or one run-on clause"), or its disease-shaped words when a run-on
            # list has no separators, whichever is more; a word that only modifies another
            # disease ("diabetic ketoacidosis") does not name it
            own = [k for k in own if not self._only_as_modifier(sents[k].text, item)]
            clause = {k: naming_clause(sents[k].text, item) for k in own}
            counts = {k: max(heuristic_disease_count(clause[k], item), disease_words(clause[k]))
                      for k in own}
            grade.turns_named = [sents[k].turn for k in own]
            grade.candidates = [counts[k] for k in own]
            own = [k for k in own if counts[k] < self.max_candidates]
        # listing is not asking: a sentence naming too many candidates at once earns nothing
        grade.listing_excluded = [sents[k].text for k in own if k in listing]
        own = [k for k in own if k not in listing]
        grade.earners = [sents[k].text for k in own]
        if own:
            best = own[0] if cos is None else max(own, key=lambda k: cos[k])
            grade.passed = True
            grade.evidence_turn, grade.evidence = sents[best].turn, sents[best].text
        return grade
