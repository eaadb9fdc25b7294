"""SP graders against hand-graded items: Cohen's κ, recall and precision, with intervals.

A hand-graded item (contract ``SPGradedItem``, ``data/embedded/sp_graded.jsonl``) is one
checklist item, the consultation (or excerpt) the grader sees and the verdict of a person
grading by the rubric (``docs/sp_grading_rubric.md``). Each is wrapped as a one-item case
and graded exactly as the SP test grades.

Items come in batches (``batch``: when they were graded) and each belongs to a half
(``split``): ``dev``, where a grader rule may be changed by looking at it, and ``test``,
which is only reported. The split is written in each item when its batch is added
(batches after the first are split by case, :func:`case_split`, so that no case's
sentences are on both sides); an item without one gets it from its tag, alternating in
file order (the first batch's rule, kept as it was). Every rule change is recorded with
the batches that existed when it was made (``data/embedded/sp_grader_changes.yaml``).

Agreement is reported per split, batch and category: κ, and recall and precision of
"pass" separately, each with a percentile bootstrap interval that resamples whole cases
(items of one case share its sentences and checklist). An abstained item is counted and
left out of all three.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from medpref.contracts import SPCase, SPGradedItem
from medpref.metrics.intervals import bootstrap_ci, cohen_kappa, kappa_ci
from medpref.simulation.consult import Consultation
from medpref.simulation.grading import CATEGORIES, ItemGrade

SPLITS = ("dev", "test")
ECHO_TAG = "echo_negative"
ALL = "all"


def split_of(items: Sequence[SPGradedItem]) -> dict[str, str]:
    """item id → ``dev`` | ``test``: the item's own ``split`` when it has one; otherwise
    alternating within each tag in file order among the items without one (``dev``: the
    1st, 3rd, ... such item of a tag; ``test``: the others)."""
    seen: dict[str, int] = {}
    out = {}
    for g in items:
        if g.split is not None:
            out[g.id] = g.split
            continue
        k = seen.get(g.tag, 0)
        seen[g.tag] = k + 1
        out[g.id] = SPLITS[k % 2]
    return out


def batch_of(item: SPGradedItem) -> str:
    """The item's batch; items written before batches existed are the first, ``v1``."""
    return item.batch or "v1"


def case_split(cases: Sequence[SPCase], seed: int) -> dict[str, str]:
    """case id → ``dev`` | ``test`` for a new batch of hand-graded items, fixed before any
    item is graded against a rule: cases are grouped by language, and English ones by
    department; each group is shuffled (seeded) and the halves are dealt alternately across
    the groups in turn, so each half holds every department and both languages."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for c in cases:
        key = (c.lang,) if c.lang != "en" else ("en", c.department)
        groups.setdefault(key, []).append(c.id)
    rng, out, k = random.Random(seed), {}, 0
    for key in sorted(groups):
        ids = sorted(groups[key])
        rng.shuffle(ids)
        for cid in ids:
            out[cid] = SPLITS[k % 2]
            k += 1
    return out


def _opening(g: SPGradedItem) -> str:
    """The item's opening complaint: its transcript's first turn when the patient speaks
    it; an excerpt that opens with the doctor has none ("…", no content of its own)."""
    first = g.transcript[0] if g.transcript else None
    return first.text if first is not None and first.role == "patient" else "\u2026"


def _as_consultation(g: SPGradedItem) -> tuple[Consultation, SPCase]:
    case = SPCase(id=g.id, department="graded", lang=getattr(g, "lang", "en"),
                  chief_complaint=_opening(g),
                  patient_info={"item": g.item}, checklist={g.category: [g.item]})
    return Consultation(g.id, "graded", case.lang, "hand-graded", "", list(g.transcript)), case


def grade_hand_items(items: Sequence[SPGradedItem], grader) -> list[ItemGrade]:
    pairs = [_as_consultation(g) for g in items]
    return grader.grade([c for c, _ in pairs], {c.case_id: k for c, k in pairs})


# the four cells of an item's (gold, predicted) pair, coded so a bootstrap over items can
# recompute recall and precision from the codes alone
_TN, _FP, _FN, _TP = 0, 1, 2, 3


def recall_of(codes: np.ndarray) -> float:
    """Share of gold passes the grader passed (NaN without a gold pass)."""
    tp, fn = np.sum(codes == _TP), np.sum(codes == _FN)
    return float(tp / (tp + fn)) if tp + fn else float("nan")


def precision_of(codes: np.ndarray) -> float:
    """Share of the grader's passes that are gold passes (NaN without a predicted pass)."""
    tp, fp = np.sum(codes == _TP), np.sum(codes == _FP)
    return float(tp / (tp + fp)) if tp + fp else float("nan")


def agreement_rows(items: Sequence[SPGradedItem], grades: Sequence[ItemGrade],
                   n_boot: int = 2000, seed: int = 0) -> list[dict]:
    """Rows per split (dev, test, all) × batch (all, then each) × category (each, all)."""
    by_id = {g.case: g for g in grades}
    split = split_of(items)
    batches = list(dict.fromkeys(batch_of(g) for g in items))
    rows = []
    for part in [*SPLITS, ALL]:
        for batch in [ALL, *batches]:
            for cat in [*CATEGORIES, ALL]:
                chosen = [(g, by_id[g.id]) for g in items if cat in (ALL, g.category)
                          and part in (ALL, split[g.id]) and batch in (ALL, batch_of(g))]
                if chosen:
                    rows.append(_agreement(chosen, part, batch, cat, n_boot, seed))
    return rows


def _interval(value, stat, n_boot, seed, clusters) -> tuple[float, float, float]:
    if not len(value):
        return float("nan"), float("nan"), float("nan")
    iv = bootstrap_ci(value, stat=stat, n_boot=n_boot, seed=seed, clusters=clusters)
    return iv.estimate, iv.lo, iv.hi


def _agreement(chosen, part: str, batch: str, cat: str, n_boot: int, seed: int) -> dict:
    judged = [(g, p) for g, p in chosen if p.passed is not None]
    gold = [g.passed for g, _ in judged]
    pred = [bool(p.passed) for _, p in judged]
    cases: list[Hashable] = [g.case for g, _ in judged]
    kappa = cohen_kappa(gold, pred) if judged else float("nan")
    ci = (kappa_ci(gold, pred, n_boot=n_boot, seed=seed, clusters=cases)
          if len(judged) > 1 else None)
    codes = np.array([2 * a + b for a, b in zip(gold, pred)], dtype=float)
    rec = _interval(codes, recall_of, n_boot, seed, cases)
    prec = _interval(codes, precision_of, n_boot, seed, cases)
    echoes = [p for g, p in chosen if g.tag == ECHO_TAG]
    nan = float("nan")
    return {"split": part, "batch": batch, "category": cat, "items": len(chosen),
            "cases": len(set(cases)),
            "accuracy": sum(a == b for a, b in zip(gold, pred)) / len(judged) if judged
            else nan,
            "kappa": round(kappa, 6), "kappa_lo": round(ci.lo, 6) if ci else nan,
            "kappa_hi": round(ci.hi, 6) if ci else nan,
            "recall": round(rec[0], 6), "recall_lo": round(rec[1], 6),
            "recall_hi": round(rec[2], 6),
            "precision": round(prec[0], 6), "precision_lo": round(prec[1], 6),
            "precision_hi": round(prec[2], 6),
            "echo_negatives": len(echoes),
            "echo_negatives_passed": sum(bool(p.passed) for p in echoes),
            "abstained": len(chosen) - len(judged), "gold_pass": sum(gold),
            "predicted_pass": sum(pred)}


def validate_grader(items: Sequence[SPGradedItem], grader, n_boot: int = 2000,
                    seed: int = 0) -> pd.DataFrame:
    return pd.DataFrame(agreement_rows(items, grade_hand_items(items, grader), n_boot, seed))


def disagreements(items: Sequence[SPGradedItem], grades: Sequence[ItemGrade],
                  splits: Mapping[str, str] | None = None, part: str = "dev") -> pd.DataFrame:
    """The items of one half on which the grader and the hand grade differ, with the
    sentence the grader credited: what a rule change may be built from (``dev`` only)."""
    split = dict(splits) if splits is not None else split_of(items)
    by_id = {g.case: g for g in grades}
    rows = [{"id": g.id, "case": g.case, "batch": batch_of(g), "category": g.category,
             "item": g.item, "tag": g.tag, "hand": g.passed, "grader": by_id[g.id].passed,
             "evidence": by_id[g.id].evidence}
            for g in items if split[g.id] == part and by_id[g.id].passed is not None
            and bool(by_id[g.id].passed) != g.passed]
    return pd.DataFrame(rows, columns=["id", "case", "batch", "category", "item", "tag",
                                       "hand", "grader", "evidence"])


# -- the grader's verdicts as records, and the table from them ----------------------------

@dataclass(frozen=True)
class GradedRef:
    """What agreement needs of a hand-graded item, as its verdict record names it: the
    split and batch resolved (:func:`split_of`, :func:`batch_of`)."""

    id: str
    case: str
    category: str
    item: str
    passed: bool
    tag: str
    split: str
    batch: str


def verdict_records(items: Sequence[SPGradedItem], grades: Mapping[str, Sequence[ItemGrade]],
                    configured: str) -> list[dict]:
    """One record per hand-graded item: the item (id, case, category, tag, its split and
    batch resolved), the hand verdict (``gold``) and each grader's (``graders``, by name:
    ``passed``, None when it abstained, the method, and the sentence it credited), which
    grader is the configured one, and the item's doctor turns (``doctor_turns``: what a
    run's credits are matched to, :mod:`medpref.simulation.corrected`)."""
    split = split_of(items)
    by_grader = {name: {g.case: g for g in gs} for name, gs in grades.items()}
    rows = []
    for g in items:
        verdicts = {}
        for name, by_id in by_grader.items():
            v = by_id[g.id]
            verdicts[name] = {"passed": v.passed, "method": v.method,
                              **({"evidence": v.evidence} if v.evidence is not None else {})}
        rows.append({"id": g.id, "case": g.case, "category": g.category, "item": g.item,
                     "tag": g.tag, "split": split[g.id], "batch": batch_of(g), "gold": g.passed,
                     "configured": configured, "graders": verdicts,
                     "doctor_turns": [t.text for t in g.transcript if t.role == "doctor"]})
    return rows


def validation_table(rows: Sequence[dict], n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """The grader validation table from the verdict records: agreement per split, batch
    and category (:func:`agreement_rows`) of each grader, in record order, with its name
    and whether it is the configured one first; no records, an empty table."""
    graders = list(dict.fromkeys(name for r in rows for name in r["graders"]))
    if not graders:
        return pd.DataFrame()
    items = [GradedRef(r["id"], r["case"], r["category"], r["item"], r["gold"], r["tag"],
                       r["split"], r["batch"]) for r in rows]
    parts = []
    for name in graders:
        grades = [ItemGrade(r["id"], "hand-graded", r["category"], r["item"],
                            r["graders"][name]["passed"], r["graders"][name]["method"],
                            evidence=r["graders"][name].get("evidence")) for r in rows]
        parts.append(pd.DataFrame(agreement_rows(items, grades, n_boot, seed)).assign(
            grader=name, default=name == rows[0]["configured"]))
    out = pd.concat(parts, ignore_index=True)
    return out[["grader", "default", *[c for c in out.columns if c not in ("grader", "default")]]]
