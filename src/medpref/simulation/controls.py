"""Control doctors: doctors whose turns are written from the case and the transcript, with
no model call, run in every SP test beside the model doctors (``simulation.controls``).

A result of "no detectable difference" means something only when the same run shows the
test telling a good interview from a bad one. Each control is a doctor kind, registered
by name (``register_control``, into :data:`medpref.registry.CONTROL_DOCTORS`) with its
polarity: a *positive* control must score high, a *negative* one low
(``simulation.controls_gate`` fails the run otherwise).

- ``control_script`` (positive): the case's own scripted interview, its doctor lines in
  order, spread over the round cap so that the whole script is asked (several lines a
  turn, each its own sentence); its last turn ends with one sentence naming the case's
  diagnosis. A case without a script gets one derived from its checklist: one plain
  question per symptom, one request per test.
- ``control_reciter`` (negative): round 1 is one question listing every checklist item
  (symptoms, tests and diseases); later rounds say something neutral.
- ``control_lecture`` (negative): the same generic explanation every round, no question.
- ``control_echo`` (negative): repeats the patient's last turn.
- ``control_testlist`` (negative): the same fourteen common tests ordered every round,
  whatever the case (:data:`COMMON_TESTS`).

Adding a control: a class with ``turn(case, consultation, round_no)`` and a
``polarity``, decorated with ``@register_control("control_name")``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from medpref.contracts import SPCase
from medpref.echo import named_in_complaint
from medpref.registry import CONTROL_DOCTORS, register_control
from medpref.simulation.consult import Consultation, DoctorTurn
from medpref.simulation.grading import unmeasurable_categories

#: the control doctors by name (:data:`medpref.registry.CONTROL_DOCTORS`)
CONTROLS = CONTROL_DOCTORS

POSITIVE, NEGATIVE = "positive", "negative"

#: said where a control has nothing of its own to say: no question and no checklist item
NEUTRAL = {"en": "Thank you, I have noted that.", "zh": "好的，我记下了。"}
#: the lecture: a generic explanation that asks nothing, recommends nothing and names no
#: disease (its words share nothing with a disease's name in the embedded cases)
LECTURE = {"en": "Thank you for telling me about this. Symptoms like these have many possible "
                 "causes, and most people recover well with time, rest and good self-care.",
           "zh": "谢谢您告诉我这些情况。这类不适可能有很多原因，"
                 "多数人注意休息、调整生活后会逐渐好转。"}
_END = re.compile(r"[.!?。！？]$")
_BREAK = re.compile(r"[.!?;。！？；]+(?=\s|$)")


def lang_of(case: SPCase) -> str:
    return "zh" if case.lang == "zh" else "en"


@dataclass
class ControlContext:
    """What a control may read: the cases by id and the round cap."""

    cases: dict[str, SPCase]
    rounds: int


def build_control(name: str, ctx: ControlContext):
    return CONTROLS.get(name)(ctx)


class ControlDoctor:
    """A doctor that writes each turn from its case and transcript (no model call)."""

    name = "control"
    kind = "control"
    polarity = NEGATIVE

    def __init__(self, ctx: ControlContext):
        self.cases, self.rounds = ctx.cases, ctx.rounds

    @property
    def model_id(self) -> str:
        return f"control:{self.name}"

    def turns(self, open_: Sequence[Consultation], round_no: int) -> list[DoctorTurn]:
        return [DoctorTurn(self.turn(self.cases[c.case_id], c, round_no)) for c in open_]

    def turn(self, case: SPCase, consult: Consultation, round_no: int) -> str:
        raise NotImplementedError


# -- control_script ---------------------------------------------------------------------

def as_sentence(text: str, lang: str = "en") -> str:
    """A script line as a sentence of its own: closing punctuation added where missing."""
    text = " ".join(text.split())
    return text if _END.search(text) else text + ("。" if lang == "zh" else ".")


def _lower_first(item: str) -> str:
    """"Chest pain" → "chest pain"; an acronym ("ECG", "HbA1c") keeps its case."""
    return item[:1].lower() + item[1:] if item[:2].istitle() else item


def derived_script(case: SPCase) -> list[str]:
    """A script from the checklist, for a case without one: one plain question per
    symptom, one request per test, each its own sentence."""
    cl = case.checklist
    if lang_of(case) == "zh":
        return [f"有没有{s}？" for s in cl.symptoms] + [f"建议做{t}。" for t in cl.tests]
    return ([f"Any {_lower_first(s)}?" for s in cl.symptoms]
            + [f"I'd like to check {_lower_first(t)}." for t in cl.tests])


def script_lines(case: SPCase) -> tuple[list[str], bool]:
    """The case's scripted doctor lines in order (each a sentence), and whether they were
    derived from the checklist (the case has no script)."""
    lines = [as_sentence(q.get("doctor", ""), lang_of(case)) for q in case.script
             if q.get("doctor", "").strip()]
    return (lines, False) if lines else (derived_script(case), True)


def spread(lines: Sequence[str], rounds: int) -> list[list[str]]:
    """``lines`` in order over ``rounds`` turns, as evenly as can be (earlier turns take
    the extra lines); a turn is empty when there are fewer lines than rounds."""
    size, extra = divmod(len(lines), rounds)
    out, start = [], 0
    for r in range(rounds):
        n = size + (r < extra)
        out.append(list(lines[start:start + n]))
        start += n
    return out


def diagnosis_sentence(case: SPCase) -> str:
    """The diagnosis as a clinician closes with it; empty when the case names none."""
    diseases = [d.strip() for d in case.checklist.diseases if d.strip()]
    if not diseases:
        return ""
    if lang_of(case) == "zh":
        return f"根据您说的情况，最可能的诊断是{'和'.join(diseases)}。"
    return f"From what you've told me, the most likely diagnosis is {' and '.join(diseases)}."


@register_control("control_script")
class ScriptControl(ControlDoctor):
    """The positive control: the case's whole scripted interview, then its diagnosis."""

    polarity = POSITIVE

    def turn(self, case, consult, round_no):
        lines, _ = script_lines(case)
        said = spread(lines, self.rounds)[round_no - 1]
        if round_no == self.rounds:
            said = [*said, diagnosis_sentence(case)]
        said = [s for s in said if s]
        return " ".join(said) if said else NEUTRAL[lang_of(case)]


# -- the negative controls --------------------------------------------------------------

def _one_piece(item: str) -> str:
    """A checklist item as a piece of one sentence (no sentence break inside it)."""
    return " ".join(_BREAK.sub(" ", item).split())


def recital(case: SPCase) -> str:
    """One question naming every checklist item of the case: symptoms, tests, diseases."""
    cl = case.checklist
    items = [_one_piece(i) for i in [*cl.symptoms, *cl.tests, *cl.diseases] if i.strip()]
    if lang_of(case) == "zh":
        return f"有没有{'、'.join(items)}？"
    if len(items) < 2:
        return f"Do you have {''.join(items)}?"
    return f"Do you have {', '.join(_lower_first(i) for i in items[:-1])}, or " \
           f"{_lower_first(items[-1])}?"


@register_control("control_reciter")
class ReciterControl(ControlDoctor):
    """Lists the whole checklist as one question, then says nothing more."""

    def turn(self, case, consult, round_no):
        return recital(case) if round_no == 1 else NEUTRAL[lang_of(case)]


@register_control("control_lecture")
class LectureControl(ControlDoctor):
    """The same generic explanation every round: no question, no item."""

    def turn(self, case, consult, round_no):
        return LECTURE[lang_of(case)]


@register_control("control_echo")
class EchoControl(ControlDoctor):
    """Repeats the patient's last turn word for word."""

    def turn(self, case, consult, round_no):
        last = next((t.text for t in reversed(consult.turns) if t.role == "patient"), "")
        return last or NEUTRAL[lang_of(case)]


#: fourteen common tests, the same for every case: ordering all of them says nothing about
#: which test this patient needs
COMMON_TESTS = {
    "en": ["a full blood count", "a urine test", "a stool test", "liver function tests",
           "kidney function tests", "electrolytes", "blood glucose", "a lipid panel",
           "C-reactive protein", "an ECG", "a chest X-ray", "an abdominal ultrasound",
           "a CT scan", "an MRI"],
    "zh": ["血常规", "尿常规", "大便常规", "肝功能", "肾功能", "电解质", "血糖", "血脂",
           "C反应蛋白", "心电图", "胸片", "腹部B超", "CT", "核磁共振"]}


def test_order(lang: str) -> str:
    """One request for every test of :data:`COMMON_TESTS`."""
    tests = COMMON_TESTS[lang]
    if lang == "zh":
        return f"建议做{'、'.join(tests)}。"
    return f"I'd like {', '.join(tests[:-1])} and {tests[-1]}."


@register_control("control_testlist")
class OrderEverythingControl(ControlDoctor):
    """Orders the same fourteen common tests every round, whatever the case: a test
    score it earns is the share of checklists that common tests cover, not a choice."""

    def turn(self, case, consult, round_no):
        return test_order(lang_of(case))


# -- the gate: what the controls must score ---------------------------------------------

class CoveredItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    item: str = Field(min_length=1)
    by: list[str] = Field(min_length=1)        # the script lines that ask it


class UncoveredItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    item: str = Field(min_length=1)
    reason: str = Field(min_length=1)          # why a clinician reads it as not asked


class ScriptCoverage(BaseModel):
    """A clinician's reading of one case's script against one checklist category: which
    items the script asks or requests (and by which lines), which it does not, and why
    (``data/embedded/sp_script_coverage.jsonl``).

    A case set published without an open licence (CSPT) cannot be quoted: its rows hold
    the counts only, with ``items_sha`` (:func:`items_fingerprint` of the category's
    items, so a changed case is still caught) and ``note`` (the reader's words, no case
    text) in place of the item lists."""

    model_config = ConfigDict(extra="forbid")
    case: str = Field(min_length=1)
    category: Literal["symptoms", "tests", "diseases"]
    covered: int = Field(ge=0)
    total: int = Field(ge=0)
    asked: list[CoveredItem] = Field(default_factory=list)
    uncovered: list[UncoveredItem] = Field(default_factory=list)
    items_sha: str | None = Field(None, pattern=r"^[0-9a-f]{12}$")
    note: str = ""

    @model_validator(mode="after")
    def _counts_add_up(self) -> ScriptCoverage:
        if self.items_sha is not None:
            if self.asked or self.uncovered or not self.covered <= self.total:
                raise ValueError("a counts-only row (items_sha) lists no items and has "
                                 f"covered ≤ total (covered {self.covered}, total {self.total})")
            return self
        if self.covered != len(self.asked) or self.total != len(self.asked) + len(self.uncovered):
            raise ValueError(f"covered {self.covered} / total {self.total} do not match "
                             f"{len(self.asked)} asked and {len(self.uncovered)} uncovered items")
        return self

    def matches(self, items: Sequence[str]) -> bool:
        """The row was read against these checklist items."""
        if self.items_sha is not None:
            return self.total == len(items) and self.items_sha == items_fingerprint(items)
        return sorted(self.items) == sorted(items)

    @property
    def items(self) -> list[str]:
        return [i.item for i in self.asked] + [i.item for i in self.uncovered]


def items_fingerprint(items: Sequence[str]) -> str:
    """12 hex digits of SHA-256 over the items in order, one a line: names a checklist
    without quoting it."""
    import hashlib

    return hashlib.sha256("\n".join(items).encode("utf-8")).hexdigest()[:12]


def load_script_coverage(path, cases: Sequence[SPCase]) -> dict[tuple[str, str], ScriptCoverage]:
    """The hand-judged coverage rows of the cases in this run, by (case, category). A row
    whose items are not that case's checklist (the case changed since it was judged)
    stops with the file, line and field."""
    from medpref.contracts import ContractError, parse_record, text_lines

    by_id = {c.id: c for c in cases}
    out: dict[tuple[str, str], ScriptCoverage] = {}
    seen: set[tuple[str, str]] = set()
    for line, raw in text_lines(path):
        if not raw.strip():
            continue
        try:
            row = parse_record(ScriptCoverage, json.loads(raw), path, line)
        except json.JSONDecodeError as exc:
            raise ContractError(path, line, "<json>", f"invalid JSON: {exc.msg}") from None
        if (row.case, row.category) in seen:
            raise ContractError(path, line, "case", f"a second row for {row.case} "
                                                    f"{row.category}")
        seen.add((row.case, row.category))
        case = by_id.get(row.case)
        if case is None:
            continue
        if not row.matches(getattr(case.checklist, row.category)):
            raise ContractError(path, line, "asked/uncovered",
                                f"the items are not case {row.case}'s {row.category} "
                                "checklist (judge the script again)")
        out[(row.case, row.category)] = row
    return out


CATEGORY_NAMES = ("symptoms", "tests", "diseases")


def derived_expectation(case: SPCase, cat: str) -> float:
    """What a script derived from the checklist asks, as a share of the category: every
    test, and every symptom the opening complaint does not already name."""
    items = getattr(case.checklist, cat)
    if cat != "symptoms":
        return 1.0
    return sum(not named_in_complaint(i, case.chief_complaint) for i in items) / len(items)


def expected_coverage(cases: Sequence[SPCase], hand: dict[tuple[str, str], ScriptCoverage]
                      ) -> dict[tuple[str, str], float | None]:
    """What ``control_script`` should earn per case and category, as a share: the
    hand-judged coverage where a clinician read the script; for a script derived from the
    checklist, what it asks by construction (:func:`derived_expectation`); 1 for the
    diseases (its closing sentence names them); None where no one knows (a real script
    not read by hand), the category is empty or it cannot measure on the case
    (:func:`~medpref.simulation.grading.unmeasurable_categories`)."""
    out: dict[tuple[str, str], float | None] = {}
    for c in cases:
        derived = script_lines(c)[1]
        for cat in CATEGORY_NAMES:
            row, items = hand.get((c.id, cat)), getattr(c.checklist, cat)
            if not items or cat in unmeasurable_categories(c):
                out[(c.id, cat)] = None
            elif row is not None:
                out[(c.id, cat)] = row.covered / row.total
            elif cat == "diseases":
                out[(c.id, cat)] = 1.0
            else:
                out[(c.id, cat)] = derived_expectation(c, cat) if derived else None
    return out


def check_controls(gate) -> None:
    """Fail the run, writing nothing, when a control misses its gate (``gate``: the table
    :func:`medpref.simulation.tables.controls_gate` makes), with the numbers."""
    from medpref.stagekit import StageFailed

    bad = gate[gate["passed"] == False]  # noqa: E712  (None: not gated)
    if bad.empty:
        return
    what = "; ".join(f"{r.control} {r.metric} {r.score:.1f} (must be {r.rule} {r.limit:.1f}"
                     + (f", {r.expected_coverage:.1f} expected" if r.polarity == POSITIVE else "")
                     + f", {r.cases} cases)" for r in bad.itertuples())
    raise StageFailed("06_sp_grading: the SP test cannot tell a good interview from a bad one "
                      f"(simulation.controls_gate): {what}")
