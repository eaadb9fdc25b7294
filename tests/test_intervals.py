"""The project's statistics against hand-worked values, scipy/sklearn and their own promises
(reproducible by seed, clusters widen intervals, degenerate inputs give NaN, not a crash)."""

import math

import numpy as np
import pytest
from scipy import stats as st

from medpref.metrics import intervals as iv


def _width(i) -> float:
    return i.hi - i.lo


# ---------------------------------------------------------------- proportions


def test_wilson_interval_of_8_of_10_matches_the_hand_value():
    # z = 1.95996, z² = 3.84146; denominator 1 + z²/n = 1.384146;
    # centre (0.8 + 0.192073) / 1.384146 = 0.716738;
    # half z·√(0.016 + 0.0096036) / 1.384146 = 0.226578 -> [0.49016, 0.94332]
    w = iv.proportion_ci(8, 10)
    assert (w.estimate, w.n, w.method) == (0.8, 10, "wilson")
    assert w.lo == pytest.approx(0.49016, abs=1e-4)
    assert w.hi == pytest.approx(0.94332, abs=1e-4)


def test_wilson_interval_at_zero_stays_inside_0_1_and_beats_rule_of_three():
    # 0/10: centre = half = 0.192073 / 1.384146 -> [0, 2 · 0.138767 = 0.277534]
    w = iv.proportion_ci(0, 10)
    assert w.lo == pytest.approx(0.0, abs=1e-12) and w.hi == pytest.approx(0.277534, abs=1e-5)
    assert iv.proportion_ci(10, 10).hi == pytest.approx(1.0)
    assert iv.rule_of_three_upper(100) == pytest.approx(0.03)
    assert iv.rule_of_three_upper(2) == 1.0                      # capped: a rate is ≤ 1
    assert math.isnan(iv.rule_of_three_upper(0))


def test_proportion_degenerate_and_invalid_inputs():
    empty = iv.proportion_ci(0, 0)
    assert empty.n == 0 and all(math.isnan(v) for v in (empty.estimate, empty.lo, empty.hi))
    for k, n in ((11, 10), (-1, 10)):
        with pytest.raises(ValueError, match="successes"):
            iv.proportion_ci(k, n)


# ---------------------------------------------------------------- means


def test_t_interval_matches_scipy_and_as_dict():
    x = [2.1, 3.4, 1.9, 5.0, 4.2]
    got = iv.mean_ci(x, level=0.9)
    lo, hi = st.t.interval(0.9, df=4, loc=np.mean(x), scale=st.sem(x))
    assert got.estimate == pytest.approx(3.32)
    assert (got.lo, got.hi) == pytest.approx((lo, hi))
    assert got.as_dict() == {"estimate": got.estimate, "lo": got.lo, "hi": got.hi, "n": 5}


def test_mean_ci_degenerate_inputs():
    one, none = iv.mean_ci([4.0]), iv.mean_ci([])
    assert one.estimate == 4.0 and math.isnan(one.lo) and math.isnan(one.hi)
    assert none.n == 0 and math.isnan(none.estimate)
    const = iv.mean_ci([2.0, 2.0, 2.0])
    assert (const.lo, const.estimate, const.hi) == (2.0, 2.0, 2.0)
    with pytest.raises(ValueError, match="NaN"):
        iv.mean_ci([1.0, float("nan")])
    with pytest.raises(ValueError, match="level"):
        iv.mean_ci([1.0, 2.0], level=95)


def test_bootstrap_covers_the_mean_is_seeded_and_agrees_with_t_on_means():
    x = np.random.default_rng(1).normal(10.0, 2.0, size=400)
    b = iv.bootstrap_ci(x, seed=3)
    assert b.lo < x.mean() < b.hi and b.estimate == pytest.approx(x.mean())
    assert iv.bootstrap_ci(x, seed=3) == b                       # same seed, same interval
    assert iv.bootstrap_ci(x, seed=4) != b
    t = iv.mean_ci(x)                                            # closed form on a mean
    assert abs(b.lo - t.lo) < 0.1 * _width(t) and abs(b.hi - t.hi) < 0.1 * _width(t)


def test_bootstrap_takes_any_statistic_and_handles_degenerate_inputs():
    med = iv.bootstrap_ci([1, 2, 3, 4, 100], stat=np.median, n_boot=500)
    assert med.estimate == 3.0 and med.lo <= 3.0 <= med.hi and med.hi <= 100
    empty = iv.bootstrap_ci([])
    assert empty.n == 0 and math.isnan(empty.estimate) and math.isnan(empty.lo)
    const = iv.bootstrap_ci([5.0] * 6, n_boot=200)
    assert (const.lo, const.hi) == (5.0, 5.0)
    with pytest.raises(ValueError, match="clusters"):
        iv.bootstrap_ci([1.0, 2.0], clusters=["a"])


def test_cluster_bootstrap_is_wider_than_naive_on_clustered_data():
    # 20 cases × 10 items; the case effect (sd 1) dwarfs the item noise (sd 0.1), so the
    # items carry about 20 independent pieces of information, not 200.
    rng = np.random.default_rng(0)
    case = np.repeat(np.arange(20), 10)
    x = rng.normal(0, 1, 20)[case] + rng.normal(0, 0.1, 200)
    naive = iv.bootstrap_ci(x, n_boot=1000)
    clustered = iv.bootstrap_ci(x, n_boot=1000, clusters=[f"case{c}" for c in case])
    assert clustered.method == "cluster percentile bootstrap"
    assert clustered.estimate == naive.estimate
    assert _width(clustered) > 2 * _width(naive)                 # ≈ √10 in theory


# ---------------------------------------------------------------- paired tests


@pytest.mark.parametrize(("diffs", "p"), [
    ([1, 2, 3], 2 / 8),            # only +++ and --- reach |6|
    ([1, -2, 3], 6 / 8),           # |±1±2±3| ≥ 2 except the two sums that are 0
    ([1, 1, 1, 1, 1], 2 / 32),
    ([0, 0, 0], 1.0),
    ([1, -1], 1.0),
])
def test_sign_flip_exact_p_values_by_hand(diffs, p):
    assert iv.sign_flip_p_value(diffs) == pytest.approx(p)


def test_sign_flip_monte_carlo_agrees_with_exact_and_never_reports_zero():
    d = np.random.default_rng(2).normal(0.4, 1.0, size=12)
    exact = iv.sign_flip_p_value(d)
    mc = iv.sign_flip_p_value(d, n_perm=20000, seed=1, max_exact=0)
    assert mc == pytest.approx(exact, abs=0.01)
    assert mc == iv.sign_flip_p_value(d, n_perm=20000, seed=1, max_exact=0)
    # 20 equal positive diffs: exact p = 2 / 2^20, but 10 000 draws can only say ≤ 1 / 10 001
    assert iv.sign_flip_p_value([1.0] * 20) == pytest.approx(1 / 10001)
    assert math.isnan(iv.sign_flip_p_value([]))


def test_minimum_detectable_difference_hand_value():
    # (1.959964 + 0.841621) · 1 / √16 = 0.700396
    assert iv.minimum_detectable_difference(1.0, 16) == pytest.approx(0.700396, abs=1e-5)
    assert iv.minimum_detectable_difference(1.0, 16, paired=False) == pytest.approx(
        0.700396 * math.sqrt(2), abs=1e-5)
    assert math.isnan(iv.minimum_detectable_difference(1.0, 1))
    assert math.isnan(iv.minimum_detectable_difference(float("nan"), 50))


def test_paired_difference_reads_noise_as_no_detectable_difference():
    a = np.random.default_rng(5).normal(5.0, 1.0, size=60)
    e = np.random.default_rng(6).normal(0.0, 0.5, size=30)
    b = a + np.concatenate([e, -e])                              # mean difference exactly 0
    c = iv.paired_difference(a, b, n_boot=1000)
    assert c.diff == pytest.approx(0.0, abs=1e-12) and c.lo < 0 < c.hi
    assert c.verdict() == "no detectable difference"
    assert c.p_value > 0.5 and c.n == 60 and c.correlation > 0.8
    d = a - b
    assert c.mde == pytest.approx(iv.minimum_detectable_difference(d.std(ddof=1), 60))


def test_an_interval_clear_of_zero_is_no_finding_while_the_paired_test_disagrees():
    """The committed SP test's shape: 17 cases, 4 differ, all one way. The percentile
    bootstrap never draws a negative mean, while the exact sign-flip p is 2 / 2^4."""
    b = np.zeros(17)
    a = b.copy()
    a[[7, 8, 10, 11]] = [100.0, 50.0, 100.0, 100.0]
    c = iv.paired_difference(a, b, n_boot=2000)
    assert c.lo > 0                                  # the interval alone would say "higher"
    assert c.p_value == pytest.approx(0.125, abs=0.01)
    assert c.verdict() == "no detectable difference"
    assert c.verdict(alpha=0.2) == "higher"


def test_paired_difference_detects_a_clear_shift_in_either_direction():
    rng = np.random.default_rng(7)
    b = rng.normal(5.0, 1.0, size=50)
    a = b + 0.5 + rng.normal(0, 0.3, size=50)
    up, down = iv.paired_difference(a, b, n_boot=1000), iv.paired_difference(b, a, n_boot=1000)
    assert up.verdict() == "higher" and up.lo > 0 and up.p_value < 0.001
    assert down.verdict() == "lower" and down.diff == pytest.approx(-up.diff)
    assert up.mde < up.diff


def test_clustered_paired_difference_is_more_cautious():
    # the difference is shared within each of 8 cases: 8 pieces of evidence, not 80
    rng = np.random.default_rng(8)
    case = np.repeat(np.arange(8), 10)
    b = rng.normal(0, 1, 80)
    a = b + rng.normal(0.3, 1.0, 8)[case] + rng.normal(0, 0.05, 80)
    naive = iv.paired_difference(a, b, n_boot=1000)
    clustered = iv.paired_difference(a, b, n_boot=1000, clusters=case)
    assert clustered.diff == pytest.approx(naive.diff)
    assert _width(clustered) > 2 * _width(naive)
    assert clustered.p_value > naive.p_value and clustered.mde > 2 * naive.mde


def test_paired_difference_degenerate_inputs():
    same = iv.paired_difference([3.0] * 5, [3.0] * 5, n_boot=100)
    assert (same.diff, same.lo, same.hi, same.p_value) == (0.0, 0.0, 0.0, 1.0)
    assert same.verdict() == "no detectable difference" and math.isnan(same.correlation)
    empty = iv.paired_difference([], [])
    assert empty.n == 0 and math.isnan(empty.diff) and math.isnan(empty.p_value)
    assert empty.verdict() == "no detectable difference"
    with pytest.raises(ValueError, match="paired"):
        iv.paired_difference([1.0, 2.0], [1.0])


# ---------------------------------------------------------------- agreement


def test_cohen_kappa_hand_value_and_undefined_cases():
    # a = 1110, b = 1100: p_o = 3/4; p_e = 3/4·1/2 + 1/4·1/2 = 1/2 -> κ = 0.25 / 0.5 = 0.5
    assert iv.cohen_kappa([1, 1, 1, 0], [1, 1, 0, 0]) == pytest.approx(0.5)
    assert iv.cohen_kappa(["met", "not met"], ["met", "not met"]) == 1.0
    assert math.isnan(iv.cohen_kappa([1, 1, 1], [1, 1, 1]))     # chance agreement is 1
    with pytest.raises(ValueError, match="no labels"):
        iv.cohen_kappa([], [])
    with pytest.raises(ValueError, match="same items"):
        iv.cohen_kappa([1, 0], [1])


def test_cohen_kappa_matches_sklearn():
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(9)
    a = rng.integers(0, 2, 40)
    b = np.where(rng.random(40) < 0.8, a, 1 - a)
    assert iv.cohen_kappa(list(a), list(b)) == pytest.approx(metrics.cohen_kappa_score(a, b))


def test_kappa_ci_contains_kappa_and_drops_undefined_resamples():
    rng = np.random.default_rng(10)
    a = rng.integers(0, 2, 60)
    b = np.where(rng.random(60) < 0.85, a, 1 - a)
    k = iv.kappa_ci(a, b, n_boot=1000)
    assert k.lo < k.estimate < k.hi and k.estimate == pytest.approx(iv.cohen_kappa(a, b))
    assert k == iv.kappa_ci(a, b, n_boot=1000)
    # grader b says 1 throughout: κ = 0 wherever defined; resamples without the one 0 of
    # grader a have chance agreement 1 (κ undefined) and are dropped, not averaged in
    few = iv.kappa_ci([1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1], n_boot=300)
    assert few.lo == pytest.approx(0.0, abs=1e-12) and few.hi == pytest.approx(0.0, abs=1e-12)
    none = iv.kappa_ci([0, 0, 0], [0, 0, 0], n_boot=50)
    assert math.isnan(none.estimate) and math.isnan(none.lo) and math.isnan(none.hi)


# ---------------------------------------------------------------- display


def test_format_interval():
    assert iv.format_interval((12.34, 4.46, 20.14)) == "12.3 [4.5, 20.1]"
    assert iv.format_interval(iv.Interval(0.5, 0.25, 0.75, 4, "t"), digits=2) == \
        "0.50 [0.25, 0.75]"
    assert iv.format_interval(iv.PairedComparison(1.0, -0.5, 2.5, 0.3, 10, 1.2, 0.4)) == \
        "1.0 [-0.5, 2.5]"
    assert iv.format_interval(iv.mean_ci([])) == "n/a"
    assert iv.format_interval(iv.mean_ci([4.0])) == "4.0 [n/a]"
