"""Checklist grading of SP consultations (PLPF App. B.3, Eq. 6) and its validation.

An item passes when the doctor actively asked about the symptom (history included),
recommended the test, or named the disease. The judge role answers each question with
every prompt in ``grader.prompts`` (the transcript before the item, and the item before
the transcript: both orders), in ``options`` mode as p(yes) of one forward pass, in
``generate`` mode as the share of parsable yes among ``k`` answers; the mean decides.
When no prompt gave a usable answer the item *abstains* (``passed`` None): it is left
out of the case's score and counted, never read as a pass or a fail. Without a judge the
embedding grade decides (cosine of the item and the best doctor turn). A disease passes
only in a doctor turn that names fewer than ``max_candidates`` candidate diseases. Eq. 6
averages c/m over cases; a case whose category is empty is left out of that category's
mean and counted. The graders that use these pieces live in
:mod:`medpref.simulation.graders` (a registry keyed by ``grader.mode``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from medpref.contracts import SPCase, Turn
from medpref.echo import named_in_complaint
from medpref.llm import CallSpec, LLMClient
from medpref.prompts import PromptTemplate, format_dialogue
from medpref.sentences import split_sentences
from medpref.simulation.knowledge import Encoder

CATEGORIES = ("symptoms", "tests", "diseases")
CATEGORY_NOUN = {"symptoms": "symptom or history item", "tests": "medical test",
                 "diseases": "disease"}
ANSWER_PREFIX = "Answer:"
YES_NO = (" yes", " Yes", " no", " No")     # either case; p(yes) sums the yes forms
COUNT_OPTIONS = tuple(f" {n}" for n in range(10))
GPD_OPTIONS = (" A", " B", " C")

# -- pure parsers ------------------------------------------------------------------------





def parse_yes_no(text: str | None) -> bool | None:
    """Yes/no from the start of an answer (an ``Answer:`` label is skipped); None when
    the answer starts with anything else."""
    if not text:
        return None
    t = re.sub(r"^\s*answer\s*[:：]\s*", "", text.strip(), flags=re.IGNORECASE)
    if re.match(r"^\W*(yes|y|true|pass(?:ed)?)\b", t, re.IGNORECASE) or re.match(
            r"^\W*(是|对|有)", t):
        return True
    if re.match(r"^\W*(no|n|false|fail(?:ed)?)\b", t, re.IGNORECASE) or re.match(
            r"^\W*(否|不|没有)", t):
        return False
    return None


def parse_count(text: str | None) -> int | None:
    """The first whole number in an answer (digits or a small English number word)."""
    if not text:
        return None
    words = {"zero": 0, "none": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5,
             "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}
    m = re.search(r"\d+|\b(" + "|".join(words) + r")\b", text, re.IGNORECASE)
    if not m:
        return None
    return int(m.group(0)) if m.group(0).isdigit() else words[m.group(0).lower()]


GPD_LABELS = {"A": "fully", "B": "partially", "C": "not"}


def parse_implication(text: str | None) -> str | None:
    """GPT-Distance verdict: ``fully`` / ``partially`` / ``not`` from a letter (A/B/C) or
    the word itself at the start of the answer; None otherwise."""
    if not text:
        return None
    t = re.sub(r"^\s*answer\s*[:：]\s*", "", text.strip(), flags=re.IGNORECASE)
    m = re.match(r"^\W*([ABC])\b", t)
    if m:
        return GPD_LABELS[m.group(1)]
    m = re.match(r"^\W*(fully|partially|partly|not)\b", t, re.IGNORECASE)
    if m:
        word = m.group(1).lower()
        return "partially" if word == "partly" else word
    return None


_LIST_SPLIT = re.compile(r",|;|\bor\b|\band\b|、|，|；|或者|或|\n\s*(?:[-*•]|\d+[.)])")


def heuristic_disease_count(turn: str, disease: str) -> int:
    """Fallback count of candidate diseases named with ``disease``: the pieces of the
    sentence (or list) that names it, split at commas, 'or', 'and' and list bullets."""
    # a Chinese sentence ends at its mark, with or without a space after it
    sentences = split_sentences(turn, semicolons=False)
    holder = next((s for s in sentences if disease.lower() in s.lower()), turn)
    return max(1, len([p for p in _LIST_SPLIT.split(holder) if p and p.strip()]))


# -- Eq. 6 ---------------------------------------------------------------------------------

def case_category_score(passes: Sequence[bool]) -> float | None:
    """c_i^j / m_i^j of one case and category; None for an empty category."""
    return sum(passes) / len(passes) if passes else None


def disease_passes(named_in_turns: Sequence[int], candidates: Sequence[int | None],
                   max_candidates: int) -> bool:
    """A disease passes when some doctor turn names it with fewer than ``max_candidates``
    candidates in that turn (``candidates[t]``; None counts as one)."""
    return any((candidates[t] or 1) < max_candidates for t in named_in_turns)


def eq6(case_scores: Sequence[dict[str, float | None]]) -> dict[str, dict[str, float | int]]:
    """s^j = mean over cases of c/m, in percent; cases with an empty category are left
    out of that category's mean and counted in ``empty``."""
    out = {}
    for cat in CATEGORIES:
        vals = [s[cat] for s in case_scores if s.get(cat) is not None]
        out[cat] = {"score": 100.0 * float(np.mean(vals)) if vals else float("nan"),
                    "n": len(vals), "empty": len(case_scores) - len(vals)}
    return out


# -- the judge -----------------------------------------------------------------------------

@dataclass
class Judge:
    """A judge role asked yes/no or multiple-choice questions, with its raw answers kept."""

    client: LLMClient
    call: CallSpec  # its budget and its answer's start (both modes read after the prefix)
    mode: str = "options"
    k: int = 1
    temperature: float = 0.7
    min_mass: float = 0.05
    seed: int = 0

    def _generate(self, prompts: Sequence[list[dict[str, str]]]) -> list[list[str | None]]:
        sampled = self.k > 1 and self.temperature > 0
        reqs = [self.client.request(p, self.call,
                                    temperature=self.temperature if sampled else 0.0,
                                    seed=self.seed + j if sampled else None)
                for p in prompts for j in range(self.k)]
        comps = self.client.complete(reqs)
        return [[None if c.error else c.text for c in comps[i * self.k:(i + 1) * self.k]]
                for i in range(len(prompts))]

    def yes_probability(self, prompts: Sequence[list[dict[str, str]]]
                        ) -> list[tuple[float | None, list[Any]]]:
        """(p(yes) or share of yes, raw answers) per prompt; None when unusable."""
        if not prompts:
            return []
        if self.mode == "options":
            scores = self.client.option_scores(list(prompts), YES_NO, self.call.answer_prefix)
            out = []
            for s in scores:
                p_yes = s.probs[" yes"] + s.probs[" Yes"]
                out.append((p_yes if s.mass >= self.min_mass else None,
                            [{"p_yes": round(p_yes, 4), "mass": round(s.mass, 4)}]))
            return out
        out = []
        for raws in self._generate(prompts):
            votes = [v for v in (parse_yes_no(r) for r in raws) if v is not None]
            out.append((sum(votes) / len(votes) if votes else None, raws))
        return out

    def choose(self, prompts: Sequence[list[dict[str, str]]], options: Sequence[str],
               parse) -> list[tuple[str | None, list[Any]]]:
        """The chosen option (stripped) per prompt; ``parse`` reads generated answers."""
        if not prompts:
            return []
        if self.mode == "options":
            scores = self.client.option_scores(list(prompts), list(options),
                                               self.call.answer_prefix)
            return [(max(s.probs, key=s.probs.get).strip() if s.mass >= self.min_mass else None,
                     [{"probs": {k.strip(): round(v, 4) for k, v in s.probs.items()},
                       "mass": round(s.mass, 4)}]) for s in scores]
        out = []
        for raws in self._generate(prompts):
            parsed = [v for v in (parse(r) for r in raws) if v is not None]
            out.append((max(set(parsed), key=parsed.count) if parsed else None, raws))
        return out


# -- grading a consultation ----------------------------------------------------------------

@dataclass
class ItemGrade:
    case: str
    doctor: str
    category: str
    item: str
    passed: bool | None            # None: abstained (no usable judge answer)
    method: str                    # judge | embedding | echo_aware | abstain | none
    p_yes: float | None = None
    turns_named: list[int] = field(default_factory=list)   # diseases: doctor turns naming it
    candidates: list[int | None] = field(default_factory=list)
    raw: list[Any] = field(default_factory=list)
    evidence_turn: int | None = None   # transcript index of the doctor turn that earned it
    evidence: str | None = None        # the doctor sentence that earned it
    echo_excluded: list[str] = field(default_factory=list)   # echoes that matched the item
    # matched sentences that name too many candidates at once (the listing rule)
    listing_excluded: list[str] = field(default_factory=list)
    # every doctor sentence that earns the item (the evidence is the closest of them)
    earners: list[str] = field(default_factory=list)


@dataclass
class GradingSetup:
    judge: Judge | None             # None: grade by embedding similarity only
    templates: list[PromptTemplate]
    count_template: PromptTemplate
    encode: Encoder | None
    pass_threshold: float = 0.5
    max_candidates: int = 4
    embedding_threshold: float | None = 0.6   # no judge: cosine(item, doctor turn) to pass


def render_item_prompt(template: PromptTemplate, turns: Sequence[Turn], category: str,
                       item: str) -> list[dict[str, str]]:
    return template.render(transcript=format_dialogue(turns), category=CATEGORY_NOUN[category],
                           item=item)


def _turn_window(turns: Sequence[Turn], doctor_index: int) -> list[Turn]:
    """The doctor's ``doctor_index``-th turn with the patient turn before it."""
    idx = [i for i, t in enumerate(turns) if t.role == "doctor"][doctor_index]
    return list(turns[max(0, idx - 1):idx + 1])


def _mean_or_none(values: Sequence[float | None]) -> float | None:
    usable = [v for v in values if v is not None]
    return float(np.mean(usable)) if usable else None


def _similar_turns(setup: GradingSetup, item: str, texts: Sequence[str]) -> list[int] | None:
    """Indices of the doctor turns whose MiniLM cosine with the item reaches the
    embedding threshold (None without an encoder)."""
    if setup.encode is None or setup.embedding_threshold is None:
        return None
    if not texts:
        return []
    vecs = setup.encode([item, *texts])
    sims = vecs[1:] @ vecs[0]
    return [i for i, s in enumerate(sims) if float(s) >= setup.embedding_threshold]


def grade_consultations(consults, cases: dict[str, SPCase], setup: GradingSetup
                        ) -> list[ItemGrade]:
    """Every checklist item of every consultation, judged in one batch per question kind."""
    questions: list[tuple[int, str, str, int | None, list[dict[str, str]]]] = []
    for ci, c in enumerate(consults):
        checklist = cases[c.case_id].checklist
        for cat in CATEGORIES:
            for item in getattr(checklist, cat):
                if cat == "diseases":
                    for t in range(len(c.doctor_turns)):
                        window = _turn_window(c.turns, t)
                        questions += [(ci, cat, item, t, render_item_prompt(tp, window, cat, item))
                                      for tp in setup.templates]
                else:
                    questions += [(ci, cat, item, None, render_item_prompt(tp, c.turns, cat, item))
                                  for tp in setup.templates]
    answers = (setup.judge.yes_probability([q[4] for q in questions]) if setup.judge
               else [(None, [])] * len(questions))   # no judge: the embedding grade decides
    by_key: dict[tuple, list[tuple[float | None, list]]] = {}
    for (ci, cat, item, t, _), ans in zip(questions, answers):
        by_key.setdefault((ci, cat, item, t), []).append(ans)
    named_turns = _disease_turns(by_key, setup)
    counts = _candidate_counts(consults, named_turns, setup)
    grades = []
    for ci, c in enumerate(consults):
        checklist = cases[c.case_id].checklist
        for cat in CATEGORIES:
            for item in getattr(checklist, cat):
                grades.append(_grade_item(ci, c, cat, item, by_key, named_turns, counts, setup))
    return grades


def _disease_turns(by_key, setup: GradingSetup) -> dict[tuple[int, str], list[int] | None]:
    """For each (consultation, disease): the doctor turns the judge says name it
    (None when no turn got a usable answer)."""
    out: dict[tuple[int, str], list[int] | None] = {}
    for (ci, cat, item, t), answers in by_key.items():
        if cat != "diseases":
            continue
        p = _mean_or_none([a[0] for a in answers])
        slot = out.setdefault((ci, item), None)
        if p is None:
            continue
        out[(ci, item)] = (slot or []) + ([t] if p >= setup.pass_threshold else [])
    return out


def _candidate_counts(consults, named_turns, setup: GradingSetup) -> dict[tuple[int, int], int]:
    """Candidate diseases in each doctor turn that names a checklist disease."""
    wanted = sorted({(ci, t) for (ci, _), ts in named_turns.items() for t in ts or []})
    if setup.judge is None:
        return {}
    prompts = [setup.count_template.render(turn=consults[ci].doctor_turns[t]) for ci, t in wanted]
    answers = setup.judge.choose(prompts, COUNT_OPTIONS, parse_count)
    out = {}
    for (ci, t), (label, _) in zip(wanted, answers):
        out[(ci, t)] = int(label) if label is not None else None
    return out


def _grade_item(ci, c, cat, item, by_key, named_turns, counts, setup) -> ItemGrade:
    if cat == "diseases":
        turns = named_turns.get((ci, item))
        raw = [a[1] for t in range(len(c.doctor_turns)) for a in by_key.get((ci, cat, item, t), [])]
        if turns is None:
            return _unjudged(c, cat, item, setup, raw)
        cands = [counts.get((ci, t)) if counts.get((ci, t)) is not None
                 else heuristic_disease_count(c.doctor_turns[t], item) for t in turns]
        passed = disease_passes(list(range(len(turns))), cands, setup.max_candidates)
        return ItemGrade(c.case_id, c.doctor, cat, item, passed, "judge", None, turns, cands, raw)
    answers = by_key.get((ci, cat, item, None), [])
    p = _mean_or_none([a[0] for a in answers])
    raw = [a[1] for a in answers]
    if p is None:
        return _unjudged(c, cat, item, setup, raw)
    return ItemGrade(c.case_id, c.doctor, cat, item, p >= setup.pass_threshold, "judge",
                     round(p, 4), raw=raw)


def _unjudged(c, cat, item, setup, raw) -> ItemGrade:
    """An item with no usable judge answer abstains; with no judge at all, the
    embedding grade decides."""
    if setup.judge is not None:
        return ItemGrade(c.case_id, c.doctor, cat, item, None, "abstain", raw=raw)
    return _embedding_grade(c, cat, item, setup, raw)


def _embedding_grade(c, cat, item, setup, raw) -> ItemGrade:
    """The embedding grade: a doctor turn close enough to the item; for a disease, such a
    turn must also name fewer than ``max_candidates`` candidates (list heuristic)."""
    turns = _similar_turns(setup, item, c.doctor_turns)
    if turns is None:
        return ItemGrade(c.case_id, c.doctor, cat, item, False, "none", raw=raw)
    if cat != "diseases":
        return ItemGrade(c.case_id, c.doctor, cat, item, bool(turns), "embedding", raw=raw)
    cands = [heuristic_disease_count(c.doctor_turns[t], item) for t in turns]
    return ItemGrade(c.case_id, c.doctor, cat, item,
                     disease_passes(list(range(len(turns))), cands, setup.max_candidates),
                     "embedding", None, turns, cands, raw)


def unmeasurable_categories(case: SPCase) -> frozenset[str]:
    """The categories a case cannot measure: symptoms whose every item its opening
    complaint already names (AgentClinic's NEJM cases take their symptom items from the
    complaint). Asking about them only repeats the patient, so a perfect interview would
    score 0 there; they are left out of every score (:func:`leave_out_unmeasurable`)."""
    items = case.checklist.symptoms
    named = items and all(named_in_complaint(i, case.chief_complaint) for i in items)
    return frozenset({"symptoms"}) if named else frozenset()


def leave_out_unmeasurable(grades: Sequence[ItemGrade], cases: Mapping[str, SPCase]
                           ) -> list[ItemGrade]:
    """The grades with those of a category its case cannot measure left out of the score
    (``passed`` None, method ``unmeasurable``), whatever the grader said."""
    out = []
    for g in grades:
        if g.category in unmeasurable_categories(cases[g.case]):
            g = dataclasses.replace(g, passed=None, method="unmeasurable")
        out.append(g)
    return out


def case_scores(grades: Sequence[ItemGrade], case_ids: Sequence[str]
                ) -> list[dict[str, float | None]]:
    """Per case: c/m per category (None for an empty category); abstained items are
    left out of both c and m."""
    out = []
    for cid in case_ids:
        row: dict[str, Any] = {"case": cid}
        for cat in CATEGORIES:
            row[cat] = case_category_score([g.passed for g in grades if g.case == cid
                                            and g.category == cat and g.passed is not None])
        out.append(row)
    return out
