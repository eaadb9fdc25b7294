"""SP graders against hand-graded items: accuracy and Cohen's κ with its interval.

A hand-graded item (contract ``SPGradedItem``, ``data/embedded/sp_graded.jsonl``) is one
checklist item, the consultation the grader sees and the human verdict. Each is wrapped
as a one-item case and graded exactly as the SP test grades. The items are split in two
halves, alternating within each tag (``dev``: the 1st, 3rd, ... item of a tag; ``test``:
the others), so both halves hold every kind of item: grader settings are chosen on
``dev`` and reported on ``test``. An abstained item is counted and left out of κ.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from medpref.contracts import SPCase, SPGradedItem
from medpref.metrics.intervals import cohen_kappa, kappa_ci
from medpref.simulation.consult import Consultation
from medpref.simulation.grading import CATEGORIES, ItemGrade

SPLITS = ("dev", "test")
ECHO_TAG = "echo_negative"


def split_of(items: Sequence[SPGradedItem]) -> dict[str, str]:
    """item id → ``dev`` | ``test``, alternating within each tag in file order."""
    seen: dict[str, int] = {}
    out = {}
    for g in items:
        k = seen.get(g.tag, 0)
        seen[g.tag] = k + 1
        out[g.id] = SPLITS[k % 2]
    return out


def _as_consultation(g: SPGradedItem) -> tuple[Consultation, SPCase]:
    case = SPCase(id=g.id, department="graded", lang=getattr(g, "lang", "en"),
                  chief_complaint=g.transcript[0].text if g.transcript else g.item,
                  patient_info={"item": g.item}, checklist={g.category: [g.item]})
    return Consultation(g.id, "graded", case.lang, "hand-graded", "", list(g.transcript)), case


def grade_hand_items(items: Sequence[SPGradedItem], grader) -> list[ItemGrade]:
    pairs = [_as_consultation(g) for g in items]
    return grader.grade([c for c, _ in pairs], {c.case_id: k for c, k in pairs})


def agreement_rows(items: Sequence[SPGradedItem], grades: Sequence[ItemGrade],
                   n_boot: int = 2000, seed: int = 0) -> list[dict]:
    """Rows per split (dev, test, all) × category (each and ``all``)."""
    by_id = {g.case: g for g in grades}
    split = split_of(items)
    rows = []
    for part in [*SPLITS, "all"]:
        for cat in [*CATEGORIES, "all"]:
            chosen = [(g, by_id[g.id]) for g in items if cat in ("all", g.category)
                      and part in ("all", split[g.id])]
            if chosen:
                rows.append(_agreement(chosen, part, cat, n_boot, seed))
    return rows


def _agreement(chosen, part: str, cat: str, n_boot: int, seed: int) -> dict:
    judged = [(g, p) for g, p in chosen if p.passed is not None]
    gold = [g.passed for g, _ in judged]
    pred = [bool(p.passed) for _, p in judged]
    kappa = cohen_kappa(gold, pred) if judged else float("nan")
    ci = kappa_ci(gold, pred, n_boot=n_boot, seed=seed) if len(judged) > 1 else None
    echoes = [p for g, p in chosen if g.tag == ECHO_TAG]
    return {"split": part, "category": cat, "items": len(chosen),
            "accuracy": sum(a == b for a, b in zip(gold, pred)) / len(judged) if judged
            else float("nan"),
            "kappa": round(kappa, 6), "kappa_lo": round(ci.lo, 6) if ci else float("nan"),
            "kappa_hi": round(ci.hi, 6) if ci else float("nan"),
            "echo_negatives": len(echoes),
            "echo_negatives_passed": sum(bool(p.passed) for p in echoes),
            "abstained": len(chosen) - len(judged), "gold_pass": sum(gold),
            "predicted_pass": sum(pred)}


def validate_grader(items: Sequence[SPGradedItem], grader, n_boot: int = 2000,
                    seed: int = 0) -> pd.DataFrame:
    return pd.DataFrame(agreement_rows(items, grade_hand_items(items, grader), n_boot, seed))
