"""The checklist grader against hand-graded items: accuracy and Cohen's κ per category.

A hand-graded item is one checklist item, a short consultation and the human verdict
(``data/embedded/sp_graded.jsonl``). Each is wrapped as a one-case consultation and
graded exactly as the SP test grades (same prompts, judge, fallback and disease rule).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from pydantic import AliasChoices, Field

from medpref.contracts import Record, SPCase, Turn
from medpref.simulation.consult import Consultation
from medpref.simulation.grading import CATEGORIES, GradingSetup, cohen_kappa, grade_consultations


class GradedItem(Record):
    """One hand-graded checklist item (the label says whether it passes)."""

    id: str
    category: str
    item: str
    turns: list[Turn] = Field(validation_alias=AliasChoices("turns", "transcript", "dialogue"))
    label: bool = Field(validation_alias=AliasChoices("label", "passed", "pass"))
    lang: str = "en"


def _as_consultation(g: GradedItem) -> tuple[Consultation, SPCase]:
    cat = g.category if g.category in CATEGORIES else {"symptom": "symptoms", "test": "tests",
                                                       "disease": "diseases"}[g.category]
    case = SPCase(id=g.id, department="graded", lang=g.lang, chief_complaint="",
                  patient_info={}, checklist={cat: [g.item]})
    return Consultation(g.id, "graded", g.lang, "hand-graded", "", list(g.turns)), case


def validate_grader(items: Sequence[GradedItem], setup: GradingSetup) -> pd.DataFrame:
    """Rows per category and ``all``: items, accuracy, κ, items left to the fallback."""
    pairs = [_as_consultation(g) for g in items]
    grades = grade_consultations([c for c, _ in pairs], {c.id: k for c, k in pairs}, setup)
    by_case = {g.case: g for g in grades}
    rows = []
    for cat in [*CATEGORIES, "all"]:
        chosen = [(g, by_case[g.id]) for g in items
                  if cat == "all" or by_case[g.id].category == cat]
        if not chosen:
            continue
        gold = [g.label for g, _ in chosen]
        pred = [p.passed for _, p in chosen]
        rows.append({"category": cat, "items": len(chosen),
                     "accuracy": sum(a == b for a, b in zip(gold, pred)) / len(chosen),
                     "kappa": cohen_kappa(gold, pred), "gold_pass": sum(gold),
                     "predicted_pass": sum(pred),
                     "fallback": sum(p.method != "judge" for _, p in chosen)})
    return pd.DataFrame(rows)
