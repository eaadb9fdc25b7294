"""Elo, Bradley–Terry and the judge's verdict parser (stage 06)."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from medpref.contracts import PairwiseJudgement
from medpref.medqa.judging import BattleSlot, VerdictError, battle_plan, parse_verdict, winner_of
from medpref.medqa.ratings import (
    Battle,
    battles_from_judgements,
    bootstrap_draws,
    bootstrap_intervals,
    bradley_terry,
    elo_ratings,
    elo_shuffled,
    expected_score,
    models_of,
    rating_table,
)

_PJ_IDS = itertools.count(1)


def pj(item, a, b, winner, order=None):
    return PairwiseJudgement(id=f"b-{next(_PJ_IDS)}", item=item, model_a=a, model_b=b,
                             winner=winner, order=order)


def test_expected_score_formula():
    assert expected_score(1000, 1000) == 0.5
    assert expected_score(1400, 1000) == pytest.approx(1 / (1 + 10 ** -1))   # 0.90909
    assert expected_score(1000, 1400) + expected_score(1400, 1000) == pytest.approx(1.0)


def test_elo_hand_computed_sequence():
    # K = 32, everyone starts at 1000.
    # 1) A beats B: E_A = 0.5 → A = 1016, B = 984.
    # 2) B beats C: E_B = 1/(1+10^(16/400)) = 0.476990 → +32·0.523010 = 16.7363:
    #    B = 1000.7363, C = 983.2637.
    # 3) A ties C: E_A = 1/(1+10^((983.2637−1016)/400)) = 0.546972 → 32·(0.5−0.546972)
    #    = −1.5031: A = 1014.4969, C = 984.7668.
    battles = [Battle("i1", "A", "B", 1.0, 1), Battle("i2", "B", "C", 1.0, 1),
               Battle("i3", "A", "C", 0.5, 1)]
    r = elo_ratings(battles, k=32, initial=1000)
    assert r["A"] == pytest.approx(1014.4969, abs=1e-3)
    assert r["B"] == pytest.approx(1000.7363, abs=1e-3)
    assert r["C"] == pytest.approx(984.7668, abs=1e-3)
    assert sum(r.values()) == pytest.approx(3000)        # Elo is zero-sum


def test_elo_depends_on_order_and_shuffling_averages_it():
    battles = [Battle("i1", "A", "B", 1.0, 1), Battle("i2", "A", "B", 0.0, 1)]
    forward = elo_ratings(battles, 32, 1000)
    backward = elo_ratings(battles[::-1], 32, 1000)
    assert forward["A"] != pytest.approx(backward["A"])
    # with both orders only, the mean is exactly the mean of the two sequences
    mean = elo_shuffled(battles, 32, 1000, n_shuffles=400, seed=1)
    assert forward["A"] < 1000 < backward["A"]
    assert mean["A"] == pytest.approx((forward["A"] + backward["A"]) / 2, abs=0.3)


def test_battles_average_both_orders():
    js = [pj("m1", "x", "y", "model_a", "ab"), pj("m1", "x", "y", "model_b", "ba"),
          pj("m2", "y", "x", "model_a", "ab")]       # y beats x, recorded y-first
    battles = battles_from_judgements(js, "battle")
    assert battles == [Battle("m1", "x", "y", 0.5, 2), Battle("m2", "x", "y", 0.0, 1)]
    # the default: one verdict = one game
    assert battles_from_judgements(js) == [Battle("m1", "x", "y", 1.0, 1),
                                           Battle("m1", "x", "y", 0.0, 1),
                                           Battle("m2", "x", "y", 0.0, 1)]
    with pytest.raises(ValueError, match="itself"):
        battles_from_judgements([pj("m1", "x", "x", "tie")])


def _tournament(split_ties: bool) -> list[PairwiseJudgement]:
    """Three models; in items m3 and m5 the judge 'ties' x and z, recorded two ways."""
    js = []
    for item, (a, b, w) in {"m1": ("x", "y", "model_a"), "m2": ("y", "z", "model_a"),
                            "m4": ("x", "y", "model_b"), "m6": ("y", "z", "model_b")}.items():
        js += [pj(item, a, b, w, "ab"), pj(item, a, b, w, "ba")]
    for item in ("m3", "m5"):
        if split_ties:   # x wins when shown first, z wins when shown first: a split
            js += [pj(item, "x", "z", "model_a", "ab"), pj(item, "x", "z", "model_b", "ba")]
        else:            # a tie in both orders
            js += [pj(item, "x", "z", "tie", "ab"), pj(item, "x", "z", "tie", "ba")]
    return js


def test_ratings_invariant_to_ties_being_split():
    """A tie in both orders and a split (each model wins in one order) rate the same.

    Exactly: identical Elo for every shuffle, identical bootstrap CIs for one seed,
    identical Bradley–Terry — and a tie recorded once (no order) rates the same too.
    """
    kw = dict(k=32, initial=1000, n_shuffles=200, n_boot=200, ci=0.9, prior_ties=0.5, seed=7)
    tied = rating_table(battles_from_judgements(_tournament(False), "battle"), **kw)
    split = rating_table(battles_from_judgements(_tournament(True), "battle"), **kw)
    assert tied.equals(split)
    once = [j for j in _tournament(False) if not (j.item in ("m3", "m5") and j.order == "ba")]
    once = [j.model_copy(update={"order": None}) for j in once]
    once_table = rating_table(battles_from_judgements(once, "battle"), **kw)
    assert once_table[["model", "elo", "bt"]].equals(tied[["model", "elo", "bt"]])


def test_per_verdict_elo_would_not_be_invariant():
    """Why verdicts are averaged per battle: rated one by one, a split ≠ two ties."""
    two_ties = [Battle("m", "x", "z", 0.5, 1)] * 2
    split = [Battle("m", "x", "z", 1.0, 1), Battle("m", "x", "z", 0.0, 1)]
    assert elo_ratings(two_ties, 32, 1000)["x"] == 1000
    # win at 1000 vs 1000 → 1016; then a loss at 1016 vs 984 costs
    # 32·E(1016, 984) = 17.470 → 998.530
    after_split = elo_ratings(split, 32, 1000)["x"]
    assert after_split == pytest.approx(1016 - 32 * expected_score(1016, 984))
    assert after_split == pytest.approx(998.530, abs=1e-3)


def test_elo_of_repeated_verdicts_one_verdict_is_one_game():
    """The same verdict twice (one item, one pair, e.g. both orders agreeing) is two games.

    K = 32, start 1000. Game 1: E = 0.5 → x = 1016, y = 984. Game 2: E_x =
    1/(1 + 10^((984 − 1016)/400)) = 0.545922 → +32·0.454078 = 14.5305 → x = 1030.5305.
    Merged into one battle (the old default) x gets only 1016.
    """
    js = [pj("m1", "x", "y", "model_a", "ab"), pj("m1", "y", "x", "model_b", "ba")]
    kw = dict(k=32, initial=1000, n_shuffles=10, n_boot=20, ci=0.9, prior_ties=0.5, seed=1)
    per_verdict = rating_table(battles_from_judgements(js, "verdict"), **kw).set_index("model")
    assert per_verdict.loc["x", "elo"] == pytest.approx(1030.5305, abs=1e-3)
    assert per_verdict.loc["y", "elo"] == pytest.approx(969.4695, abs=1e-3)
    assert per_verdict.loc["x", "battles"] == 2
    merged = rating_table(battles_from_judgements(js, "battle"), **kw).set_index("model")
    assert merged.loc["x", "elo"] == pytest.approx(1016.0)
    with pytest.raises(ValueError, match="game unit"):
        battles_from_judgements(js, "match")


def test_elo_scale_and_base_and_the_bootstrap_median():
    from medpref.medqa.ratings import EloScale

    # base e, scale 1: E(1, 0) = 1 / (1 + e^-1) = 0.731059
    assert expected_score(1, 0, EloScale(1.0, 2.718281828459045)) == pytest.approx(0.731059,
                                                                                  abs=1e-6)
    one = [Battle("i", "a", "b", 1.0, 1)]
    assert elo_ratings(one, 32, 1000, scale=EloScale(200, 10))["a"] == 1016
    # every replicate of one identical game gives a = 1016: the median is exactly that
    table = rating_table(one * 3, k=32, initial=1000, n_shuffles=5, n_boot=50, ci=0.9,
                         prior_ties=0.5, seed=0, point="bootstrap_median")
    games = elo_ratings(one * 3, 32, 1000)["a"]
    assert table.set_index("model").loc["a", "elo"] == pytest.approx(games)
    with pytest.raises(ValueError, match="point estimate"):
        rating_table(one, k=32, initial=1000, n_shuffles=5, n_boot=10, ci=0.9,
                     prior_ties=0.5, seed=0, point="mode")


def test_bradley_terry_recovers_a_synthetic_order():
    strengths = {"m1": 0.0, "m2": 150.0, "m3": 300.0, "m4": 450.0}    # Elo-scale truth
    rng = random.Random(3)
    battles = []
    names = list(strengths)
    for n in range(1200):
        a, b = rng.sample(names, 2)
        p_a = expected_score(strengths[a], strengths[b])
        u = rng.random()
        battles.append(Battle(f"i{n}", a, b, 1.0 if u < p_a * 0.9 else
                              0.5 if u < p_a * 0.9 + 0.1 else 0.0, 1))
    bt = bradley_terry(battles, initial=1000, prior_ties=0.5)
    assert sorted(bt, key=bt.get) == names
    assert sum(bt.values()) / 4 == pytest.approx(1000)
    # gaps are on the Elo scale: m4 − m1 close to the true 450
    assert bt["m4"] - bt["m1"] == pytest.approx(450, abs=90)
    elo = elo_shuffled(battles, 16, 1000, 20, seed=0)
    assert sorted(elo, key=elo.get) == names


def test_bradley_terry_needs_a_prior_for_a_perfect_record():
    battles = [Battle("i", "a", "b", 1.0, 1)] * 3
    with pytest.raises(ValueError, match="bt_prior_ties"):
        bradley_terry(battles, 1000, prior_ties=0.0)
    bt = bradley_terry(battles, 1000, prior_ties=0.5)
    # 3.25 : 0.25 wins → p_a/p_b = 13, half of 400·log10(13) each side of 1000
    assert bt["a"] == pytest.approx(1000 + 200 * 1.1139434, abs=1e-3)


def test_bootstrap_interval_brackets_the_estimate():
    battles = [Battle(f"i{n}", "a", "b", 1.0 if n % 4 else 0.0, 1) for n in range(40)]
    ci = bootstrap_intervals(battles, lambda s: bradley_terry(s, 1000, 0.5, ["a", "b"]),
                             ["a", "b"], n_boot=300, seed=0, ci=0.9)
    point = bradley_terry(battles, 1000, 0.5)
    assert ci["a"][0] < point["a"] < ci["a"][1]
    assert ci["b"][1] < 1000 < ci["a"][0]


@pytest.mark.parametrize("text, verdict", [
    ("1", "1"), (" 2", "2"), ("tie", "tie"), ("Tie.", "tie"), ("Answer 2 is better", "2"),
    ("**1**", "1"), ("TIE", "tie"), ("2\nbecause", "2"),
])
def test_parse_verdict(text, verdict):
    assert parse_verdict(text) == verdict


@pytest.mark.parametrize("text", ["", "3", "12", "both", "The first", "Answer three",
                                  "tied up"])
def test_unparsable_verdicts(text):
    with pytest.raises(VerdictError):
        parse_verdict(text)


def test_battle_plan_and_winner_mapping():
    plan = battle_plan(["p", "q", "r"], ["m1"])
    assert [(s.model_a, s.model_b, s.order) for s in plan] == [
        ("p", "q", "ab"), ("p", "q", "ba"), ("p", "r", "ab"), ("p", "r", "ba"),
        ("q", "r", "ab"), ("q", "r", "ba")]
    ab, ba = BattleSlot("m1", "p", "q", "ab"), BattleSlot("m1", "p", "q", "ba")
    assert ba.shown == ("q", "p")
    assert (winner_of(ab, "1"), winner_of(ab, "2")) == ("model_a", "model_b")
    assert (winner_of(ba, "1"), winner_of(ba, "2")) == ("model_b", "model_a")
    assert winner_of(ba, "tie") == "tie"


def _mixed_battles() -> list[Battle]:
    rng = random.Random(3)
    models = ["m1", "m2", "m3", "m4"]
    battles = []
    for i in range(30):
        a, b = rng.sample(models, 2)
        battles.append(Battle(f"q{i}", a, b, rng.choice([0.0, 0.5, 1.0, 1.0]), 1))
    return battles


def test_rating_table_intervals_pinned_to_the_home_made_bootstrap():
    """Values of 06c7d04's own resampling loop, pinned: scipy.stats.bootstrap draws the same
    games (the same ``integers`` stream), so the intervals are equal (1e-9: float print)."""
    table = rating_table(_mixed_battles(), k=4, initial=1000, n_shuffles=20, n_boot=200,
                         ci=0.95, prior_ties=0.5, seed=0).set_index("model")
    pinned = {  # elo_low, elo_high, bt_low, bt_high
        "m4": (993.8561075268148, 1022.3795459653783, 956.1257354596007, 1183.1615529686958),
        "m2": (990.2428011762474, 1010.998359485056, 891.5919811116117, 1117.9415735093994),
        "m3": (985.2194151340058, 1012.8023831512954, 908.0580344009154, 1131.6865748655669),
        "m1": (982.6203436327726, 1005.7630181014256, 732.0820218603469, 1094.0969619186912)}
    for model, bounds in pinned.items():
        got = tuple(table.loc[model, ["elo_low", "elo_high", "bt_low", "bt_high"]])
        assert got == pytest.approx(bounds, abs=1e-9)
    assert table.loc["m4", "elo"] == pytest.approx(1005.7375681044839, abs=1e-9)


def test_bootstrap_draws_are_the_games_of_the_seeded_integer_stream():
    battles = _mixed_battles()
    models = models_of(battles)

    def rate(sample):
        return bradley_terry(sample, 1000, 0.5, models)

    rng = np.random.default_rng(4)
    by_hand = [rate([battles[i] for i in rng.integers(0, len(battles), len(battles))])
               for _ in range(50)]
    draws = bootstrap_draws(battles, rate, models, n_boot=50, seed=4)
    assert np.array_equal(draws, [[r[m] for m in models] for r in by_hand])
    one = bootstrap_draws(battles[:1], rate, models_of(battles[:1]), n_boot=5, seed=0)
    assert one.shape == (5, 2) and (one == one[0]).all()
