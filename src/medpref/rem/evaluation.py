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


def never_predicted(labels: Sequence[int | None]) -> list[int]:
    """The scores 0/1/2 that no usable label took (a REM that never says 0 cannot tell a
    non-compliant turn from a partial one)."""
    seen = {lab for lab in labels if lab is not None}
    return [s for s in LABELS if s not in seen]


def rule_ordering(states: Sequence[str], golds: Sequence[int],
                  scores: Sequence[float | None]) -> dict[str, float]:
    """Within-history rule ordering: over the pairs of items of one state (two rules of
    one history) whose gold scores differ, the share the scorer orders the same way
    (its score strictly higher where the gold is). A tie or an unusable score is not
    right; ``ties`` counts the tied pairs."""
    by_state: dict[str, list[int]] = {}
    for i, s in enumerate(states):
        by_state.setdefault(s, []).append(i)
    pairs = right = ties = 0
    for idx in by_state.values():
        for a_pos, a in enumerate(idx):
            for b in idx[a_pos + 1:]:
                if golds[a] == golds[b]:
                    continue
                pairs += 1
                if scores[a] is None or scores[b] is None:
                    continue
                if scores[a] == scores[b]:
                    ties += 1
                elif (scores[a] > scores[b]) == (golds[a] > golds[b]):
                    right += 1
    return {"pairs": pairs, "right": right, "ties": ties,
            "share": right / pairs if pairs else math.nan}


def paired_accuracy_difference(states: Sequence[str], correct_a: Sequence[bool],
                               correct_b: Sequence[bool], rounds: int, seed: int,
                               level: float = 0.95) -> dict[str, float]:
    """Accuracy of A minus accuracy of B on the same items, with a bootstrap interval
    that resamples states (the items of one history share it): ``rounds`` seeded
    resamples, percentile interval. ``excludes_0``: the interval lies off zero."""
    import numpy as np

    if not (len(states) == len(correct_a) == len(correct_b)):
        raise ValueError("states, correct_a and correct_b must be of one length")
    if not states:
        return {"n": 0, "states": 0, "acc_a": math.nan, "acc_b": math.nan, "diff": math.nan,
                "lo": math.nan, "hi": math.nan, "excludes_0": False}
    keys = list(dict.fromkeys(states))
    pos = {k: i for i, k in enumerate(keys)}
    diff_sum = np.zeros(len(keys))
    count = np.zeros(len(keys))
    for s, a, b in zip(states, correct_a, correct_b):
        diff_sum[pos[s]] += float(a) - float(b)
        count[pos[s]] += 1
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(keys), size=(rounds, len(keys)))
    boot = diff_sum[draws].sum(axis=1) / count[draws].sum(axis=1)
    lo, hi = np.quantile(boot, [(1 - level) / 2, 1 - (1 - level) / 2])
    n = len(states)
    return {"n": n, "states": len(keys), "acc_a": float(np.mean(correct_a)),
            "acc_b": float(np.mean(correct_b)), "diff": float(diff_sum.sum() / n),
            "lo": float(lo), "hi": float(hi), "excludes_0": bool(lo > 0 or hi < 0)}
