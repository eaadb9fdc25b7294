"""REM evaluation as PLPF Table 5 (Appendix E): exact and fuzzy match on the test split.

* exact match — the predicted label equals the annotation. A label is the judgement's
  0/1/2 verdict: the mean of sampled scores rounded half up, or the most probable score
  token of the probability-based scorers (``RuleJudgement.label``); given bare scores,
  they are rounded;
* fuzzy match — only the confusions that swap good and bad (a 2 scored 0, a 0 scored 2)
  count as errors: it measures whether the REM tells good from bad responses. Over all
  items a gold 1 always counts as correct, so ``fuzzy02`` gives the same match over the
  items whose gold is 0 or 2 only (PLPF's wording: how often a 2 is scored 0 and vice
  versa). A predicted 1 is never a swap either, so a scorer that answers 1 everywhere
  still scores 100 % on both: :func:`label_spread` flags such near-constant scorers.

A prediction of ``None`` (no usable judgement) counts as an error in both and lowers
``coverage``; it is never read as a 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from medpref.remscore.base import to_label

__all__ = ["LABELS", "UNUSABLE", "confusion", "label_spread", "match_metrics",
           "per_rule_metrics", "to_label"]

LABELS = (0, 1, 2)
UNUSABLE = "none"


def _labels(preds: Sequence[float | None],
            labels: Sequence[int | None] | None) -> list[int | None]:
    if labels is None:
        return [to_label(p) for p in preds]
    if len(labels) != len(preds):
        raise ValueError(f"{len(preds)} predictions but {len(labels)} labels")
    return list(labels)


def match_metrics(golds: Sequence[int], preds: Sequence[float | None],
                  labels: Sequence[int | None] | None = None) -> dict[str, float]:
    """Exact and fuzzy accuracy of the labels (default: the rounded predictions),
    coverage and the mean absolute error of the scores, over the scored items."""
    if len(golds) != len(preds):
        raise ValueError(f"{len(golds)} gold scores but {len(preds)} predictions")
    n = len(golds)
    labels = _labels(preds, labels)
    scored = [(g, p) for g, p in zip(golds, preds) if p is not None]
    exact = sum(1 for g, lab in zip(golds, labels) if lab is not None and lab == g)
    fuzzy = sum(1 for g, lab in zip(golds, labels) if lab is not None and abs(lab - g) < 2)
    extremes = [(g, lab) for g, lab in zip(golds, labels) if g in (0, 2)]
    fuzzy02 = sum(1 for g, lab in extremes if lab is not None and abs(lab - g) < 2)
    return {"n": n, "exact": exact / n if n else math.nan,
            "fuzzy": fuzzy / n if n else math.nan,
            "n02": len(extremes),
            "fuzzy02": fuzzy02 / len(extremes) if extremes else math.nan,
            "coverage": len(scored) / n if n else math.nan,
            "mae": sum(abs(g - p) for g, p in scored) / len(scored) if scored else math.nan}


def confusion(golds: Sequence[int], preds: Sequence[float | None],
              labels: Sequence[int | None] | None = None) -> pd.DataFrame:
    """Counts: rows gold 0/1/2, columns predicted label 0/1/2 and 'none' (unusable)."""
    table = pd.DataFrame(0, index=pd.Index(LABELS, name="gold"),
                         columns=pd.Index([*LABELS, UNUSABLE], name="predicted"))
    for g, lab in zip(golds, _labels(preds, labels)):
        table.loc[g, UNUSABLE if lab is None else lab] += 1
    return table


def per_rule_metrics(rules: Sequence[str], golds: Sequence[int],
                     preds: Sequence[float | None],
                     labels: Sequence[int | None] | None = None) -> pd.DataFrame:
    """:func:`match_metrics` for each rule (rows in first-seen rule order)."""
    labels = _labels(preds, labels)
    rows = []
    for rule in dict.fromkeys(rules):
        idx = [i for i, r in enumerate(rules) if r == rule]
        rows.append({"rule": rule, **match_metrics([golds[i] for i in idx],
                                                   [preds[i] for i in idx],
                                                   [labels[i] for i in idx])})
    return pd.DataFrame(rows)


def label_spread(labels: Sequence[int | None], near_constant_share: float) -> dict:
    """How a scorer's usable labels spread: the most frequent one, its share, and whether
    that share exceeds ``near_constant_share`` (a near-constant scorer, whose fuzzy match
    says nothing about telling good from bad)."""
    usable = [lab for lab in labels if lab is not None]
    if not usable:
        return {"top_label": None, "top_label_share": math.nan, "near_constant": False}
    top = max(LABELS, key=lambda lab: (usable.count(lab), -lab))
    share = usable.count(top) / len(usable)
    return {"top_label": top, "top_label_share": share,
            "near_constant": share > near_constant_share}
