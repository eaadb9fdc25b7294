"""The embedded standardized-patient cases and the hand-graded checklist items.

Both files are synthetic, written by this project (``data/embedded/SP_CASES.md`` has the
details):

``data/embedded/sp_cases.jsonl``
    :class:`~medpref.contracts.SPCase` records ``sp-0001`` ... : 15 English cases, three
    per department (internal_medicine, surgery, gynecology, pediatrics, psychiatry), and
    two short Chinese ones (``lang: zh``). Each has patient-information sections
    (present, past, personal/family history, examination, tests with their results), a
    script of at least 20 doctor-patient question-answer pairs that includes distractors
    (questions whose answers are irrelevant or negative), and a checklist.

``data/embedded/sp_graded.jsonl``
    :class:`~medpref.contracts.SPGradedItem` records, one checklist item each::

        {"id": "g-0001", "case": "sp-0001", "category": "symptoms" | "tests" | "diseases",
         "item": "<a checklist item of that case, verbatim>",
         "transcript": [{"role": "doctor" | "patient", "text": "..."}, ...],
         "passed": true | false, "tag": "...", "why": "..."}

    ``transcript`` is the consultation the grader sees (a doctor under test speaking to
    the simulated patient; the parts that matter for the item). ``passed`` is the gold
    label: true when the doctor actively asked about (symptoms), recommended (tests) or
    named (diseases) the item, in any wording; false otherwise, including the hard
    negatives below. ``tag`` names what the item exercises:

    ``asked`` / ``recommended`` / ``named``
        a plain positive, often paraphrased;
    ``not_asked`` / ``not_recommended`` / ``not_named``
        the doctor never touched the item;
    ``patient_volunteered``
        the patient mentioned it, the doctor never asked (fails);
    ``four_or_more_diseases``
        the doctor named the right disease among four or more candidates in one turn
        (fails, PLPF's rule against listing every possibility);
    ``near_miss``
        something related but not the item (a different test, a neighbouring
        diagnosis, a question about another symptom) (fails);
    ``negated``
        the doctor brought it up only to say it is not needed or not the case (fails).

    ``why`` is one line of reasoning for the label.
"""

from __future__ import annotations

import os
from pathlib import Path

from medpref import REPO_ROOT
from medpref.contracts import SPCase, SPGradedItem, read_jsonl

EMBEDDED_SP_CASES = REPO_ROOT / "data" / "embedded" / "sp_cases.jsonl"
EMBEDDED_SP_GRADED = REPO_ROOT / "data" / "embedded" / "sp_graded.jsonl"


def embedded_sp_cases(path: str | os.PathLike | None = None) -> list[SPCase]:
    """The embedded SP cases (validated; a broken line names file, line and field)."""
    return read_jsonl(Path(path) if path else EMBEDDED_SP_CASES, SPCase)


def embedded_sp_graded(path: str | os.PathLike | None = None) -> list[SPGradedItem]:
    """The hand-graded checklist items for validating the checklist grader."""
    return read_jsonl(Path(path) if path else EMBEDDED_SP_GRADED, SPGradedItem)
