"""REM evaluation as PLPF Table 5 (Appendix E): exact and fuzzy match on the test split.

* exact match — the predicted score, rounded half up to 0/1/2, equals the annotation;
* fuzzy match — only the confusions that swap good and bad (a 2 scored 0, a 0 scored 2)
  count as errors: it measures whether the REM tells good from bad responses.

A prediction of ``None`` (no usable judgement) counts as an error in both and lowers
``coverage``; it is never read as a 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

LABELS = (0, 1, 2)
UNUSABLE = "none"


def to_label(score: float | None) -> int | None:
    """An averaged or expected score in [0, 2] as a 0/1/2 label (half up: 1.5 → 2)."""
    if score is None or (isinstance(score, float) and math.isnan(score)):
        return None
    return min(2, max(0, math.floor(score + 0.5)))


def match_metrics(golds: Sequence[int], preds: Sequence[float | None]) -> dict[str, float]:
    """Exact and fuzzy accuracy, coverage and mean absolute error over the scored items."""
    if len(golds) != len(preds):
        raise ValueError(f"{len(golds)} gold scores but {len(preds)} predictions")
    n = len(golds)
    labels = [to_label(p) for p in preds]
    scored = [(g, p) for g, p in zip(golds, preds) if p is not None]
    exact = sum(1 for g, lab in zip(golds, labels) if lab is not None and lab == g)
    fuzzy = sum(1 for g, lab in zip(golds, labels) if lab is not None and abs(lab - g) < 2)
    return {"n": n, "exact": exact / n if n else math.nan,
            "fuzzy": fuzzy / n if n else math.nan,
            "coverage": len(scored) / n if n else math.nan,
            "mae": sum(abs(g - p) for g, p in scored) / len(scored) if scored else math.nan}


def confusion(golds: Sequence[int], preds: Sequence[float | None]) -> pd.DataFrame:
    """Counts: rows gold 0/1/2, columns predicted 0/1/2 and 'none' (unusable)."""
    table = pd.DataFrame(0, index=pd.Index(LABELS, name="gold"),
                         columns=pd.Index([*LABELS, UNUSABLE], name="predicted"))
    for g, p in zip(golds, preds):
        lab = to_label(p)
        table.loc[g, UNUSABLE if lab is None else lab] += 1
    return table


def per_rule_metrics(rules: Sequence[str], golds: Sequence[int],
                     preds: Sequence[float | None]) -> pd.DataFrame:
    """:func:`match_metrics` for each rule (rows in first-seen rule order)."""
    rows = []
    for rule in dict.fromkeys(rules):
        idx = [i for i, r in enumerate(rules) if r == rule]
        rows.append({"rule": rule, **match_metrics([golds[i] for i in idx],
                                                   [preds[i] for i in idx])})
    return pd.DataFrame(rows)
