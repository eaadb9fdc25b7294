"""Eq. 4's "met" thresholds on the REM's own scale, calibrated on its development split.

PLPF App. C gates a goal rule's weight on its predecessors and constraints being met at
v ≥ 1 (t1 = t2 = 1.0 on the 0–2 score). That reads "met" as at least partial compliance,
and it acts only when the scorer's values fall below 1 where the rule is not met: a
scorer whose expected score never drops under 1 (the committed LoRA REM never predicted
0) never gates, and ``cai_dep`` is then the linear sum of the rule scores.

Here the threshold of each rule is the value of the scorer that best separates gold
"met" (score ≥ 1) from gold "not met" (score 0) on the REM's development split:
the cut with the highest balanced accuracy (Youden's J), ties to the cut nearest the
paper's 1.0. Stage 03 writes one row per (scorer, rule) (``thresholds.csv``); stage 04
reads the rows of the scorer it uses (``annotation.scoring.thresholds: rem_dev``).
A rule without both kinds of gold on the dev split keeps the fixed t1/t2.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

COLUMNS = ["scorer", "rule", "threshold", "balanced_accuracy", "n_dev", "n_not_met"]
PAPER_THRESHOLD = 1.0


@dataclass(frozen=True)
class Calibration:
    threshold: float | None      # None: the dev split cannot place it (one class only)
    balanced_accuracy: float | None
    n: int
    n_not_met: int


def calibrate_met_threshold(values: Sequence[float], gold: Sequence[int]) -> Calibration:
    """The cut on ``values`` (the scorer's state values of one rule on the dev split) that
    best separates gold ≥ 1 from gold 0: midpoints between consecutive distinct values,
    highest balanced accuracy of ``value >= cut``, ties to the cut nearest 1.0."""
    v = np.asarray(values, dtype=float)
    met = np.asarray(gold) >= 1
    keep = ~np.isnan(v)
    v, met = v[keep], met[keep]
    n_not = int((~met).sum())
    if met.all() or not met.any():
        return Calibration(None, None, len(v), n_not)
    distinct = np.unique(v)
    cuts = (distinct[:-1] + distinct[1:]) / 2 if len(distinct) > 1 else distinct
    best: tuple[float, float, float] | None = None     # (-J, distance to 1.0, cut)
    for cut in cuts:
        above = v >= cut
        bacc = (above[met].mean() + (~above[~met]).mean()) / 2
        key = (-round(float(bacc), 12), abs(float(cut) - PAPER_THRESHOLD), float(cut))
        best = key if best is None or key < best else best
    assert best is not None
    return Calibration(round(best[2], 6), round(-best[0], 6), len(v), n_not)


def threshold_rows(scorer: str, dev: pd.DataFrame) -> list[dict]:
    """One row per rule of ``dev`` (columns rule, value, gold) for ``scorer``."""
    rows = []
    for rule, part in dev.groupby("rule", sort=True):
        cal = calibrate_met_threshold(part["value"].tolist(), part["gold"].tolist())
        rows.append({"scorer": scorer, "rule": rule, "threshold": cal.threshold,
                     "balanced_accuracy": cal.balanced_accuracy, "n_dev": cal.n,
                     "n_not_met": cal.n_not_met})
    return rows


def load_thresholds(path: str | Path, scorer: str) -> dict[str, float]:
    """The calibrated thresholds of ``scorer`` by rule, from stage 03's table; rules the dev
    split could not place are left out (they keep t1/t2). A table without that scorer is
    an error naming the file and the scorers it has."""
    path = Path(path)
    table = pd.read_csv(path)
    missing = [c for c in COLUMNS if c not in table.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing} (expected {COLUMNS})")
    rows = table[table["scorer"] == scorer]
    if rows.empty:
        raise ValueError(f"{path}: no thresholds for REM scorer '{scorer}' "
                         f"(annotation.rem_scorer; the table has {sorted(set(table['scorer']))})")
    return {str(r.rule): float(r.threshold) for r in rows.itertuples()
            if not pd.isna(r.threshold)}


def describe(thresholds: Mapping[str, float], t1: float, t2: float) -> str:
    """One line for the stage's report: which thresholds Eq. 4 used."""
    if not thresholds:
        return f"fixed: t1 = {t1}, t2 = {t2}"
    return "calibrated on the REM's dev split: " + ", ".join(
        f"{rule} ≥ {value:.3f}" for rule, value in sorted(thresholds.items()))
