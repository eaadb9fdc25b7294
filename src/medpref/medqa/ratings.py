"""Ratings from pairwise verdicts: Elo (shuffled orders, bootstrap CIs) and Bradley–Terry.

Input is any list of :class:`~medpref.contracts.PairwiseJudgement` — this stage's
verdicts or stored ones from elsewhere.

**Battles.** Verdicts are grouped by (item, unordered pair of models): one group is one
*battle*, whatever the number of verdicts in it (normally two, one per order). Its score
for model_a is the mean over its verdicts of S = 1 (model_a won), ½ (tie), 0 (lost).

**Elo** (RagPULSE appendix A.1): before a battle, E_a = 1 / (1 + 10^((R_b − R_a)/400));
after it, R_a ← R_a + K·(S_a − E_a) and R_b ← R_b − K·(S_a − E_a). Online Elo depends
on the order of battles, so the point estimate is the mean of the final ratings over
``n_shuffles`` seeded random orders. The CI is a percentile bootstrap: battles (not
single verdicts, so the two orders of a battle stay together) are resampled with
replacement and rated in the resampled (random) order.

**Bradley–Terry**: P(i beats j) = p_i / (p_i + p_j), fitted by Hunter's MM algorithm with
fractional wins (a tie is half a win for each side), on the Elo scale
R_i = initial + 400·log10(p_i) with the geometric mean of p fixed to 1 (so the mean
rating is ``initial``). ``prior_ties`` virtual tie battles between every pair keep the
estimate finite when a model wins or loses everything (0 disables it).

**Invariance to ties being split** (tested). A battle enters both ratings only through
its mean score, so a battle recorded as one tie, as a tie in both orders, or as a split
(model_a wins in one order, model_b in the other) has the same score ½ and yields exactly
the same ratings: the same Elo for every shuffled order (hence the same average), the
same bootstrap replicates for a given seed, the same Bradley–Terry fit. A judge whose
verdict flips with the order of presentation is thereby read as declaring a tie. Rating
each verdict as its own Elo game would not have this property (a win then a loss moves
the ratings differently from two ties, by a term of order K²/400).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from medpref.contracts import PairwiseJudgement

_SCORE = {"model_a": 1.0, "model_b": 0.0, "tie": 0.5}


@dataclass(frozen=True)
class Battle:
    """One (item, pair) meeting: model_a's order-averaged score and its verdict count."""

    item: str
    model_a: str
    model_b: str
    score_a: float
    n_verdicts: int


def battles_from_judgements(judgements: Sequence[PairwiseJudgement]) -> list[Battle]:
    """Group verdicts by (item, unordered pair); model_a is the alphabetically first."""
    groups: dict[tuple[str, str, str], list[float]] = {}
    for j in judgements:
        if j.model_a == j.model_b:
            raise ValueError(f"judgement {j.id}: a model cannot battle itself ({j.model_a})")
        a, b = sorted((j.model_a, j.model_b))
        s = _SCORE[j.winner]
        groups.setdefault((j.item, a, b), []).append(s if j.model_a == a else 1.0 - s)
    return [Battle(item, a, b, sum(scores) / len(scores), len(scores))
            for (item, a, b), scores in groups.items()]


def models_of(battles: Sequence[Battle]) -> list[str]:
    return sorted({m for bt in battles for m in (bt.model_a, bt.model_b)})


# -- Elo --------------------------------------------------------------------------------

def expected_score(r_a: float, r_b: float) -> float:
    """E_a = 1 / (1 + 10^((R_b − R_a)/400))."""
    return 1.0 / (1.0 + 10.0 ** ((r_b - r_a) / 400.0))


def elo_ratings(battles: Sequence[Battle], k: float, initial: float,
                models: Sequence[str] | None = None) -> dict[str, float]:
    """Online Elo over the battles in the given order."""
    ratings = {m: float(initial) for m in (models or models_of(battles))}
    for bt in battles:
        delta = k * (bt.score_a - expected_score(ratings[bt.model_a], ratings[bt.model_b]))
        ratings[bt.model_a] += delta
        ratings[bt.model_b] -= delta
    return ratings


def elo_shuffled(battles: Sequence[Battle], k: float, initial: float, n_shuffles: int,
                 seed: int, models: Sequence[str] | None = None) -> dict[str, float]:
    """Mean final Elo over ``n_shuffles`` seeded random orders of the battles."""
    models = list(models or models_of(battles))
    rng = random.Random(seed)
    totals = dict.fromkeys(models, 0.0)
    order = list(battles)
    for _ in range(n_shuffles):
        rng.shuffle(order)
        for m, r in elo_ratings(order, k, initial, models).items():
            totals[m] += r
    return {m: totals[m] / n_shuffles for m in models}


# -- Bradley–Terry -----------------------------------------------------------------------

def _win_matrix(battles: Sequence[Battle], models: Sequence[str], prior_ties: float
                ) -> tuple[np.ndarray, np.ndarray]:
    index = {m: i for i, m in enumerate(models)}
    wins = np.full((len(models), len(models)), prior_ties / 2.0)
    games = np.full((len(models), len(models)), float(prior_ties))
    np.fill_diagonal(wins, 0.0)
    np.fill_diagonal(games, 0.0)
    for bt in battles:
        a, b = index[bt.model_a], index[bt.model_b]
        wins[a, b] += bt.score_a
        wins[b, a] += 1.0 - bt.score_a
        games[a, b] += 1.0
        games[b, a] += 1.0
    return wins, games


def bradley_terry(battles: Sequence[Battle], initial: float, prior_ties: float = 0.5,
                  models: Sequence[str] | None = None, max_iter: int = 10_000,
                  tol: float = 1e-10) -> dict[str, float]:
    """Bradley–Terry strengths (MM algorithm) on the Elo scale."""
    models = list(models or models_of(battles))
    wins, games = _win_matrix(battles, models, prior_ties)
    total_wins = wins.sum(axis=1)
    if np.any(total_wins <= 0) or np.any(total_wins >= games.sum(axis=1)):
        raise ValueError("Bradley–Terry has no finite solution: a model won or lost every "
                         "game; set medqa.bt_prior_ties > 0")
    p = np.ones(len(models))
    for _ in range(max_iter):
        denom = (games / (p[:, None] + p[None, :])).sum(axis=1)
        new = total_wins / denom
        new /= np.exp(np.log(new).mean())
        if np.max(np.abs(new - p)) < tol:
            p = new
            break
        p = new
    return {m: initial + 400.0 * math.log10(v) for m, v in zip(models, p)}


# -- bootstrap and the table -------------------------------------------------------------

RateFn = Callable[[Sequence[Battle]], dict[str, float]]


def bootstrap_intervals(battles: Sequence[Battle], rate: RateFn, models: Sequence[str],
                        n_boot: int, seed: int, ci: float = 0.95
                        ) -> dict[str, tuple[float, float]]:
    """Percentile CI of ``rate`` over battles resampled with replacement (random order)."""
    rng = np.random.default_rng(seed)
    draws = np.empty((n_boot, len(models)))
    for b in range(n_boot):
        sample = [battles[i] for i in rng.integers(0, len(battles), len(battles))]
        rated = rate(sample)
        draws[b] = [rated[m] for m in models]
    lo, hi = np.quantile(draws, [(1 - ci) / 2, (1 + ci) / 2], axis=0)
    return {m: (float(lo[i]), float(hi[i])) for i, m in enumerate(models)}


def record_of(battles: Sequence[Battle], models: Sequence[str]) -> pd.DataFrame:
    """Per model: battles, wins/ties/losses (by battle score) and mean score."""
    rows = {m: {"battles": 0, "wins": 0, "ties": 0, "losses": 0, "score": 0.0}
            for m in models}
    for bt in battles:
        for m, s in ((bt.model_a, bt.score_a), (bt.model_b, 1.0 - bt.score_a)):
            row = rows[m]
            row["battles"] += 1
            row["score"] += s
            row["wins" if s > 0.5 else "losses" if s < 0.5 else "ties"] += 1
    for row in rows.values():
        row["score"] = row["score"] / row["battles"] if row["battles"] else float("nan")
    return pd.DataFrame([{"model": m, **r} for m, r in rows.items()])


def rating_table(battles: Sequence[Battle], *, k: float, initial: float, n_shuffles: int,
                 n_boot: int, ci: float, prior_ties: float, seed: int) -> pd.DataFrame:
    """Elo (mean over shuffles, bootstrap CI) and Bradley–Terry (with CI), best first."""
    if not battles:
        return pd.DataFrame(columns=["model", "elo", "elo_low", "elo_high", "elo_rank", "bt",
                                     "bt_low", "bt_high", "battles", "wins", "ties",
                                     "losses", "score"])
    models = models_of(battles)
    elo = elo_shuffled(battles, k, initial, n_shuffles, seed, models)
    bt = bradley_terry(battles, initial, prior_ties, models)
    elo_ci = bootstrap_intervals(battles, lambda s: elo_ratings(s, k, initial, models),
                                 models, n_boot, seed, ci)
    bt_ci = bootstrap_intervals(battles, lambda s: bradley_terry(s, initial, prior_ties, models),
                                models, n_boot, seed, ci)
    table = pd.DataFrame({"model": models, "elo": [elo[m] for m in models],
                          "elo_low": [elo_ci[m][0] for m in models],
                          "elo_high": [elo_ci[m][1] for m in models],
                          "bt": [bt[m] for m in models],
                          "bt_low": [bt_ci[m][0] for m in models],
                          "bt_high": [bt_ci[m][1] for m in models]})
    table = table.merge(record_of(battles, models), on="model")
    table = table.sort_values("elo", ascending=False, kind="stable").reset_index(drop=True)
    # equal ratings share a rank (1 + the number of models rated strictly higher)
    ranks = table["elo"].round(6).rank(method="min", ascending=False).astype(int)
    table.insert(4, "elo_rank", ranks)
    return table
