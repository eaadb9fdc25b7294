"""Table 2 corrected for the grader's measured error, and how much of a run it has read.

A credit of the SP grader is a claim about one (consultation, checklist item). The hand-
graded items say how often such claims hold on the run's own sentences (issue 41):

- a run item (model doctor × case × item) is *hand-graded* when a hand-graded item of the
  same case, category and checklist item holds, as its doctor turn, a doctor turn of that
  consultation; for a credit, that turn must hold the credited sentence (match by case,
  item and sentence text). The share of a run's credits that are hand-graded says whether
  the measured error applies to these doctors (``simulation.grader.min_validated_share``);
- on the ``test`` half of the hand-graded run items, per category: sensitivity = credited
  gold passes / gold passes, specificity = uncredited gold fails / gold fails. An uncredited
  run item that no hand-graded item covers, in a case of the test half, counts as a gold
  fail (for run 06c7d04 those are the items no doctor sentence shares a content unit with
  or comes near by MiniLM: ``medpref.simulation.runpairs``); a credit none covers is left
  out (it lowers the validated share instead);
- each model doctor's ALL score per category (Eq. 6, a mean of c/m over cases) is corrected
  by Rogan–Gladen, ``(observed + spec − 1) / (sens + spec − 1)`` clipped to [0, 1]; when
  ``sens + spec − 1`` is at most ``identifiable_margin`` the grader cannot tell earned from
  unearned items and the score is *not identifiable*. Its 95 % interval is a percentile
  bootstrap that resamples, independently, the validation's test-half cases (with all their
  hand-graded and counted items) and the run's SP cases; a round whose resampled
  ``sens + spec − 1`` falls under the margin is dropped and counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from medpref.sentences import split_sentences
from medpref.simulation.consult import Consultation
from medpref.simulation.grading import CATEGORIES, ItemGrade

SHORT = {"symptoms": "Sym.", "tests": "Test", "diseases": "Dis."}
NOT_VALIDATED = "grader not validated on these doctors"
NOT_IDENTIFIABLE = "not identifiable"


@dataclass(frozen=True)
class RunItem:
    """One checklist item of one model doctor's consultation, with its hand grade if any."""

    case: str
    doctor: str
    category: str
    item: str
    credited: bool
    gold: bool | None          # None: no hand-graded item covers it
    split: str | None          # the hand-graded item's half (None: not covered)


def hand_graded_run_items(consults: Sequence[Consultation], grades: Sequence[ItemGrade],
                          verdicts: Sequence[Mapping]) -> list[RunItem]:
    """Every item of every model doctor's consultation, with the hand grade of the
    hand-graded item that covers it (the last in file order when several do)."""
    models = {(c.case_id, c.doctor): c for c in consults if c.kind == "model"}
    by_item: dict[tuple[str, str, str], list[Mapping]] = {}
    for v in verdicts:
        by_item.setdefault((v["case"], v["category"], v["item"]), []).append(v)
    out = []
    for g in grades:
        c = models.get((g.case, g.doctor))
        if c is None:
            continue
        cover = [v for v in by_item.get((g.case, g.category, g.item), [])
                 if _covers(v, c, g)]
        v = cover[-1] if cover else None
        out.append(RunItem(g.case, g.doctor, g.category, g.item, bool(g.passed),
                           None if v is None else bool(v["gold"]),
                           None if v is None else v["split"]))
    return out


def _covers(verdict: Mapping, c: Consultation, g: ItemGrade) -> bool:
    """The hand-graded item reads a doctor turn of this consultation; for a credit, the
    turn that holds the credited sentence."""
    theirs = set(verdict.get("doctor_turns") or [])
    if g.passed:
        turn = c.turns[g.evidence_turn].text if g.evidence_turn is not None else None
        return turn in theirs and g.evidence in split_sentences(turn or "")
    return any(t.text in theirs for t in c.turns if t.role == "doctor")


def validated_share(items: Sequence[RunItem]) -> tuple[int, int]:
    """(credits a hand-graded item covers, credits) of the model doctors."""
    credits = [i for i in items if i.credited]
    return sum(i.gold is not None for i in credits), len(credits)


def validation_reading(items: Sequence[RunItem], min_share: float) -> str:
    """What Table 2 says about its grader: the validated share, or that it is not
    validated on these doctors (under ``min_share``, or no credit at all)."""
    done, total = validated_share(items)
    if not total:
        return f"{NOT_VALIDATED} (no credit)"
    share = done / total
    if share < min_share:
        return f"{NOT_VALIDATED} ({done}/{total} credits hand-graded, < {min_share:.0%})"
    return f"grader validated on {done}/{total} credits of these doctors"


def rogan_gladen(observed: float, sens: float, spec: float, margin: float) -> float | None:
    """The true share behind an observed share, given the grader's sensitivity and
    specificity, clipped to [0, 1]; None when ``sens + spec − 1 <= margin``."""
    j = sens + spec - 1.0
    if not np.isfinite(j) or j <= margin:
        return None
    return float(min(1.0, max(0.0, (observed + spec - 1.0) / j)))


def error_rates(items: Sequence[RunItem], category: str, split: str = "test"
                ) -> tuple[float, float, int, int]:
    """(sensitivity, specificity, gold passes, gold fails) of one category on the run
    items of one half (see the module text for the items no hand grade covers)."""
    counts = _case_counts(items, category, split)
    tp, fn, tn, fp = counts.sum(axis=0)
    return (*_rates(counts), int(tp + fn), int(tn + fp))


def _counted(i: RunItem, split: str) -> bool:
    """The item counts in the half: hand-graded there, or an uncovered non-credit."""
    return i.split == split or (i.gold is None and not i.credited)


def _case_counts(items: Sequence[RunItem], category: str, split: str = "test"
                 ) -> np.ndarray:
    """Per case of the half: [credited gold passes, uncredited gold passes, uncredited
    gold fails, credited gold fails] of one category (rows in case order)."""
    cases = sorted({i.case for i in items if i.split == split})
    out = np.zeros((len(cases), 4))
    for k, case in enumerate(cases):
        mine = [i for i in items if i.case == case and i.category == category
                and _counted(i, split)]
        out[k] = [sum(bool(i.gold) and i.credited for i in mine),
                  sum(bool(i.gold) and not i.credited for i in mine),
                  sum(not i.gold and not i.credited for i in mine),
                  sum(not i.gold and i.credited for i in mine)]
    return out


def _rates(counts: np.ndarray) -> tuple[float, float]:
    """(sensitivity, specificity) of per-case counts (:func:`_case_counts`)."""
    tp, fn, tn, fp = counts.sum(axis=0)
    return (tp / (tp + fn) if tp + fn else float("nan"),
            tn / (tn + fp) if tn + fp else float("nan"))


def _scores(per_case: pd.DataFrame, doctor: str, category: str, cases: Sequence[str]
            ) -> np.ndarray:
    """The doctor's c/m per case (NaN: no such case or an empty category), case order."""
    mine = per_case[per_case["doctor"] == doctor].set_index("case")[category]
    return np.array([mine.get(c, np.nan) for c in cases], dtype=float)


def corrected_scores(per_case: pd.DataFrame, items: Sequence[RunItem], n_boot: int,
                     seed: int, margin: float) -> list[dict]:
    """Per model doctor and category: observed and corrected ALL score (%), the corrected
    score's bootstrap interval, the error rates it used and how it reads."""
    rng = np.random.default_rng(seed)
    cases = sorted(per_case["case"].unique())
    doctors = list(dict.fromkeys(per_case.loc[per_case["kind"] == "model", "doctor"]))
    rows = []
    for cat in CATEGORIES:
        counts = _case_counts(items, cat)
        sens, spec = _rates(counts)
        boots = [_rates(counts[rng.integers(0, len(counts), len(counts))]) if len(counts)
                 else (np.nan, np.nan) for _ in range(n_boot)]
        draws = rng.integers(0, len(cases), (n_boot, len(cases)))
        for doctor in doctors:
            s = _scores(per_case, doctor, cat, cases)
            obs = float(np.nanmean(s)) if np.isfinite(s).any() else float("nan")
            reps = [rogan_gladen(float(np.nanmean(s[d])), *b, margin)
                    if np.isfinite(s[d]).any() else None for d, b in zip(draws, boots)]
            rows.append(_row(doctor, cat, obs, sens, spec, counts, reps, margin))
    order = {d: k for k, d in enumerate(doctors)}
    return sorted(rows, key=lambda r: (order[r["doctor"]], list(SHORT.values()).index(
        r["metric"])))


def _row(doctor, cat, obs, sens, spec, counts, reps, margin) -> dict:
    point = rogan_gladen(obs, sens, spec, margin) if np.isfinite(obs) else None
    kept = np.array([r for r in reps if r is not None], dtype=float)
    ok = point is not None and len(kept)
    tp, fn, tn, fp = counts.sum(axis=0)
    j = sens + spec - 1.0
    return {"doctor": doctor, "metric": SHORT[cat], "observed": 100.0 * obs,
            "corrected": 100.0 * point if ok else float("nan"),
            "ci_lo": 100.0 * float(np.percentile(kept, 2.5)) if ok else float("nan"),
            "ci_hi": 100.0 * float(np.percentile(kept, 97.5)) if ok else float("nan"),
            "sensitivity": sens, "specificity": spec, "gold_pass": int(tp + fn),
            "gold_fail": int(tn + fp), "dropped_rounds": len(reps) - len(kept),
            "reading": "corrected" if ok else
            f"{NOT_IDENTIFIABLE} (sens + spec - 1 = {j:.3f} <= {margin})"
            if np.isfinite(j) else f"{NOT_IDENTIFIABLE} (no hand-graded run items)"}


def corrected_table(per_case: pd.DataFrame, items: Sequence[RunItem], n_boot: int,
                    seed: int, margin: float, min_share: float) -> pd.DataFrame:
    """The corrected Table 2 (:func:`corrected_scores`), each row with the grader's
    validation reading (:func:`validation_reading`)."""
    rows = corrected_scores(per_case, items, n_boot, seed, margin)
    return pd.DataFrame(rows).assign(grader=validation_reading(items, min_share))


# -- what a reader found earned ------------------------------------------------------------

def read_per_case(items: Sequence[RunItem]) -> pd.DataFrame:
    """Per model doctor × case, each category's share of checklist items a blind reader
    found earned (c/m as Eq. 6, NaN for a category the case leaves out): a hand-graded
    pass counts, whether the grader credited the item or missed it; an item no
    hand-graded item covers counts as not earned (every credit of the reported doctors
    is read when Table 2 says so; the uncredited items read are those a doctor sentence
    came near, ``medpref.simulation.runpairs``)."""
    cells: dict[tuple[str, str], dict[str, list[bool]]] = {}
    for i in items:
        cells.setdefault((i.doctor, i.case), {}).setdefault(i.category, []).append(bool(i.gold))
    rows = [{"doctor": d, "case": c, **{cat: (sum(v[cat]) / len(v[cat]) if v.get(cat)
                                              else float("nan")) for cat in CATEGORIES}}
            for (d, c), v in cells.items()]
    return pd.DataFrame(rows, columns=["doctor", "case", *CATEGORIES])


def read_table(per_case: pd.DataFrame, items: Sequence[RunItem], n_boot: int, seed: int,
               reference: str = "base") -> pd.DataFrame:
    """Per model doctor and category: Table 2's ALL score (the grader's credits) beside
    the read score (:func:`read_per_case`, averaged over cases), the credits, how many a
    reader read and found earned, the items the grader missed that a reader found earned,
    and the read score's paired difference from ``reference`` over the cases
    (:func:`medpref.simulation.tables.table2_paired`). Where the grader's error differs
    by doctor, a single Rogan–Gladen rate cannot undo it; this count can."""
    from medpref.simulation.tables import table2_paired

    read = read_per_case(items)
    doctors = list(dict.fromkeys(i.doctor for i in items))
    paired = table2_paired(read, references=(reference,), n_boot=n_boot, seed=seed)
    paired = paired.set_index(["doctor", "metric"])
    rows = []
    for doctor in doctors:
        for cat in CATEGORIES:
            mine = [i for i in items if i.doctor == doctor and i.category == cat]
            credits = [i for i in mine if i.credited]
            obs = _scores(per_case, doctor, cat, sorted(per_case["case"].unique()))
            got = read.loc[read["doctor"] == doctor, cat]
            cmp = paired.loc[(doctor, SHORT[cat])] if (doctor, SHORT[cat]) in paired.index \
                else None
            rows.append({
                "doctor": doctor, "metric": SHORT[cat],
                "observed": 100.0 * float(np.nanmean(obs)) if np.isfinite(obs).any()
                else float("nan"),
                "read": 100.0 * float(got.mean()) if got.notna().any() else float("nan"),
                "credits": len(credits), "credits_read": sum(i.gold is not None for i in credits),
                "credits_earned": sum(bool(i.gold) for i in credits),
                "missed_earned": sum(bool(i.gold) and not i.credited for i in mine),
                "vs": reference if cmp is not None else "",
                "diff": float("nan") if cmp is None else cmp["diff"],
                "ci_lo": float("nan") if cmp is None else cmp["ci_lo"],
                "ci_hi": float("nan") if cmp is None else cmp["ci_hi"],
                "verdict": "" if cmp is None else cmp["verdict"]})
    return pd.DataFrame(rows)
