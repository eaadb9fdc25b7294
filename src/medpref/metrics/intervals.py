"""The project's statistics: intervals, paired comparisons, power and agreement.

Every number in a report that carries uncertainty comes from here, so the choices are made
once (see the house evaluation guide, ``EVALUATION.md`` beside the repository):

- a mean over items gets a t interval (``mean_ci``) or a seeded percentile bootstrap
  (``bootstrap_ci``); items that share a unit (a case, a dialogue) are resampled by that
  unit (``clusters=``), since the naive interval is too narrow by up to √(cluster size);
- two systems scored on the same items are compared on the per-item differences
  (``paired_difference``): mean difference, its interval, a sign-flip p-value, the minimum
  detectable difference and the correlation between the two systems' scores; an interval
  that covers 0 reads "no detectable difference";
- a proportion gets a Wilson interval; zero events in n trials a rule-of-three bound;
- agreement between two graders is Cohen's κ with a bootstrap interval.

The statistics are the libraries' (``tests/test_intervals_library.py`` pins them to the
values of the code they replaced): the t interval, the item bootstrap
(``scipy.stats.bootstrap``) and the exact sign-flip test (``scipy.stats.permutation_test``),
both read with this module's rules for undefined resamples and ties, the Wilson interval
(``scipy.stats.binomtest``), Pearson's r, and Cohen's κ
(``sklearn.metrics.cohen_kappa_score``). What stays here, and why: the cluster bootstrap
and the cluster-robust sd (scipy has neither); the Monte-Carlo sign flips (scipy draws its
random signs otherwise, which would move every committed p-value past 16 units by
Monte-Carlo error); κ of each bootstrap resample (scikit-learn's input checks cost ~4 ms
a call, minutes over a table's resamples).

Everything random takes a ``seed`` and draws from ``np.random.default_rng(seed)``, so a
rerun gives the same interval. Inputs holding NaN are refused: an abstention (a failed
judge call) must be dropped by the caller, who knows how to keep paired data aligned.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as st
from sklearn.exceptions import UndefinedMetricWarning
from sklearn.metrics import cohen_kappa_score

Stat = Callable[[np.ndarray], float]
_NAN = float("nan")


@dataclass(frozen=True)
class Interval:
    """A point estimate with its interval; ``n`` items, ``method`` says how it was made."""

    estimate: float
    lo: float
    hi: float
    n: int
    method: str

    def as_dict(self) -> dict[str, float | int]:
        return {"estimate": self.estimate, "lo": self.lo, "hi": self.hi, "n": self.n}


@dataclass(frozen=True)
class PairedComparison:
    """A vs B on the same items: ``diff`` = mean(A − B) with its interval [lo, hi],
    sign-flip ``p_value``, ``mde`` (minimum detectable difference at α 0.05, power 0.8)
    and the Pearson ``correlation`` of A's and B's scores over ``n`` items."""

    diff: float
    lo: float
    hi: float
    p_value: float
    n: int
    mde: float
    correlation: float

    def verdict(self, alpha: float = 0.05) -> str:
        """A "higher" / "lower" than B when the interval excludes 0 *and* the paired test
        agrees (``p_value`` < ``alpha``), else "no detectable difference" (also when there
        is no interval or no p-value: nothing was detected). Both are asked because on few
        items they part: when the few items that differ all differ one way, the percentile
        bootstrap excludes 0 while the exact sign-flip p cannot fall below 2 / 2^k for k
        differing items (0.125 at k = 4)."""
        if not self.p_value < alpha:
            return "no detectable difference"
        if self.lo > 0:
            return "higher"
        if self.hi < 0:
            return "lower"
        return "no detectable difference"


# ---------------------------------------------------------------- input checks


def _as_values(values: Sequence[float] | np.ndarray, name: str = "values") -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D sequence, got shape {arr.shape}")
    if np.isnan(arr).any():
        raise ValueError(f"{name}: {int(np.isnan(arr).sum())} NaN value(s); drop abstentions "
                         "before computing statistics")
    return arr


def _check_level(level: float) -> None:
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")


def _cluster_codes(clusters: Sequence[Hashable], n: int) -> np.ndarray:
    """Integer code per item (0..G-1, in order of first appearance)."""
    if len(clusters) != n:
        raise ValueError(f"clusters: {len(clusters)} labels for {n} values")
    codes: dict[Hashable, int] = {}
    return np.array([codes.setdefault(c, len(codes)) for c in clusters], dtype=int)


# ---------------------------------------------------------------- intervals


def mean_ci(values: Sequence[float] | np.ndarray, level: float = 0.95) -> Interval:
    """Mean with a Student-t interval (mean ± t_{n−1} · sd/√n); fewer than 2 values give
    NaN bounds. Treats items as independent: for clustered items use ``bootstrap_ci``."""
    _check_level(level)
    x = _as_values(values)
    n = len(x)
    est = float(x.mean()) if n else _NAN
    if n < 2:
        return Interval(est, _NAN, _NAN, n, "t")
    sem = float(st.sem(x))
    lo, hi = st.t.interval(level, n - 1, loc=est, scale=sem) if sem else (est, est)
    return Interval(est, float(lo), float(hi), n, "t")


def _percentile_bounds(boots: np.ndarray, level: float) -> tuple[float, float]:
    """Percentile interval of the resampled statistics, NaN resamples dropped (scipy's own
    interval is NaN as soon as one resample's statistic is, e.g. a κ resample where both
    graders gave one label; it also reads the level as (1 − level)/2, one ulp off)."""
    if np.isnan(boots).all():
        return _NAN, _NAN
    lo, hi = np.nanquantile(boots, [0.5 - level / 2, 0.5 + level / 2])
    return float(lo), float(hi)


def _resampled(data: tuple[np.ndarray, ...], stat: Callable[..., float], n_boot: int,
               seed: int, codes: np.ndarray | None = None) -> np.ndarray:
    """``stat(*data)`` over ``n_boot`` resamples: items drawn with replacement (all arrays
    of ``data`` by the same indices; ``scipy.stats.bootstrap``), or (``codes`` given) whole
    clusters drawn with replacement."""
    if n_boot < 1:
        raise ValueError(f"n_boot must be ≥ 1, got {n_boot}")
    if codes is None and len(data[0]) < 2:      # scipy wants 2 items; 1 resamples to itself
        return np.full(n_boot, stat(*data), dtype=float)
    if codes is None:
        with warnings.catch_warnings():         # NaN resamples: dropped by _percentile_bounds
            warnings.simplefilter("ignore", st.DegenerateDataWarning)
            return st.bootstrap(data, stat, n_resamples=n_boot, batch=250, paired=True,
                                method="percentile", rng=np.random.default_rng(seed)
                                ).bootstrap_distribution
    rng = np.random.default_rng(seed)
    members = [np.flatnonzero(codes == g) for g in range(int(codes.max()) + 1)]
    out = np.empty(n_boot)
    for i in range(n_boot):
        idx = np.concatenate([members[g] for g in rng.integers(0, len(members), len(members))])
        out[i] = stat(*(a[idx] for a in data))
    return out


def bootstrap_ci(values: Sequence[float] | np.ndarray, stat: Stat = np.mean,
                 n_boot: int = 2000, level: float = 0.95, seed: int = 0,
                 clusters: Sequence[Hashable] | None = None) -> Interval:
    """``stat(values)`` with a seeded percentile bootstrap interval. With ``clusters`` (one
    label per value) whole clusters are resampled, which keeps the within-cluster
    correlation that an item bootstrap would ignore. No values: NaN interval."""
    _check_level(level)
    x = _as_values(values)
    n = len(x)
    method = "percentile bootstrap" if clusters is None else "cluster percentile bootstrap"
    if n == 0:
        return Interval(_NAN, _NAN, _NAN, 0, method)
    codes = None if clusters is None else _cluster_codes(clusters, n)
    boots = _resampled((x,), stat, n_boot, seed, codes)
    return Interval(float(stat(x)), *_percentile_bounds(boots, level), n, method)


def proportion_ci(successes: int, n: int, level: float = 0.95) -> Interval:
    """Proportion ``successes / n`` with the Wilson score interval (scipy's
    ``binomtest(...).proportion_ci(method="wilson")``), which stays inside [0, 1] and keeps
    its coverage near 0 and 1 where the Wald interval fails. No trials: NaN interval."""
    _check_level(level)
    if n < 0 or not 0 <= successes <= max(n, 0):
        raise ValueError(f"need 0 ≤ successes ≤ n, got successes={successes}, n={n}")
    if n == 0:
        return Interval(_NAN, _NAN, _NAN, 0, "wilson")
    ci = st.binomtest(successes, n).proportion_ci(confidence_level=level, method="wilson")
    return Interval(successes / n, float(ci.low), float(ci.high), n, "wilson")


def rule_of_three_upper(n: int) -> float:
    """Approximate 95 % upper bound on a rate after 0 events in ``n`` trials: 3/n (capped
    at 1; NaN for n ≤ 0)."""
    return min(1.0, 3 / n) if n > 0 else _NAN


# ---------------------------------------------------------------- paired comparison


def sign_flip_p_value(diffs: Sequence[float] | np.ndarray, n_perm: int = 10000, seed: int = 0,
                      *, max_exact: int = 16) -> float:
    """Two-sided paired randomisation test of mean(diffs) = 0: under the null each
    difference is as likely to carry either sign; p = share of sign vectors whose |sum|
    reaches the observed one. Exact over all 2^n sign vectors when n ≤ ``max_exact``
    (enumerated by ``scipy.stats.permutation_test``, ``permutation_type="samples"``; its
    null distribution is read with a tie tolerance of 1e-12 · Σ|d|, since scipy's, relative
    to the observed |sum|, drops ties when that sum is 0 up to rounding), else ``n_perm``
    seeded random flips with the +1 correction ((1 + hits) / (1 + n_perm)), which never
    reports p = 0: these draws stay ours, since scipy's differ and the committed tables'
    p-values (all on > 16 units) would move by Monte-Carlo error. All-zero diffs or a
    single one: 1.0; none: NaN."""
    d = _as_values(diffs, "diffs")
    n = len(d)
    if n == 0:
        return _NAN
    if n == 1 or not d.any():        # one difference: both signs reach it
        return 1.0
    observed = abs(d.sum())
    tol = 1e-12 * np.abs(d).sum()    # ties must count as "as extreme" despite rounding
    if n <= max_exact:               # scipy's own p misses ties when the sum is 0 ± rounding
        null = st.permutation_test((d,), _abs_total, permutation_type="samples",
                                   vectorized=True, n_resamples=np.inf,
                                   alternative="greater").null_distribution
        return float(np.mean(null >= observed - tol))
    rng = np.random.default_rng(seed)
    hits, left = 0, n_perm
    while left:                      # chunks keep memory at ~1000 × n
        chunk = min(left, 1000)
        signs = rng.integers(0, 2, size=(chunk, n)) * 2 - 1
        hits += int(np.sum(np.abs(signs @ d) >= observed - tol))
        left -= chunk
    return (1 + hits) / (1 + n_perm)


def _abs_total(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.abs(np.sum(x, axis=axis))


def minimum_detectable_difference(sd: float, n: int, alpha: float = 0.05, power: float = 0.8,
                                  paired: bool = True) -> float:
    """Smallest true difference a two-sided test at ``alpha`` detects with ``power``:
    (z_{1−α/2} + z_{power}) · sd / √n. ``paired``: ``sd`` is that of the n per-item
    differences (a one-sample test); otherwise two independent groups of n each with a
    common ``sd``, which multiplies by √2. Normal approximation (no t correction), so it
    is slightly optimistic for small n. n < 2 or NaN sd: NaN."""
    if not (0 < alpha < 1 and 0 < power < 1):
        raise ValueError(f"alpha and power must be in (0, 1), got {alpha}, {power}")
    if n < 2 or math.isnan(sd):
        return _NAN
    z = float(st.norm.ppf(1 - alpha / 2) + st.norm.ppf(power))
    return z * sd / math.sqrt(n) * (1.0 if paired else math.sqrt(2))


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson r; NaN for fewer than 2 items or a constant side."""
    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return _NAN
    return float(st.pearsonr(a, b).statistic)


def _clustered_sd(d: np.ndarray, codes: np.ndarray) -> float:
    """The sd that makes sd/√n equal the cluster-robust standard error of mean(d):
    SE² = G/(G−1) · Σ_g (T_g − m_g · d̄)² / n², T_g the cluster's sum, m_g its size."""
    g = int(codes.max()) + 1
    if g < 2:
        return _NAN
    resid = np.bincount(codes, weights=d - d.mean(), minlength=g)
    se = math.sqrt(g / (g - 1) * float(np.sum(resid**2))) / len(d)
    return se * math.sqrt(len(d))


def paired_difference(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray,
                      n_boot: int = 2000, level: float = 0.95, seed: int = 0,
                      clusters: Sequence[Hashable] | None = None) -> PairedComparison:
    """Compare A and B scored on the same items (``a[i]``, ``b[i]`` = item i).

    ``diff`` = mean(a − b) with a seeded bootstrap interval; p from ``sign_flip_p_value``;
    ``mde`` from ``minimum_detectable_difference`` on the differences' sd. With
    ``clusters`` the interval resamples clusters, the sign flips act on cluster totals, and
    the mde uses the cluster-robust sd (so none of them pretends the items are independent).
    """
    x, y = _as_values(a, "a"), _as_values(b, "b")
    if len(x) != len(y):
        raise ValueError(f"a and b must be paired: {len(x)} vs {len(y)} values")
    d, n = x - y, len(x)
    if n == 0:
        return PairedComparison(_NAN, _NAN, _NAN, _NAN, 0, _NAN, _NAN)
    iv = bootstrap_ci(d, np.mean, n_boot=n_boot, level=level, seed=seed, clusters=clusters)
    if clusters is None:
        p = sign_flip_p_value(d, seed=seed)
        sd = float(d.std(ddof=1)) if n > 1 else _NAN
    else:
        codes = _cluster_codes(clusters, n)
        p = sign_flip_p_value(np.bincount(codes, weights=d), seed=seed)
        sd = _clustered_sd(d, codes)
    return PairedComparison(iv.estimate, iv.lo, iv.hi, p, n,
                            minimum_detectable_difference(sd, n), _pearson(x, y))


def shown_mde(cmp: PairedComparison) -> float:
    """A comparison's minimum detectable difference as a table shows it: NaN ("not
    estimable") where the paired differences do not vary at all (every item scored the
    same difference, often 0 on both sides), since the formula's 0 would read as "any
    difference would have been seen" on as few as 3 items."""
    return float("nan") if cmp.mde == 0 else cmp.mde


# ---------------------------------------------------------------- agreement


def _label_codes(a: Sequence[Hashable], b: Sequence[Hashable]) -> tuple[np.ndarray, np.ndarray]:
    if len(a) != len(b):
        raise ValueError(f"two graders must label the same items: {len(a)} vs {len(b)} labels")
    if not len(a):
        raise ValueError("no labels to compare")
    codes: dict[Hashable, int] = {}
    ca = np.array([codes.setdefault(v, len(codes)) for v in a])
    cb = np.array([codes.setdefault(v, len(codes)) for v in b])
    return ca, cb


def _kappa_of_codes(ca: np.ndarray, cb: np.ndarray) -> float:
    """κ of coded labels for each bootstrap resample: equal to scikit-learn's within 1e-12
    (tested), 200 times faster (no input checks)."""
    k = int(max(ca.max(), cb.max())) + 1
    observed = float(np.mean(ca == cb))
    chance = float(np.bincount(ca, minlength=k) @ np.bincount(cb, minlength=k)) / len(ca) ** 2
    return _NAN if chance >= 1 else (observed - chance) / (1 - chance)


def cohen_kappa(a: Sequence[Hashable], b: Sequence[Hashable]) -> float:
    """Cohen's κ between two graders' labels on the same items (binary or categorical):
    (p_observed − p_chance) / (1 − p_chance). NaN when chance agreement is 1 (both graders
    gave one and the same label throughout). Empty or unequal lists: ValueError. Labels
    are compared as Python values (``True == 1``), then scikit-learn computes κ."""
    with warnings.catch_warnings():          # one label throughout: κ NaN, as documented
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        warnings.filterwarnings("ignore", "A single label was found", UserWarning)
        return float(cohen_kappa_score(*_label_codes(a, b)))


def kappa_ci(a: Sequence[Hashable], b: Sequence[Hashable], n_boot: int = 2000,
             level: float = 0.95, seed: int = 0,
             clusters: Sequence[Hashable] | None = None) -> Interval:
    """κ with a seeded percentile bootstrap over items (or over ``clusters``). Resamples
    whose κ is undefined are dropped; if all are, the interval is NaN."""
    _check_level(level)
    ca, cb = _label_codes(a, b)
    codes = None if clusters is None else _cluster_codes(clusters, len(ca))
    boots = _resampled((ca, cb), _kappa_of_codes, n_boot, seed, codes)
    return Interval(cohen_kappa(a, b), *_percentile_bounds(boots, level), len(ca),
                    "percentile bootstrap" if clusters is None else "cluster percentile bootstrap")


# ---------------------------------------------------------------- display


def format_interval(iv: Interval | PairedComparison | Sequence[float], digits: int = 1) -> str:
    """Estimate and interval as text, e.g. ``12.3 [4.5, 20.1]``; ``n/a`` when the estimate
    is NaN, ``12.3 [n/a]`` when only the bounds are. Takes an ``Interval``, a
    ``PairedComparison`` or (estimate, lo, hi)."""
    if isinstance(iv, Interval):
        est, lo, hi = iv.estimate, iv.lo, iv.hi
    elif isinstance(iv, PairedComparison):
        est, lo, hi = iv.diff, iv.lo, iv.hi
    else:
        est, lo, hi = iv
    if math.isnan(est):
        return "n/a"
    if math.isnan(lo) or math.isnan(hi):
        return f"{est:.{digits}f} [n/a]"
    return f"{est:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"
