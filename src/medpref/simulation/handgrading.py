"""Grading SP checklist items by hand, to re-measure the grader's κ on one's own cases.

Stage 06's doctors record one transcript per consultation
(``reports/06_simulation/records/consultations.jsonl``) and its grading one machine grade
per checklist item (``reports/06_sp_grading/records/grades.jsonl``), committed with their
reports. A clinician works through a
seeded, shuffled queue of those items (one per case × doctor × item) in JupyterLab
(``notebooks/grade_by_hand.ipynb``); each verdict is appended at once, as an
``SPGradedItem``, to a file that ``simulation.grader.graded_items`` can point at.

The machine verdict stays out of the queue unless asked for (``reveal_machine``), so the
hand grade is blind. A work item's id is a hash of case, doctor, category and item, so a
restarted session skips what is already graded and keeps the same order for the rest.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd
from pydantic import BaseModel

from medpref.contracts import (
    SP_CATEGORIES,
    ConsultationRecord,
    ContractError,
    Record,
    SPCategory,
    SPGradedItem,
    Turn,
    atomic_write_text,
    parse_record,
    read_jsonl,
)
from medpref.metrics.intervals import cohen_kappa

# What a verdict means, in the clinician's words: the rubric of docs/sp_grading_rubric.md
# in short (PLPF App. B.3, Eq. 6). The rubric decides; this text only reminds.
RULES = {
    "symptoms": "Did the doctor ASK about this symptom or history item: a question or an "
                "invitation that targets it (other words are fine; any part of a compound "
                "item counts; a question may list several items)? Not earned by a statement "
                "that the patient has it (made up or true), teaching text, an open question "
                "(\"what brings you in?\") that targets no item, a question about something "
                "else that shares a word, a bare keyword list, the patient volunteering it, "
                "or the doctor echoing the patient's words.",
    "tests": "Did the doctor REQUEST or RECOMMEND this test for this patient (order, propose, "
             "\"we need…\", \"check your…\"), or ask for its result to use it? A missing "
             "qualifier is fine (\"blood sugar\" for fasting glucose). Not earned by a test "
             "only mentioned (teaching text, general advice, someone else's), a made-up "
             "result, a declined test, a question about an organ, an unnamed \"blood work\", "
             "or the patient mentioning it.",
    "diseases": "Did the doctor NAME this disease as the patient's diagnosis, or as one of "
                "FEWER THAN FOUR candidates offered together (its name, a bracketed part, a "
                "synonym; type, side or acuity may be missing; a first-turn guess counts)? Not "
                "earned by a list of four or more, teaching text about the disease, the "
                "disease as a complication or risk, made-up history, a negation, a shared "
                "word (a symptom, a site), a neighbouring disease, or the patient naming it.",
}


class SimGrade(Record):
    """One line of stage 06's ``records/grades.jsonl``; ``passed`` None: abstained."""

    case: str
    doctor: str
    category: SPCategory
    item: str
    passed: bool | None
    method: str = ""


@dataclass(frozen=True)
class WorkItem:
    """One checklist item of one consultation, to be graded by hand."""

    id: str
    case: str
    doctor: str
    department: str
    lang: str
    category: str
    item: str
    transcript: tuple[Turn, ...]
    machine_passed: bool | None = field(default=None, repr=False)   # only if revealed
    machine_method: str | None = field(default=None, repr=False)


def work_id(case: str, doctor: str, category: str, item: str) -> str:
    """Stable id of a case × doctor × checklist item: ``hg-<case>-<10 hex of a hash>``."""
    key = "\x1f".join((case, doctor, category, item)).encode("utf-8")
    return f"hg-{case}-{hashlib.sha256(key).hexdigest()[:10]}"


_VOID_TAGS = frozenset({"br", "wbr", "img", "hr"})    # no end tag follows these


class _TranscriptPage(HTMLParser):
    """Reads the turns of every consultation of a ``transcripts.html`` page
    (:mod:`medpref.simulation.transcripts_html`): case, language, department, doctor and
    the text of each turn. The grades, evidence marks and tags ("echo (not credited)",
    "doesn't know") are left out, so excerpts read from it are blind to the grader."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.records: list[dict] = []
        self._case: dict | None = None
        self._field: str | None = None      # "case" | "department" while reading the h2
        self._turn: dict | None = None
        self._depth = 0                     # open tags of the turn's body, itself included
        self._skip = 0                      # open tags inside a label ("echo (not credited)")

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = (a.get("class") or "").split()
        if tag == "section" and "case" in cls:
            self._case = {"case": "", "department": "", "lang": a.get("lang") or "en"}
        elif tag == "h2" and self._case is not None and not self._case["case"]:
            self._field = "case"
        elif tag == "span" and self._field == "case" and "sub" in cls:
            self._field = "department"
        elif tag == "details" and "consult" in cls and self._case is not None:
            self.records.append({"case": self._case["case"].strip(),
                                 "department": self._case["department"].strip(" ·\n"),
                                 "lang": self._case["lang"], "doctor": a.get("data-doctor", ""),
                                 "turns": []})
        elif tag == "li" and "turn" in cls and self.records:
            role = next((c for c in cls if c in ("doctor", "patient")), None)
            self._turn = {"role": role, "text": "", "body_read": False} if role else None
        elif self._depth and tag not in _VOID_TAGS:     # inside the turn's body
            self._depth += 1
            if self._skip or (tag == "span" and "tag" in cls):
                self._skip += 1
        elif self._turn is not None and tag == "div" and not self._turn["body_read"]:
            self._depth = 1                     # the body: the first div of the turn

    def handle_endtag(self, tag):
        if self._field and tag == "h2":
            self._field = None
        elif tag == "li" and self._turn is not None:
            self.records[-1]["turns"].append({"role": self._turn["role"],
                                              "text": " ".join(self._turn["text"].split())})
            self._turn, self._depth, self._skip = None, 0, 0
        elif self._depth:
            self._depth -= 1
            if self._skip:
                self._skip -= 1
            if not self._depth and self._turn is not None:
                self._turn["body_read"] = True      # what follows ("earned: …") is no turn text

    def handle_data(self, data):
        if self._field and self._case is not None:
            self._case[self._field] += data
        elif self._depth and not self._skip and self._turn is not None:
            self._turn["text"] += data


def transcripts_from_html(path: str | os.PathLike) -> list[ConsultationRecord]:
    """Every consultation of a stage-06 ``transcripts.html`` page as a
    :class:`ConsultationRecord` (turns only: no grade, evidence or echo mark), so hand-graded
    excerpts can be cut from a page whose run's records are not at hand."""
    page = _TranscriptPage()
    page.feed(Path(path).read_text(encoding="utf-8"))
    page.close()
    if not page.records:
        raise ValueError(f"{path}: no consultation found (not a stage-06 transcripts page?)")
    return [parse_record(ConsultationRecord, r, str(path), i)
            for i, r in enumerate(page.records, start=1)]


def excerpt(turns: Sequence[Turn], doctor_turns: Sequence[int]) -> list[Turn]:
    """The turns a hand-graded item shows: the patient's first words (the chief
    complaint), then each doctor turn of ``doctor_turns`` (indices into ``turns``) with the
    patient turn just before it, in order, each turn once. Enough to judge an echo of the
    complaint or of the last answer; the other turns are left out."""
    wanted = sorted(set(doctor_turns))
    for i in wanted:
        if not 0 <= i < len(turns) or turns[i].role != "doctor":
            raise ValueError(f"turn {i} is not a doctor turn of this transcript "
                             f"({len(turns)} turns)")
    keep = {0, *wanted, *(i - 1 for i in wanted if i > 0)}
    return [turns[i] for i in sorted(keep)]


M = TypeVar("M", bound=BaseModel)


def _records(source: str | os.PathLike | Iterable[Any], model: type[M]) -> list[M]:
    """Validated records from a JSONL path (errors name file, line, field) or an iterable
    of dicts/models (errors name the position)."""
    if isinstance(source, (str, os.PathLike)):
        if not Path(source).exists():
            raise FileNotFoundError(f"{source}: not found (stage 06 writes it, the doctors "
                                    "or the grading: `make repro`)")
        return read_jsonl(source, model, allow_empty=True)
    return [r if isinstance(r, model) else parse_record(model, _plain(r), "<records>", i)
            for i, r in enumerate(source, start=1)]


def _plain(record: Any) -> Any:
    """A dict of a model, a ``Consultation`` (its ``record()``) or an ``ItemGrade``."""
    if isinstance(record, BaseModel):
        return record.model_dump(mode="json")
    if callable(getattr(record, "record", None)):
        return record.record()
    return record.__dict__ if hasattr(record, "__dict__") else record


def _is_abstained(g: SimGrade) -> bool:
    """No grader decided: ``passed`` null, or method ``none`` (no judge answer and no
    fallback: the stage records it as a fail)."""
    return g.passed is None or g.method == "none"


def grading_queue(transcripts: str | os.PathLike | Iterable[Any],
                  grades: str | os.PathLike | Iterable[Any],
                  already_graded_ids: Iterable[str] = (),
                  doctors: Sequence[str] | None = None, limit: int | None = None,
                  seed: int = 0, reveal_machine: bool = False) -> list[WorkItem]:
    """The items left to grade, in a seeded shuffle of all items (so a resumed session
    keeps its order), without those in ``already_graded_ids``, of ``doctors`` only when
    given, at most ``limit``. Consultations in which the doctor never spoke are left out
    (nothing to grade). The machine verdict is included only with ``reveal_machine``."""
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    by_consult = {(t.case, t.doctor): t for t in _records(transcripts, ConsultationRecord)}
    items = []
    for g in _records(grades, SimGrade):
        t = by_consult.get((g.case, g.doctor))
        if t is None:
            raise ValueError(f"grade of case {g.case!r}, doctor {g.doctor!r}, item "
                             f"{g.item!r} has no transcript")
        if not any(turn.role == "doctor" for turn in t.turns):
            continue
        items.append(WorkItem(
            work_id(g.case, g.doctor, g.category, g.item), g.case, g.doctor, t.department,
            t.lang, g.category, g.item, tuple(t.turns),
            g.passed if reveal_machine else None, g.method if reveal_machine else None))
    items.sort(key=lambda w: w.id)
    random.Random(seed).shuffle(items)
    done, wanted = set(already_graded_ids), set(doctors) if doctors is not None else None
    queue = [w for w in items if w.id not in done and (wanted is None or w.doctor in wanted)]
    return queue if limit is None else queue[:limit]


def to_graded_item(work: WorkItem, passed: bool, why: str, grader: str) -> SPGradedItem:
    """The hand verdict as an ``SPGradedItem`` tagged ``hand:<grader>`` (doctor and
    department kept beside the contract's fields)."""
    if not isinstance(passed, bool):
        raise TypeError(f"passed must be True or False, got {passed!r}")
    if not grader or not grader.strip():
        raise ValueError("name the grader (the `grader` parameter): the label is tagged "
                         "hand:<grader>")
    data: dict[str, Any] = {
        "id": work.id, "case": work.case, "category": work.category, "item": work.item,
        "transcript": [{"role": t.role, "text": t.text} for t in work.transcript],
        "passed": passed, "tag": f"hand:{grader.strip()}", "why": why.strip(),
        "doctor": work.doctor, "department": work.department}
    if "lang" in SPGradedItem.model_fields:
        data["lang"] = work.lang
    return parse_record(SPGradedItem, data)


class DuplicateGradedItem(ValueError):
    """An item id already in the graded file (or twice in one batch)."""


def load_graded_ids(path: str | os.PathLike) -> set[str]:
    """Ids of the items in a graded file (empty when it does not exist yet)."""
    if not Path(path).exists():
        return set()
    return {g.id for g in read_jsonl(path, SPGradedItem, allow_empty=True)}


def append_graded(path: str | os.PathLike, items: Iterable[SPGradedItem | dict]) -> int:
    """Validate ``items`` and append them to ``path``; returns how many were appended.

    A duplicate id (already in the file or twice in ``items``) or an invalid item raises
    and leaves the file as it was. The file is rewritten whole to a temporary file and
    renamed into place, so it is never half-written."""
    path = Path(path)
    seen = load_graded_ids(path)
    lines = []
    for i, raw in enumerate(items, start=1):
        item = raw if isinstance(raw, SPGradedItem) else parse_record(
            SPGradedItem, raw, f"<item {i} for {path}>")
        if item.id in seen:
            raise DuplicateGradedItem(f"{path}: id {item.id!r} is already graded there "
                                      f"(item {i} of this batch); nothing was appended")
        seen.add(item.id)
        lines.append(json.dumps(item.model_dump(mode="json", exclude_none=True),
                                ensure_ascii=False) + "\n")
    if not lines:
        return 0
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    if old and not old.endswith("\n"):
        old += "\n"
    atomic_write_text(path, old + "".join(lines))
    return len(lines)


def appender(path: str | os.PathLike, grader: str) -> Callable[[WorkItem, bool, str], None]:
    """``on_grade`` for :func:`grading_widget`: append each verdict to ``path`` at once."""
    if not grader or not grader.strip():
        raise ValueError("name the grader (the `grader` parameter): the label is tagged "
                         "hand:<grader>")

    def on_grade(work: WorkItem, passed: bool, why: str) -> None:
        append_graded(path, [to_graded_item(work, passed, why, grader)])
    return on_grade


def agreement(path_or_items: str | os.PathLike | Iterable[SPGradedItem | dict],
              grades: str | os.PathLike | Iterable[Any]) -> pd.DataFrame:
    """Hand labels against the machine grades of the same items, per category and ``all``.

    Columns: ``items`` (hand items with a machine grade), ``abstained`` (of those, the
    machine decided nothing: counted apart, not in accuracy or κ), ``compared``,
    ``accuracy``, ``kappa`` (Cohen's κ; NaN when undefined), ``hand_pass``,
    ``machine_pass`` (over the compared), ``unmatched`` (hand items with no machine grade,
    e.g. from another run). A hand file that does not exist yet gives zero items."""
    missing = isinstance(path_or_items, (str, os.PathLike)) and not Path(path_or_items).exists()
    hand = [] if missing else _records(path_or_items, SPGradedItem)   # nothing graded yet
    machine = {work_id(g.case, g.doctor, g.category, g.item): g
               for g in _records(grades, SimGrade)}
    rows = []
    for cat in [*SP_CATEGORIES, "all"]:
        chosen = [h for h in hand if cat in ("all", h.category)]
        if not chosen and cat != "all":
            continue
        matched = [(h, machine[h.id]) for h in chosen if h.id in machine]
        compared = [(h.passed, bool(m.passed)) for h, m in matched if not _is_abstained(m)]
        gold, pred = [a for a, _ in compared], [b for _, b in compared]
        rows.append({
            "category": cat, "items": len(matched), "abstained": len(matched) - len(compared),
            "compared": len(compared),
            "accuracy": (sum(a == b for a, b in compared) / len(compared) if compared
                         else float("nan")),
            "kappa": round(cohen_kappa(gold, pred), 6) if compared else float("nan"),
            "hand_pass": sum(gold), "machine_pass": sum(pred),
            "unmatched": len(chosen) - len(matched)})
    return pd.DataFrame(rows)


# -- the JupyterLab panel -------------------------------------------------------------------

def transcript_html(turns: Iterable[Turn]) -> str:
    """The consultation as HTML, one paragraph per turn, speaker in bold."""
    colour = {"doctor": "#1f4e79", "patient": "#7a4b00"}
    return "".join(
        f'<p style="margin:2px 0"><b style="color:{colour.get(t.role, "#000")}">'
        f"{html.escape(t.role.capitalize())}:</b> {html.escape(t.text)}</p>" for t in turns)


def item_html(work: WorkItem, show_machine: bool = False) -> str:
    """The checklist item, its category and the rule for a pass, in plain words."""
    machine = ""
    if show_machine and work.machine_method is not None:
        verdict = {True: "pass", False: "fail", None: "abstained"}[work.machine_passed]
        machine = f"<br><i>machine: {verdict} ({html.escape(work.machine_method)})</i>"
    return (f"<div><b>{html.escape(work.category)}:</b> "
            f"<span style='font-size:1.15em'>{html.escape(work.item)}</span>"
            f"<br>{html.escape(RULES[work.category])}"
            f"<br><small>case {html.escape(work.case)} · doctor {html.escape(work.doctor)}"
            f" · {html.escape(work.id)}</small>{machine}</div>")


class GradingPanel:
    """Pass / Fail / Skip over a queue; Pass and Fail call ``on_grade(work, passed, why)``
    (e.g. :func:`appender`) before moving on. An error (a duplicate id) is shown in the
    panel and the item stays. Displays as its ipywidgets box."""

    def __init__(self, queue: Sequence[WorkItem],
                 on_grade: Callable[[WorkItem, bool, str], None], show_machine: bool = False):
        import ipywidgets as w

        self.queue, self.on_grade, self.show_machine = list(queue), on_grade, show_machine
        self.position, self.graded, self.skipped = 0, 0, 0
        self.progress, self.item, self.transcript = w.HTML(), w.HTML(), w.HTML()
        self.status = w.HTML()
        self.why = w.Textarea(placeholder="why (optional): what the doctor said or did not",
                              layout=w.Layout(width="100%", height="4em"))
        self.pass_button = w.Button(description="Pass", button_style="success")
        self.fail_button = w.Button(description="Fail", button_style="danger")
        self.skip_button = w.Button(description="Skip")
        self.pass_button.on_click(lambda _: self._grade(True))
        self.fail_button.on_click(lambda _: self._grade(False))
        self.skip_button.on_click(lambda _: self._skip())
        self.buttons = w.HBox([self.pass_button, self.fail_button, self.skip_button])
        self.box = w.VBox([self.progress, self.item, self.why, self.buttons, self.status,
                           w.HTML("<hr>"), self.transcript])
        self._show()

    @property
    def current(self) -> WorkItem | None:
        return self.queue[self.position] if self.position < len(self.queue) else None

    def _show(self) -> None:
        work = self.current
        done = work is None
        for b in (self.pass_button, self.fail_button, self.skip_button):
            b.disabled = done
        self.progress.value = (f"<b>{min(self.position + 1, len(self.queue))} / "
                               f"{len(self.queue)}</b> · graded {self.graded}, "
                               f"skipped {self.skipped}")
        if done:
            self.item.value = "<b>Queue done.</b> Re-run the notebook for more items."
            self.transcript.value = ""
            return
        self.item.value = item_html(work, self.show_machine)
        self.transcript.value = transcript_html(work.transcript)

    def _grade(self, passed: bool) -> None:
        work = self.current
        if work is None:
            return
        try:
            self.on_grade(work, passed, self.why.value)
        except (ValueError, ContractError, OSError) as exc:
            self.status.value = f"<span style='color:#b00020'>{html.escape(str(exc))}</span>"
            return
        self.status.value = f"saved {html.escape(work.id)}: {'pass' if passed else 'fail'}"
        self.graded += 1
        self._advance()

    def _skip(self) -> None:
        if self.current is not None:
            self.status.value = f"skipped {html.escape(self.current.id)}"
            self.skipped += 1
            self._advance()

    def _advance(self) -> None:
        self.position += 1
        self.why.value = ""
        self._show()

    def _repr_mimebundle_(self, **kwargs):
        return self.box._repr_mimebundle_(**kwargs)


def grading_widget(queue: Sequence[WorkItem], on_grade: Callable[[WorkItem, bool, str], None],
                   show_machine: bool = False) -> GradingPanel:
    """The hand-grading panel over ``queue`` (see :class:`GradingPanel`)."""
    return GradingPanel(queue, on_grade, show_machine)
