"""Ratings from pairwise verdicts: Elo (shuffled orders, bootstrap CIs) and Bradley–Terry.

Input is any list of :class:`~medpref.contracts.PairwiseJudgement` — this stage's
verdicts or stored ones from elsewhere.

What the paper defines (RagPULSE appendix A.1) is the Elo update only: before a game,
E_a = 1 / (1 + base^((R_b − R_a)/scale)) with base 10 and scale 400; after it,
R_a ← R_a + K·(S_a − E_a) with S = 1 (win), ½ (draw), 0 (loss). It gives no K, no
starting rating, no order of games and no intervals: ``medqa.elo`` holds ours.

**Games** (``elo.game``). ``verdict`` (default, the usual convention, e.g. Chatbot
Arena): every verdict is one game, so a pair judged in both orders plays twice.
``battle``: verdicts sharing an item and an unordered pair are merged into one game
whose score is their mean (a split verdict then reads as a tie: the ratings are exactly
invariant to ties being split, which one game per verdict is not, by a term of order
K²/scale).

**Elo point estimate** (``elo.point``). Online Elo depends on the order of games:
``shuffled_mean`` is the mean of the final ratings over ``n_shuffles`` seeded random
orders; ``bootstrap_median`` is the median over the bootstrap replicates. The CI is a
percentile bootstrap: games are resampled with replacement and rated in the resampled
(random) order.

**Bradley–Terry**: P(i beats j) = p_i / (p_i + p_j), fitted by Hunter's MM algorithm with
fractional wins (a tie is half a win for each side), on the Elo scale
R_i = initial + scale·log_base(p_i) with the geometric mean of p fixed to 1 (so the mean
rating is ``initial``). ``prior_ties`` virtual tie games between every pair keep the
estimate finite when a model wins or loses everything (0 disables it).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as st

from medpref.contracts import PairwiseJudgement, read_jsonl
from medpref.medqa.config import MedQAParams
from medpref.params import repo_path

_SCORE = {"model_a": 1.0, "model_b": 0.0, "tie": 0.5}


@dataclass(frozen=True)
class EloScale:
    """E_a = 1 / (1 + base^((R_b − R_a)/scale)): the paper's base 10, scale 400."""

    scale: float = 400.0
    base: float = 10.0


PAPER_SCALE = EloScale()


@dataclass(frozen=True)
class Battle:
    """One game: model_a's score (a verdict's, or the mean of a merged battle's verdicts)
    and the number of verdicts it stands for."""

    item: str
    model_a: str
    model_b: str
    score_a: float
    n_verdicts: int


def battles_from_judgements(judgements: Sequence[PairwiseJudgement],
                            game: str = "verdict") -> list[Battle]:
    """The games of a list of verdicts; model_a is the alphabetically first of a pair.

    ``verdict``: one game per verdict. ``battle``: one game per (item, unordered pair),
    scored by the mean of its verdicts."""
    if game not in ("verdict", "battle"):
        raise ValueError(f"unknown game unit '{game}' (verdict | battle)")
    groups: dict[tuple, list[float]] = {}
    for n, j in enumerate(judgements):
        if j.model_a == j.model_b:
            raise ValueError(f"judgement {j.id}: a model cannot battle itself ({j.model_a})")
        a, b = sorted((j.model_a, j.model_b))
        s = _SCORE[j.winner]
        key = (j.item, a, b) if game == "battle" else (j.item, a, b, n)
        groups.setdefault(key, []).append(s if j.model_a == a else 1.0 - s)
    return [Battle(key[0], key[1], key[2], sum(scores) / len(scores), len(scores))
            for key, scores in groups.items()]


def models_of(battles: Sequence[Battle]) -> list[str]:
    return sorted({m for bt in battles for m in (bt.model_a, bt.model_b)})


# -- Elo --------------------------------------------------------------------------------

def expected_score(r_a: float, r_b: float, scale: EloScale = PAPER_SCALE) -> float:
    """E_a = 1 / (1 + base^((R_b − R_a)/scale))."""
    return 1.0 / (1.0 + scale.base ** ((r_b - r_a) / scale.scale))


def elo_ratings(battles: Sequence[Battle], k: float, initial: float,
                models: Sequence[str] | None = None,
                scale: EloScale = PAPER_SCALE) -> dict[str, float]:
    """Online Elo over the games in the given order."""
    ratings = {m: float(initial) for m in (models or models_of(battles))}
    for bt in battles:
        delta = k * (bt.score_a - expected_score(ratings[bt.model_a], ratings[bt.model_b],
                                                 scale))
        ratings[bt.model_a] += delta
        ratings[bt.model_b] -= delta
    return ratings


def elo_shuffled(battles: Sequence[Battle], k: float, initial: float, n_shuffles: int,
                 seed: int, models: Sequence[str] | None = None,
                 scale: EloScale = PAPER_SCALE) -> dict[str, float]:
    """Mean final Elo over ``n_shuffles`` seeded random orders of the games."""
    models = list(models or models_of(battles))
    rng = random.Random(seed)
    totals = dict.fromkeys(models, 0.0)
    order = list(battles)
    for _ in range(n_shuffles):
        rng.shuffle(order)
        for m, r in elo_ratings(order, k, initial, models, scale).items():
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
                  tol: float = 1e-10, scale: EloScale = PAPER_SCALE) -> dict[str, float]:
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
    return {m: initial + scale.scale * math.log(v, scale.base) for m, v in zip(models, p)}


# -- bootstrap and the table -------------------------------------------------------------

RateFn = Callable[[Sequence[Battle]], dict[str, float]]


def bootstrap_draws(battles: Sequence[Battle], rate: RateFn, models: Sequence[str],
                    n_boot: int, seed: int) -> np.ndarray:
    """``rate`` over games resampled with replacement (random order): n_boot × models,
    the resamples drawn by ``scipy.stats.bootstrap`` (one game: each resample is it)."""
    def rated(idx: np.ndarray) -> np.ndarray:
        ratings = rate([battles[i] for i in idx])
        return np.array([ratings[m] for m in models], dtype=float)

    if len(battles) < 2:
        return np.tile(rated(np.zeros(len(battles), dtype=int)), (n_boot, 1))
    res = st.bootstrap((np.arange(len(battles)),), rated, n_resamples=n_boot,
                       vectorized=False, method="percentile", rng=np.random.default_rng(seed))
    return np.reshape(res.bootstrap_distribution, (len(models), n_boot)).T


def percentile_intervals(draws: np.ndarray, models: Sequence[str], ci: float = 0.95
                         ) -> dict[str, tuple[float, float]]:
    lo, hi = np.quantile(draws, [(1 - ci) / 2, (1 + ci) / 2], axis=0)
    return {m: (float(lo[i]), float(hi[i])) for i, m in enumerate(models)}


def bootstrap_intervals(battles: Sequence[Battle], rate: RateFn, models: Sequence[str],
                        n_boot: int, seed: int, ci: float = 0.95
                        ) -> dict[str, tuple[float, float]]:
    """Percentile CI of ``rate`` over games resampled with replacement (random order)."""
    return percentile_intervals(bootstrap_draws(battles, rate, models, n_boot, seed),
                                models, ci)


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
                 n_boot: int, ci: float, prior_ties: float, seed: int,
                 point: str = "shuffled_mean", scale: EloScale = PAPER_SCALE) -> pd.DataFrame:
    """Elo (mean over shuffles or bootstrap median; bootstrap CI) and Bradley–Terry (with
    CI), best first."""
    if not battles:
        return pd.DataFrame(columns=["model", "elo", "elo_low", "elo_high", "elo_rank", "bt",
                                     "bt_low", "bt_high", "battles", "wins", "ties",
                                     "losses", "score"])
    models = models_of(battles)
    draws = bootstrap_draws(battles, lambda s: elo_ratings(s, k, initial, models, scale),
                            models, n_boot, seed)
    if point == "bootstrap_median":
        elo = dict(zip(models, np.median(draws, axis=0).tolist()))
    elif point == "shuffled_mean":
        elo = elo_shuffled(battles, k, initial, n_shuffles, seed, models, scale)
    else:
        raise ValueError(f"unknown Elo point estimate '{point}'")
    bt = bradley_terry(battles, initial, prior_ties, models, scale=scale)
    elo_ci = percentile_intervals(draws, models, ci)
    bt_ci = bootstrap_intervals(
        battles, lambda s: bradley_terry(s, initial, prior_ties, models, scale=scale),
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


def ratings_for(judgements: Sequence[PairwiseJudgement], p: MedQAParams, seed: int,
                source: str) -> pd.DataFrame:
    table = rating_table(battles_from_judgements(judgements, p.elo_game), k=p.elo_k,
                         initial=p.elo_initial, n_shuffles=p.elo_shuffles, n_boot=p.bootstrap,
                         ci=p.ci, prior_ties=p.bt_prior_ties, seed=seed, point=p.elo_point,
                         scale=EloScale(p.elo_scale, p.elo_base))
    table.insert(0, "verdicts", source)
    return table


def stored_judgements(p: MedQAParams) -> list[PairwiseJudgement]:
    """Verdicts from elsewhere (``medqa.stored_verdicts``), in the contract's shape."""
    return [] if p.stored_verdicts is None else read_jsonl(repo_path(p.stored_verdicts),
                                                           PairwiseJudgement)
