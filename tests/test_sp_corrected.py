"""Table 2 corrected for the grader's error (``medpref.simulation.corrected``) and the
blinded run pairs it is measured on (``medpref.simulation.runpairs``): the Rogan–Gladen
formula on a worked example, its interval covering the truth behind a simulated grader,
the validated share on both sides of its threshold, the read score (what a blind reader
found earned) on a worked example and on the committed run, and the labels' contract."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from medpref.contracts import ContractError, Turn
from medpref.simulation.consult import Consultation
from medpref.simulation.corrected import (
    NOT_VALIDATED,
    RunItem,
    corrected_scores,
    error_rates,
    hand_graded_run_items,
    read_per_case,
    read_table,
    rogan_gladen,
    validated_share,
    validation_reading,
)
from medpref.simulation.grading import ItemGrade
from medpref.simulation.runpairs import labelled_items, patient_before, sample_pairs


def test_rogan_gladen_on_a_worked_example():
    # observed 30 % with sensitivity 0.8 and specificity 0.9:
    # (0.30 + 0.90 - 1) / (0.80 + 0.90 - 1) = 0.20 / 0.70 = 0.2857...
    assert rogan_gladen(0.30, 0.8, 0.9, 0.05) == pytest.approx(2 / 7)
    # a grader that credits 10 % of unearned items explains an observed 5 %: clipped to 0
    assert rogan_gladen(0.05, 0.8, 0.9, 0.05) == 0.0
    assert rogan_gladen(0.99, 0.8, 0.99, 0.05) == 1.0
    # sens + spec - 1 = 0.02: the grader does not tell earned from unearned
    assert rogan_gladen(0.30, 0.50, 0.52, 0.05) is None
    assert rogan_gladen(0.30, float("nan"), 0.9, 0.05) is None


_ids = itertools.count()


def item(case, credited, gold, split="test", cat="symptoms", doctor="d"):
    return RunItem(case, doctor, cat, f"i{next(_ids)}", credited, gold,
                   None if gold is None else split)


def test_error_rates_count_uncovered_uncredited_items_as_fails_and_skip_uncovered_credits():
    items = [item("a", True, True), item("a", True, False), item("a", False, True),
             item("a", False, None), item("a", False, None), item("a", True, None),
             item("b", False, False), item("c", True, True, split="dev"),
             item("c", False, None)]         # case c is dev: none of its items count
    sens, spec, pos, neg = error_rates(items, "symptoms")
    # gold passes: a/TP, a/FN -> 1/2; gold fails: a/FP, 2 uncovered in a, b/TN -> 3/4
    assert (sens, spec, pos, neg) == (0.5, 0.75, 2, 4)
    assert validated_share(items) == (3, 4)


def consult(case, doctor, doctor_turns):
    turns = [Turn(role="patient", text="I have a cough.")]
    for t in doctor_turns:
        turns += [Turn(role="doctor", text=t), Turn(role="patient", text="Not sure.")]
    return Consultation(case, "dept", "en", doctor, "m", turns)


def test_a_credit_is_validated_only_by_an_item_holding_its_sentence_and_the_reading_flips():
    c = consult("sp-1", "sft", ["Any fever? How long?", "Do you smoke?"])
    credit = ItemGrade("sp-1", "sft", "symptoms", "fever", True, "echo_aware",
                       evidence_turn=1, evidence="Any fever?")
    miss = ItemGrade("sp-1", "sft", "symptoms", "smoking", False, "echo_aware")
    other = ItemGrade("sp-1", "sft", "symptoms", "weight loss", True, "echo_aware",
                      evidence_turn=3, evidence="Do you smoke?")
    verdict = {"case": "sp-1", "category": "symptoms", "item": "fever", "gold": True,
               "split": "test", "doctor_turns": ["Any fever? How long?"]}
    stale = {**verdict, "item": "weight loss", "doctor_turns": ["Any weight loss?"]}
    smoking = {**verdict, "item": "smoking", "gold": True, "doctor_turns": ["Do you smoke?"]}
    items = hand_graded_run_items([c], [credit, miss, other], [verdict, stale, smoking])
    got = {i.item: (i.credited, i.gold, i.split) for i in items}
    assert got == {"fever": (True, True, "test"), "smoking": (False, True, "test"),
                   "weight loss": (True, None, None)}
    assert validated_share(items) == (1, 2)
    # 1 of 2 credits hand-graded: validated at a threshold of one half, not above it
    assert not validation_reading(items, 0.5).startswith(NOT_VALIDATED)
    assert validation_reading(items, 0.6).startswith(NOT_VALIDATED)
    assert validation_reading([], 0.5).startswith(NOT_VALIDATED)
    # a control's consultation is never a run item
    ctl = Consultation("sp-1", "dept", "en", "control_script", "", c.turns, kind="control")
    assert hand_graded_run_items([ctl], [credit], [verdict]) == []


def simulated_run(rng, n_cases=40, per_case=10, truth=0.3, sens=0.5, spec=0.97):
    """One doctor graded by a grader of known error; the test half's items all labelled."""
    per_rows, items = [], []
    for k in range(n_cases):
        case = f"c{k:02d}"
        gold = rng.random(per_case) < truth
        credited = np.where(gold, rng.random(per_case) < sens, rng.random(per_case) > spec)
        split = "test" if k % 2 else "dev"
        items += [RunItem(case, "d", "symptoms", f"i{j}", bool(cr), bool(g), split)
                  for j, (cr, g) in enumerate(zip(credited, gold))]
        per_rows.append({"doctor": "d", "kind": "model", "case": case,
                         "symptoms": credited.mean(), "tests": np.nan, "diseases": np.nan})
    return pd.DataFrame(per_rows), items


def test_the_corrected_interval_covers_the_truth_behind_a_simulated_grader():
    rng = np.random.default_rng(7)
    covered, observed_covered, runs = 0, 0, 30
    for r in range(runs):
        per_case, items = simulated_run(rng)
        row = next(x for x in corrected_scores(per_case, items, 400, r, 0.05)
                   if x["metric"] == "Sym.")
        covered += row["ci_lo"] <= 30.0 <= row["ci_hi"]
        observed_covered += abs(row["observed"] - 30.0) < abs(row["corrected"] - 30.0)
    # 95 % intervals: at least 25 of 30 cover the truth; the raw score (expected
    # 0.3 * 0.5 + 0.7 * 0.03 = 17.1 %) is nearer the truth than the corrected in few runs
    assert covered >= 25, covered
    assert observed_covered <= 3, observed_covered


def test_no_hand_graded_run_item_means_not_identifiable():
    per_case, items = simulated_run(np.random.default_rng(0), n_cases=4)
    rows = corrected_scores(per_case, [], 50, 0, 0.05)
    assert all(np.isnan(r["corrected"]) and r["reading"].startswith("not identifiable")
               for r in rows)
    # a grader that credits at random: sens + spec - 1 near 0
    noisy = [RunItem(i.case, i.doctor, i.category, i.item, i.gold is not True, i.gold, i.split)
             for i in items]
    sym = next(r for r in corrected_scores(per_case, noisy, 50, 0, 0.05) if r["metric"] == "Sym.")
    assert np.isnan(sym["corrected"]) and "not identifiable" in sym["reading"]


def blind_pair(pid, case="sp-1"):
    return {"id": pid, "case": case, "lang": "en", "category": "symptoms", "item": "fever",
            "chief_complaint": "Cough for a week", "patient_before": "Not sure.",
            "doctor_turn": "Any fever? How long?", "sentence": "Any fever?"}


def secret_pair(pid, credited=True):
    return {"id": pid, "split": "dev", "doctor": "sft", "credited": credited, "turn": 3}


def test_labelled_pairs_become_items_of_one_batch_and_a_bad_label_names_its_line():
    blind = [blind_pair("gp-0001"), blind_pair("gp-0002")]
    secret = [secret_pair("gp-0001"), secret_pair("gp-0002", credited=False)]
    labels = [{"id": "gp-0002", "gold": False, "why": "x"},
              {"id": "gp-0001", "gold": True, "why": "asks"}]
    got = labelled_items(blind, secret, labels, "run-x", 10)
    assert [(g.id, g.pair, g.passed, g.tag, g.split) for g in got] == [
        ("g-0010", "gp-0001", True, "run_credited", "dev"),
        ("g-0011", "gp-0002", False, "run_uncredited", "dev")]
    assert [t.role for t in got[0].transcript] == ["patient", "patient", "doctor"]
    with pytest.raises(ContractError, match="labels.jsonl:2: field 'id/gold'"):
        labelled_items(blind, secret, [labels[1], {"id": "gp-0002", "gold": "no"}], "run-x", 1,
                       "labels.jsonl")
    with pytest.raises(ContractError, match="no label for 1 pairs"):
        labelled_items(blind, secret, labels[:1], "run-x", 1)


def test_the_sample_keeps_every_credit_and_refuses_too_few_pairs():
    credited, pool = list(range(5)), list(range(100, 120))
    assert sample_pairs(credited, pool, None, 0, minimum=20) == [*credited, *pool]
    got = sample_pairs(credited, pool, 15, 0, minimum=15)
    assert got[:5] == credited and len(got) == 15 and set(got[5:]) <= set(pool)
    with pytest.raises(ValueError, match="cannot draw"):
        sample_pairs(credited, pool, None, 0, minimum=400)
    turns = [Turn(role="patient", text="a"), Turn(role="doctor", text="b"),
             Turn(role="patient", text="c"), Turn(role="doctor", text="d")]
    assert patient_before(turns, 3) == "c" and patient_before(turns, 0) == ""


def test_the_committed_run_is_validated_on_its_own_credits_and_says_so_on_every_row():
    """Table 2 of the committed run (the repro of 4a1068e with the REM's foreign_question
    rows: its cai_avg and cai_dep policies say what the cai_dep policy of the 72d0bfb
    run said, turn for turn, so batch run-72d0bfb holds their transcripts): every
    one of its 35 credits is a hand-graded item, so Table 2 and the corrected table say
    "grader validated on 35/35" on every model row (the controls' rows say nothing),
    beside corrected scores from the grader's measured error rates. Taking the run
    batches out of the verdict records brings the "not validated" flag back and leaves no
    error rates to correct with."""
    from medpref import REPO_ROOT
    from medpref.params import load_params
    from medpref.simulation import grading_outputs as outputs

    records = outputs.OUTPUTS.load_records(outputs.OUTPUTS.reports_dir(REPO_ROOT))
    params = load_params()
    t2 = outputs.table2_table(records, params)
    models = t2["kind"] == "model"
    assert set(t2.loc[models, "grader"]) == {
        "grader validated on 35/35 credits of these doctors"}
    assert set(t2.loc[~models, "grader"]) == {""}
    corrected = outputs.table2_corrected_table(records, params)
    assert all(g.startswith("grader validated") for g in corrected["grader"])
    assert corrected["corrected"].notna().all()
    without = {**records, "grader_verdicts": [r for r in records["grader_verdicts"]
                                              if not r["batch"].startswith("run-")]}
    t2 = outputs.table2_table(without, params)
    assert all(g.startswith(NOT_VALIDATED + " (") and "/35" in g for g in t2.loc[models, "grader"])
    corrected = outputs.table2_corrected_table(without, params)
    assert corrected["corrected"].isna().all()


def _ri(doctor, case, item, credited, gold, category="symptoms"):
    return RunItem(case, doctor, category, item, credited, gold, None if gold is None else "dev")


def test_the_read_score_counts_what_a_reader_found_earned_by_hand():
    """Doctor d: in c1 a credit read real (cough), a credit read false (fever), a miss
    read earned (rash) and an item nobody read (pain); in c2 two unread items. Read score:
    c1 2/4, c2 0/2 → 25 %; the grader's own score is 50 % and 0 % → 25 % too, so the two
    agree in total while the credits they count differ."""
    items = [_ri("d", "c1", "cough", True, True), _ri("d", "c1", "fever", True, False),
             _ri("d", "c1", "rash", False, True), _ri("d", "c1", "pain", False, None),
             _ri("d", "c2", "cough", False, None), _ri("d", "c2", "fever", False, None),
             _ri("base", "c1", "cough", False, None), _ri("base", "c2", "cough", False, None)]
    per = read_per_case(items).set_index(["doctor", "case"])
    assert per.loc[("d", "c1"), "symptoms"] == 0.5 and per.loc[("d", "c2"), "symptoms"] == 0.0
    assert np.isnan(per.loc[("d", "c1"), "tests"])     # no test item in the case
    observed = pd.DataFrame([{"doctor": "d", "case": "c1", "symptoms": 0.5},
                             {"doctor": "d", "case": "c2", "symptoms": 0.0},
                             {"doctor": "base", "case": "c1", "symptoms": 0.0},
                             {"doctor": "base", "case": "c2", "symptoms": 0.0}]).assign(
        tests=np.nan, diseases=np.nan)
    t = read_table(observed, items, n_boot=200, seed=0).set_index(["doctor", "metric"])
    row = t.loc[("d", "Sym.")]
    assert (row["observed"], row["read"]) == (25.0, 25.0)
    assert (row["credits"], row["credits_read"], row["credits_earned"],
            row["missed_earned"]) == (2, 2, 1, 1)
    assert row["vs"] == "base" and row["diff"] == 25.0
    assert t.loc[("base", "Sym.")]["vs"] == ""


def test_the_committed_run_read_credit_by_credit():
    """The committed run (the repro of 4a1068e): 35 credits, all read, 18 found earned.
    sft's Sym. rests on 2 credits, neither earned, while a reader found 3 of its misses
    earned, so its read score is above its Table 2 score: the grader errs both ways on one
    doctor. gpt4_rank's Dis. (6 credits, 4 earned) mostly holds. cai_avg's Sym. gain over
    base of the last run (15 credits, 10 earned) is gone with the REM's new rows: 3
    credits, 1 earned, no detectable difference from base."""
    from medpref import REPO_ROOT

    t = pd.read_csv(REPO_ROOT / "reports/06_sp_grading/table2_read.csv")
    assert (t["credits"].sum(), t["credits_read"].sum(), t["credits_earned"].sum()) == (35, 35, 18)
    row = t.set_index(["doctor", "metric"])
    sft = row.loc[("sft", "Sym.")]
    assert (sft["credits"], sft["credits_earned"], sft["missed_earned"]) == (2, 0, 3)
    assert float(sft["read"]) > float(sft["observed"])
    dis = row.loc[("gpt4_rank", "Dis.")]
    assert (dis["credits"], dis["credits_read"], dis["credits_earned"]) == (6, 6, 4)
    cai = row.loc[("cai_avg", "Sym.")]
    assert (cai["credits"], cai["credits_read"], cai["credits_earned"]) == (3, 3, 1)
    assert cai["verdict"] == "no detectable difference"
    assert set(t["grader"]) == {"grader validated on 35/35 credits of these doctors"}
