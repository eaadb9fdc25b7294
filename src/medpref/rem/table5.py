"""Table 5 and what stands beside it, from stage 03's records alone.

* :func:`table5_rows` — one row per scorer on one evaluation set, on the items it scored
  (a fitted scorer: all of them; an LLM scorer: the set's fixed subset);
* :func:`table5_sets` — every set (dev, test, independent) × which items (``all``, and
  ``llm_subset``: every scorer on the same items) × scorer;
* :func:`selection_table` — the default REM chosen on the development split: exact
  agreement on the items every candidate scored;
* :func:`paired_table` — the chosen REM against each baseline of ``rem.paired_against``,
  per set and over all rules and each rule: the accuracy difference with a bootstrap
  interval that resamples states (seeded).

Old records (written before a record carried its set) count as the test set, all items.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from medpref.rem.evaluation import (
    label_spread,
    match_metrics,
    never_predicted,
    paired_accuracy_difference,
    rule_ordering,
)
from medpref.rem.independent import is_independent_set

SELECTION_COLUMNS = ["scorer", "n_common", "exact_common_%", "fuzzy02_common_%", "n",
                     "exact_%", "chosen"]
PAIRED_COLUMNS = ["eval_set", "scope", "scorer", "against", "n", "states", "acc_%",
                  "acc_against_%", "diff_pp", "lo_pp", "hi_pp", "excludes_0"]


def eval_set_of(row: dict[str, Any]) -> str:
    return row.get("eval_set", "test")


def items_of_run(run: dict[str, Any]) -> str:
    return run.get("items", "all")


def _preds(predictions, scorer: str, eval_set: str, subset_only: bool = False) -> list[dict]:
    return [r for r in predictions if r["scorer"] == scorer and eval_set_of(r) == eval_set
            and (not subset_only or r.get("llm_subset", True))]


def metrics_row(rows: Sequence[dict[str, Any]], near_constant_share: float) -> dict[str, Any]:
    """Agreement, the labels never predicted, the label spread and within-history rule
    ordering of one scorer's prediction records."""
    golds = [r["gold"] for r in rows]
    scores = [r["score"] for r in rows]
    labels = [r["label"] for r in rows]
    m = match_metrics(golds, scores, labels)
    spread = label_spread(labels, near_constant_share)
    order = rule_ordering([r.get("state", r["id"]) for r in rows], golds, scores)
    missing = never_predicted(labels)
    return {"n": m["n"], "exact_%": 100 * m["exact"], "fuzzy_%": 100 * m["fuzzy"],
            "fuzzy02_%": 100 * m["fuzzy02"], "n02": m["n02"],
            "never_predicted": ", ".join(map(str, missing)) if missing else "-",
            "top_label": spread["top_label"], "top_label_share": spread["top_label_share"],
            "near_constant": spread["near_constant"], "order_pairs": order["pairs"],
            "order_right_%": 100 * order["share"], "coverage_%": 100 * m["coverage"],
            "mae": m["mae"]}


def table5_rows(scorer_runs, predictions, near_constant_share: float,
                eval_set: str = "test") -> pd.DataFrame:
    """One row per scorer run of ``eval_set`` on the items it scored, in run order."""
    rows = []
    for run in scorer_runs:
        if eval_set_of(run) != eval_set:
            continue
        judged = _preds(predictions, run["scorer"], eval_set)
        rows.append({"scorer": run["scorer"], "method": run["method"],
                     "items": items_of_run(run), **metrics_row(judged, near_constant_share)})
    return pd.DataFrame(rows)


def cost_rows(scorer_runs) -> pd.DataFrame:
    """What each scorer run cost: wall seconds, model calls, cache hits, per set. Kept out
    of Table 5 (which stage 04 reads) so that a rerun's timings and cache state do not make
    the stages after it stale."""
    return pd.DataFrame([{"eval_set": eval_set_of(run), "scorer": run["scorer"],
                          "items": items_of_run(run), "n": run.get("n"),
                          "wall_s": run["wall_s"], "model_calls": run["calls"],
                          "cache_hits": run["cache_hits"]} for run in scorer_runs],
                        columns=["eval_set", "scorer", "items", "n", "wall_s", "model_calls",
                                 "cache_hits"])


def table5_sets(scorer_runs, predictions, near_constant_share: float) -> pd.DataFrame:
    """Every set × items (``all``: the fitted scorers on the whole set; ``llm_subset``:
    every scorer on the set's subset) × scorer."""
    rows = []
    for eval_set in dict.fromkeys(eval_set_of(r) for r in scorer_runs):
        runs = [r for r in scorer_runs if eval_set_of(r) == eval_set]
        for items in ("all", "llm_subset"):
            for run in runs:
                if items == "all" and items_of_run(run) != "all":
                    continue
                judged = _preds(predictions, run["scorer"], eval_set, items == "llm_subset")
                rows.append({"eval_set": eval_set, "items": items, "scorer": run["scorer"],
                             **metrics_row(judged, near_constant_share)})
    return pd.DataFrame(rows)


def _exact(rows) -> float:
    return 100 * match_metrics([r["gold"] for r in rows], [r["score"] for r in rows],
                               [r["label"] for r in rows])["exact"] if rows else math.nan


def _fuzzy02(rows) -> float:
    return 100 * match_metrics([r["gold"] for r in rows], [r["score"] for r in rows],
                               [r["label"] for r in rows])["fuzzy02"] if rows else math.nan


def selection_table(scorer_runs, predictions, dev: str = "dev") -> pd.DataFrame:
    """Every scorer run on the development set: exact agreement on the items every such
    scorer scored (``common``) and on all it scored; ``chosen`` marks the winner (best on
    the common items). The test and
    independent sets play no part. (A tie on the common items goes to the scorer listed
    first: accuracy on a scorer's own items compares different items.)"""
    runs = [r for r in scorer_runs if eval_set_of(r) == dev]
    if not runs:
        return pd.DataFrame(columns=SELECTION_COLUMNS)
    by_scorer = {r["scorer"]: _preds(predictions, r["scorer"], dev) for r in runs}
    common = set.intersection(*({p["id"] for p in rows} for rows in by_scorer.values()))
    table = []
    for name, rows in by_scorer.items():
        shared = [p for p in rows if p["id"] in common]
        table.append({"scorer": name, "n_common": len(shared),
                      "exact_common_%": _exact(shared), "fuzzy02_common_%": _fuzzy02(shared),
                      "n": len(rows), "exact_%": _exact(rows), "chosen": False})
    best = max(range(len(table)), key=lambda i: (_num(table[i]["exact_common_%"]), -i))
    table[best]["chosen"] = True
    return pd.DataFrame(table, columns=SELECTION_COLUMNS)


def _num(x: float) -> float:
    return -math.inf if x is None or math.isnan(x) else x


def chosen_scorer(selection: pd.DataFrame) -> str | None:
    """The development split's winner (None: no scorer ran on it)."""
    chosen = selection[selection["chosen"].astype(bool)]
    return None if chosen.empty else str(chosen["scorer"].iloc[0])


#: the independent test's draws pooled (a set of the paired table, not of the records)
POOLED = "independent_pooled"


def paired_sets(predictions) -> dict[str, tuple[str, ...]]:
    """The paired table's sets, each the record sets it reads: test, hand test, each
    independent draw and, when there are several draws, all of them pooled."""
    present = list(dict.fromkeys(eval_set_of(r) for r in predictions))
    draws = [s for s in present if is_independent_set(s)]
    sets = {s: (s,) for s in ("test", "hand_test", *draws) if s in present}
    if len(draws) > 1:
        sets[POOLED] = tuple(draws)
    return sets


def paired_table(predictions, scorer: str | None, against: Sequence[str],
                 rule_ids: Sequence[str], rounds: int, seed: int,
                 sets: dict[str, tuple[str, ...]] | None = None) -> pd.DataFrame:
    """``scorer`` against each of ``against`` on every set both scored, over all rules and
    per rule, on the items both scored: accuracy, difference in points and its bootstrap
    interval (states resampled, ``rounds`` rounds, ``seed``). ``sets``: name → the record
    sets it pools (default :func:`paired_sets`)."""
    rows = []
    if sets is None:
        sets = paired_sets(predictions)
    for eval_set, parts in sets.items():
        mine = {p["id"]: p for part in parts for p in _preds(predictions, scorer or "", part)}
        for other in against:
            theirs = {p["id"]: p for part in parts for p in _preds(predictions, other, part)}
            ids = [i for i in mine if i in theirs]
            if not ids or other == scorer:
                continue
            for scope in ["all", *rule_ids]:
                use = [i for i in ids if scope == "all" or mine[i]["rule"] == scope]
                d = paired_accuracy_difference(
                    [mine[i].get("state", i) for i in use],
                    [mine[i]["label"] == mine[i]["gold"] for i in use],
                    [theirs[i]["label"] == theirs[i]["gold"] for i in use], rounds, seed)
                rows.append({"eval_set": eval_set, "scope": scope, "scorer": scorer,
                             "against": other, "n": d["n"], "states": d["states"],
                             "acc_%": 100 * d["acc_a"], "acc_against_%": 100 * d["acc_b"],
                             "diff_pp": 100 * d["diff"], "lo_pp": 100 * d["lo"],
                             "hi_pp": 100 * d["hi"], "excludes_0": d["excludes_0"]})
    return pd.DataFrame(rows, columns=PAIRED_COLUMNS)
