"""``medpref.metrics.intervals`` pinned to its outputs before its internals moved to
scipy.stats and scikit-learn (values printed by the home-made code of 06c7d04 on the fixed
inputs below; the Wilson edges and ``rem.independent``'s κ by that of c6229b3, before
those two moved), and checked against the library functions themselves.

Tolerances, one per kind of result:

- ``EXACT`` (1e-12, absolute): deterministic results (Wilson, κ, the exact sign-flip p, the
  t interval) and the item bootstrap, whose resamples scipy.stats.bootstrap draws with the
  same ``np.random.default_rng(seed).integers`` calls as the old loop did (its bootstrap
  distribution is bit-identical; see ``test_scipy_bootstrap_draws_the_old_resamples``).
- ``WILSON_ULP`` (1e-15): scipy's Wilson bounds against the closed form they replaced,
  which did the same arithmetic in another order (a few units in the last place; the
  largest, on every k ≤ n ≤ 300 at three levels, 4.4e-16). scipy's are exactly 0 at k = 0
  and 1 at k = n, where the closed form could land 1 ulp inside.
- ``mc_tolerance(p, n_perm)``: two Monte-Carlo p-values of the same test drawn with
  different random sign vectors (ours: seeded integer signs; scipy: its own draws) differ
  by less than 4.5 standard errors of their difference, sqrt(2 p (1 − p) / n_perm), plus
  the 1 / (n_perm + 1) step of the estimate.
"""

import math
import warnings

import numpy as np
import pytest
from scipy import stats as st

from medpref.metrics import intervals as iv

EXACT = 1e-12
WILSON_ULP = 1e-15


def mc_tolerance(p: float, n_perm: int, draws: int = 2) -> float:
    """4.5 standard errors of the difference of ``draws`` Monte-Carlo estimates (2: two
    estimates; 1: one estimate against the exact p) plus the estimate's step."""
    return 4.5 * math.sqrt(draws * p * (1 - p) / n_perm) + 1 / (n_perm + 1)


def _abs_sum(x, axis=-1):
    return np.abs(np.sum(x, axis=axis))


# ---------------------------------------------------------------- fixed inputs

X37 = np.random.default_rng(21).normal(50, 10, 37)
BIN68 = (np.random.default_rng(22).random(68) < 0.3).astype(float)
CLUSTERS37 = np.repeat(np.arange(12), 3)[:37].tolist() + [12]
D8 = [3.0, -1.0, 2.0, 0.0, 5.0, 1.0, -2.0, 4.0]
D16 = np.random.default_rng(23).normal(0.3, 1, 16).tolist()
D_THIRDS = [1 / 3, -1 / 3, 2 / 3, 0.1, 0.2, -0.3, 1 / 3, 2 / 3, -2 / 3, 0.5, 1 / 6, -1 / 6]
D17 = np.random.default_rng(24).normal(0.4, 1, 17).tolist()
D40 = np.random.default_rng(30).normal(0.15, 1, 40).tolist()
A40 = np.random.default_rng(26).normal(5, 1, 40)
B40 = A40 - 0.2 + np.random.default_rng(27).normal(0, 0.8, 40)
KA = np.random.default_rng(28).integers(0, 2, 60)
KB = np.where(np.random.default_rng(29).random(60) < 0.8, KA, 1 - KA)


# ---------------------------------------------------------------- pins: proportions


@pytest.mark.parametrize(("k", "n", "level", "lo", "hi"), [
    (8, 10, 0.95, 0.49016247153664183, 0.9433178485456247),
    (0, 10, 0.95, 0.0, 0.2775327998628892),
    (10, 10, 0.95, 0.7224672001371107, 0.9999999999999999),
    (3, 7, 0.9, 0.18644319036395607, 0.7105229089864071),
    (1, 250, 0.99, 0.00046979618626424163, 0.03317682286432224),
    (123, 456, 0.95, 0.23104962756216274, 0.3122712366796905),
    (17, 68, 0.95, 0.16235013970552148, 0.3643855285545139),      # question_share.csv
    (47, 68, 0.95, 0.5736318830649045, 0.7882761353244803),
])
def test_wilson_pins(k, n, level, lo, hi):
    w = iv.proportion_ci(k, n, level)
    assert (w.estimate, w.n, w.method) == (k / n, n, "wilson")
    assert w.lo == pytest.approx(lo, abs=EXACT) and w.hi == pytest.approx(hi, abs=EXACT)


@pytest.mark.parametrize(("k", "n", "level", "lo", "hi"), [
    (0, 3, 0.95, 5.551115123125783e-17, 0.5614970317550454),      # closed form: 1 ulp > 0
    (1, 1, 0.9, 0.2698659487840541, 0.9999999999999999),          # closed form: 1 ulp < 1
    (1, 3, 0.95, 0.06149194472039621, 0.7923403991979522),
    (29, 240, 0.95, 0.08546347834981291, 0.16814991093920253),
    (236, 236, 0.95, 0.9839833411638562, 1.0),
])
def test_wilson_edge_pins_of_the_closed_form(k, n, level, lo, hi):
    w = iv.proportion_ci(k, n, level)
    assert w.lo == pytest.approx(lo, abs=WILSON_ULP) and w.hi == pytest.approx(hi, abs=WILSON_ULP)
    assert (w.lo == 0.0) == (k == 0) and (w.hi == 1.0) == (k == n)


def _wilson_closed_form(k: int, n: int, level: float) -> tuple[float, float]:
    """The Wilson bounds as intervals.proportion_ci wrote them until c6229b3."""
    p, z = k / n, float(st.norm.ppf(0.5 + level / 2))
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def test_wilson_equals_the_closed_form_it_replaced():
    counts = [(k, n) for n in range(1, 31) for k in range(n + 1)]
    counts += [(k, n) for n in (68, 250, 1000) for k in range(0, n + 1, max(1, n // 25))]
    worst = 0.0
    for k, n in counts:
        for level in (0.9, 0.95, 0.99):
            w = iv.proportion_ci(k, n, level)
            lo, hi = _wilson_closed_form(k, n, level)
            worst = max(worst, abs(w.lo - lo), abs(w.hi - hi))
    assert worst <= WILSON_ULP


# ---------------------------------------------------------------- pins: κ


def test_kappa_pins():
    rng = np.random.default_rng(11)
    a = rng.integers(0, 3, 50)
    b = np.where(rng.random(50) < 0.7, a, rng.integers(0, 3, 50))
    assert iv.cohen_kappa(list(a), list(b)) == pytest.approx(0.7563946406820949, abs=EXACT)
    gold = [True] * 30 + [False] * 20
    pred = [True] * 25 + [False] * 5 + [True] * 3 + [False] * 17
    assert iv.cohen_kappa(gold, pred) == pytest.approx(0.6721311475409836, abs=EXACT)


def test_kappa_equals_sklearn_on_strings_bools_and_three_labels():
    from sklearn.metrics import cohen_kappa_score

    rng = np.random.default_rng(12)
    for n_labels, n in ((2, 8), (2, 60), (3, 45), (5, 200)):
        a = rng.integers(0, n_labels, n)
        b = np.where(rng.random(n) < 0.6, a, rng.integers(0, n_labels, n))
        names = np.array(["met", "not met", "partly", "n/a", "unsure"])
        for x, y in ((a, b), (names[a], names[b]), (a.astype(bool), b.astype(bool))):
            assert iv.cohen_kappa(list(x), list(y)) == pytest.approx(
                cohen_kappa_score(x, y), abs=EXACT)


@pytest.mark.parametrize(("seed", "clusters", "lo", "hi"), [
    (0, None, 0.3212633113590264, 0.7324414715719064),
    (0, np.repeat(np.arange(15), 4), 0.32463654412706555, 0.7333333333333334),
])
def test_kappa_ci_pins(seed, clusters, lo, hi):
    k = iv.kappa_ci(KA, KB, n_boot=2000, seed=seed, clusters=clusters)
    assert k.estimate == pytest.approx(0.5317725752508362, abs=EXACT)
    assert k.lo == pytest.approx(lo, abs=EXACT) and k.hi == pytest.approx(hi, abs=EXACT)


def test_kappa_ci_pin_with_undefined_resamples():
    # 7 items: a resample of only "1" for both graders has κ undefined and is dropped
    k = iv.kappa_ci([1, 1, 1, 1, 0, 0, 1], [1, 1, 1, 0, 0, 1, 1], n_boot=1000, seed=2)
    assert (k.lo, k.hi) == pytest.approx((-0.4, 1.0), abs=EXACT)


# ---------------------------------------------------------------- pins: bootstrap


@pytest.mark.parametrize(("values", "kwargs", "lo", "hi"), [
    (X37, {"n_boot": 2000, "seed": 0}, 48.37934834154, 54.88877321784248),
    (X37, {"n_boot": 500, "seed": 3, "level": 0.9}, 48.692178157044545, 54.63696590593828),
    (X37, {"n_boot": 1000, "seed": 1, "stat": np.median}, 48.374948149876104,
     56.28394264270331),
    (BIN68, {"n_boot": 2000, "seed": 0}, 0.14705882352941177, 0.3382352941176471),
    (X37, {"n_boot": 2000, "seed": 0, "clusters": CLUSTERS37}, 48.403935941054876,
     54.893266624001754),
])
def test_bootstrap_pins(values, kwargs, lo, hi):
    b = iv.bootstrap_ci(values, **kwargs)
    assert b.lo == pytest.approx(lo, abs=EXACT) and b.hi == pytest.approx(hi, abs=EXACT)


def test_bootstrap_of_one_value_is_that_value():
    one = iv.bootstrap_ci([4.5], n_boot=50)
    assert (one.estimate, one.lo, one.hi, one.n) == (4.5, 4.5, 4.5, 1)
    pair = iv.paired_difference([1.0], [0.0])
    assert (pair.diff, pair.lo, pair.hi, pair.p_value, pair.n) == (1.0, 1.0, 1.0, 1.0, 1)


@pytest.mark.parametrize("n", [2, 3, 8, 18, 37, 300])
def test_scipy_bootstrap_draws_the_old_resamples(n):
    """The old loop drew ``rng.integers(0, n, size=n)`` once per resample; scipy draws
    ``rng.integers(0, n, (n_resamples, n))`` at once, which is the same stream: the
    bootstrap distributions are equal bit for bit, and scipy's own percentile interval
    (level read as (1 − level)/2, a last-place difference) within ``EXACT``."""
    x = np.random.default_rng(n).normal(3, 1, n) / 7
    rng = np.random.default_rng(5)
    old = np.array([x[rng.integers(0, n, size=n)].mean() for _ in range(2000)])
    lib = st.bootstrap((x,), np.mean, n_resamples=2000, method="percentile",
                       rng=np.random.default_rng(5))
    assert np.array_equal(old, lib.bootstrap_distribution)
    ours = iv.bootstrap_ci(x, n_boot=2000, seed=5)
    assert (ours.lo, ours.hi) == tuple(np.quantile(old, [0.5 - 0.95 / 2, 0.5 + 0.95 / 2]))
    assert ours.lo == pytest.approx(lib.confidence_interval.low, abs=EXACT)
    assert ours.hi == pytest.approx(lib.confidence_interval.high, abs=EXACT)


# ---------------------------------------------------------------- pins: sign flips


@pytest.mark.parametrize(("diffs", "p"), [
    (D8, 0.171875),
    (D16, 0.2608642578125),
    (D_THIRDS, 0.32861328125),           # fractions: ties must survive rounding
    ([2.5], 1.0),                        # one difference: scipy wants two, both signs tie
])
def test_exact_sign_flip_pins_and_scipy(diffs, p):
    assert iv.sign_flip_p_value(diffs) == pytest.approx(p, abs=EXACT)
    if len(diffs) < 2:
        return
    lib = st.permutation_test((np.asarray(diffs),), _abs_sum, permutation_type="samples",
                              vectorized=True, n_resamples=np.inf, alternative="greater")
    assert lib.pvalue == pytest.approx(p, abs=EXACT)


@pytest.mark.parametrize("diffs", [
    [-0.5, -0.6, 0.5, 0.6, 0.4, -0.4],
    [-0.01, -0.05, -0.01, 0.05, 0.02, -0.03, 0.03],
    [3 / 7, -6 / 7, 1 / 7, -1 / 7, 6 / 7, -4 / 7, 6 / 7, -5 / 7],
    [0.0, -2.0, -1 / 3, -2.0, 5 / 3, 2.0, -5 / 3, 4 / 3, 1.0],
])
def test_exact_sign_flip_of_a_zero_sum_is_one_despite_rounding(diffs):
    """These sum to 0 exactly, to ±1e-16 in floats; every sign vector is as extreme. scipy's
    tie tolerance (100 ulp of the observed |sum|) is then ~1e-30 and its own p is below 1;
    the old code and ours, reading scipy's null distribution within 1e-12 · Σ|d|, say 1."""
    assert iv.sign_flip_p_value(diffs) == 1.0


@pytest.mark.parametrize(("diffs", "kwargs", "p"), [
    (D17, {}, 0.06509349065093491),
    (D40, {}, 0.11748825117488251),
    (D40, {"n_perm": 5000, "seed": 4}, 0.11257748450309939),
])
def test_monte_carlo_sign_flip_pins(diffs, kwargs, p):
    assert iv.sign_flip_p_value(diffs, **kwargs) == pytest.approx(p, abs=EXACT)


@pytest.mark.parametrize("diffs", [D17, D40])
def test_monte_carlo_sign_flip_within_mc_error_of_scipy(diffs):
    """scipy draws its random sign vectors differently (uniforms, argsorted per pair): the
    same test, other draws. Both within Monte-Carlo error of each other."""
    ours = iv.sign_flip_p_value(diffs, n_perm=10000, seed=0)
    lib = st.permutation_test((np.asarray(diffs),), _abs_sum, permutation_type="samples",
                              vectorized=True, n_resamples=10000, alternative="greater",
                              rng=np.random.default_rng(0)).pvalue
    assert abs(ours - lib) < mc_tolerance(lib, 10000)


def test_monte_carlo_sign_flip_within_mc_error_of_the_exact_p():
    d = np.random.default_rng(31).normal(0.2, 1, 14)
    exact = iv.sign_flip_p_value(d)
    mc = iv.sign_flip_p_value(d, n_perm=10000, seed=0, max_exact=0)
    assert abs(mc - exact) < mc_tolerance(exact, 10000, draws=1)


# ---------------------------------------------------------------- pins: paired comparison


@pytest.mark.parametrize(("clusters", "pinned"), [
    (None, (0.07478991150352164, 0.5548212682055018, 0.015898410158984102,
            0.34526039511525225)),
    (np.repeat(np.arange(10), 4), (0.0704070891332862, 0.5458745063450418, 0.037109375,
                                   0.35737662503216)),
    (np.repeat(np.arange(20), 2), (0.07788341779529122, 0.5356250035911051,
                                   0.015998400159984, 0.3217735509945374)),
])
def test_paired_difference_pins(clusters, pinned):
    c = iv.paired_difference(A40, B40, clusters=clusters)
    assert c.diff == pytest.approx(0.3086082813940726, abs=EXACT)
    assert c.correlation == pytest.approx(0.8353894012039275, abs=EXACT)
    assert (c.lo, c.hi, c.p_value, c.mde) == pytest.approx(pinned, abs=EXACT)
    assert c.correlation == pytest.approx(st.pearsonr(A40, B40).statistic, abs=EXACT)


# ---------------------------------------------------------------- pins: κ of rem.independent


def _rows_of_pairs() -> list[list[tuple[int, int]]]:
    import random

    rng = random.Random(3)
    return [[(rng.choice([0, 0, 1, 2]), rng.choice([0, 1, 2, 2]))
             for _ in range(rng.randint(0, 6))] for _ in range(40)]


@pytest.mark.parametrize(("pairs", "kappa"), [
    ([p for row in _rows_of_pairs() for p in row], 0.14024528730411087),
    ([(0, 0), (1, 1), (2, 2), (0, 1), (1, 0), (2, 0), (0, 0)], 0.3225806451612902),
    ([(0, 0), (0, 0), (1, 1), (0, 1), (1, 1), (1, 0)], 0.33333333333333326),
    ([(0, 1), (1, 0), (0, 1), (1, 0)], -1.0),
])
def test_independent_kappa_pins(pairs, kappa):
    from medpref.rem.independent import cohen_kappa, kappa_of_table

    assert cohen_kappa(pairs) == pytest.approx(kappa, abs=EXACT)
    table = np.zeros((3, 3))
    np.add.at(table, tuple(np.array(pairs).T), 1)
    assert kappa_of_table(table) == pytest.approx(kappa, abs=EXACT)   # the resamples' κ


def test_independent_kappa_interval_pin():
    from medpref.rem.independent import kappa_interval

    got = kappa_interval(_rows_of_pairs(), 200, 7)
    assert (got["n"], got["rows"]) == (113, 34)
    assert (got["agreement"], got["kappa"], got["lo"], got["hi"]) == pytest.approx(
        (0.40707964601769914, 0.14024528730411087, 0.01919176587425778, 0.24444405967750185),
        abs=EXACT)


# ---------------------------------------------------------------- the t interval


def test_t_interval_equals_scipy_t_interval():
    for n in (2, 5, 40):
        x = np.random.default_rng(n).normal(1, 2, n)
        for level in (0.9, 0.95):
            got = iv.mean_ci(x, level)
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                lo, hi = st.t.interval(level, df=n - 1, loc=x.mean(), scale=st.sem(x))
            assert (got.lo, got.hi) == pytest.approx((lo, hi), abs=EXACT)
