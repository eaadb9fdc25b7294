"""The checklist grader against hand-graded items: accuracy and Cohen's κ per category.

A hand-graded item (contract ``SPGradedItem``, ``data/embedded/sp_graded.jsonl``) is one
checklist item, the consultation the grader sees and the human verdict. Each is wrapped
as a one-item case and graded exactly as the SP test grades (same prompts, judge,
fallback and four-disease rule).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from medpref.contracts import SPCase, SPGradedItem
from medpref.simulation.consult import Consultation
from medpref.simulation.grading import (
    CATEGORIES,
    GradingSetup,
    ItemGrade,
    cohen_kappa,
    grade_consultations,
)


def _as_consultation(g: SPGradedItem) -> tuple[Consultation, SPCase]:
    case = SPCase(id=g.id, department="graded", chief_complaint=g.item,
                  patient_info={"item": g.item}, checklist={g.category: [g.item]})
    return Consultation(g.id, "graded", "en", "hand-graded", "", list(g.transcript)), case


def grade_hand_items(items: Sequence[SPGradedItem], setup: GradingSetup) -> list[ItemGrade]:
    pairs = [_as_consultation(g) for g in items]
    return grade_consultations([c for c, _ in pairs], {c.case_id: k for c, k in pairs}, setup)


def agreement_table(items: Sequence[SPGradedItem], grades: Sequence[ItemGrade]) -> pd.DataFrame:
    """Rows per category and ``all``: items, accuracy, κ, items left to the fallback."""
    by_id = {g.case: g for g in grades}
    rows = []
    for cat in [*CATEGORIES, "all"]:
        chosen = [(g, by_id[g.id]) for g in items if cat in ("all", g.category)]
        if not chosen:
            continue
        gold = [g.passed for g, _ in chosen]
        pred = [p.passed for _, p in chosen]
        rows.append({"category": cat, "items": len(chosen),
                     "accuracy": sum(a == b for a, b in zip(gold, pred)) / len(chosen),
                     "kappa": round(cohen_kappa(gold, pred), 6), "gold_pass": sum(gold),
                     "predicted_pass": sum(pred),
                     "fallback": sum(p.method != "judge" for _, p in chosen)})
    return pd.DataFrame(rows)


def validate_grader(items: Sequence[SPGradedItem], setup: GradingSetup) -> pd.DataFrame:
    return agreement_table(items, grade_hand_items(items, setup))
