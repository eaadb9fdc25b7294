"""Stage 06's held-out process compliance: which states, the paired table, the reports."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from medpref.contracts import Dialogue, Turn, read_jsonl, write_jsonl
from medpref.data.split import load_split
from medpref.params import load_params, parse_params
from medpref.prompts import load_prompt
from medpref.remscore.base import RuleJudgement
from medpref.rules import load_rules
from medpref.simulation import heldout
from medpref.simulation.config import DoctorConfig
from medpref.stagekit import Stage
from test_simulation import case, client, keyword_judge, scripted_sim_stage


def reads(h, p):
    """What run_heldout reads of a harness: the REM scorer, its flowchart, the prompt."""
    return h.scorer, h.flowchart, h.templates[p.doctor_prompt]

RULES = load_rules("configs/rules/plpf_flowchart.yaml").rules


class FakeScorer:
    """Every rule scores 1 when the doctor's last turn says "comply", else 0; a turn
    saying "abstain" gets no score on rule A. Counts the states it was asked."""

    def __init__(self):
        self.asked = 0

    def score_states(self, states, rules):
        self.asked += len(states)
        out = []
        for s in states:
            last = s[-1].text.lower()
            out.append({r.id: RuleJudgement(r.id, None if ("abstain" in last and r.id == "A")
                                            else float("comply" in last)) for r in rules})
        return out


def plain_doctor(did: str, k: int) -> str:
    return f"{did} doctor {k}"


def dialogue(did: str, rounds: int, diagnosis_turn: int | None = None,
             doctor=plain_doctor) -> Dialogue:
    turns = []
    for k in range(rounds):
        turns += [Turn(role="patient", text=f"{did} patient {k}"),
                  Turn(role="doctor", text=doctor(did, k))]
    meta = {"chief_complaint": f"{did} complaint", "diagnosis": f"{did}itis"}
    if diagnosis_turn is not None:
        meta["diagnosis_turn"] = diagnosis_turn
    return Dialogue(id=did, turns=turns, meta=meta)


#: The first control design (every rule read by real vs bad, no templated control): the
#: tests written for it keep it; the per-rule design has tests of its own below.
LEGACY_CONTROLS = {"rule_controls": {}, "control_turns": {}, "junk_control": None}


def toy_params(tmp_path, n_dialogues=8, n_eval=5, doctor=plain_doctor, **heldout_kw):
    """The committed params with a toy dialogue file and a toy split of it: d0..d<n_eval-1>
    in eval (their diagnosis at turn 7, after the doctor turns 1, 3 and 5), one in dev, the
    rest in train; the legacy control design unless ``heldout_kw`` says otherwise."""
    heldout_kw = {**LEGACY_CONTROLS, **heldout_kw}
    path = tmp_path / "dialogues.jsonl"
    write_jsonl(path, [dialogue(f"d{k}", 5, 7, doctor) for k in range(n_dialogues)])
    ids = [f"d{k}" for k in range(n_dialogues)]
    (tmp_path / "split.yaml").write_text(
        f"eval: [{', '.join(ids[:n_eval])}]\ndev: [{ids[n_eval]}]\n"
        f"train: [{', '.join(ids[n_eval + 1:])}]\n")
    raw = copy.deepcopy(load_params().raw)
    raw["shared"]["seed"] = 7
    raw["shared"]["split"] = str(tmp_path / "split.yaml")
    raw["simulation"]["heldout"].update(enabled=True, dialogues=str(path), **heldout_kw)
    return parse_params(raw), path


def eval_states(params, path, n_states=100, per=3, seed=7):
    split = load_split(params.shared.split)
    dialogues = heldout.eval_dialogues(path, split)
    return split, dialogues, heldout.select_states(
        dialogues, n_states, per, seed, 4, params.simulation.heldout.bad_turn_template)


# -- which states --------------------------------------------------------------------------

def test_states_come_from_eval_dialogues_before_their_diagnosis_and_are_seeded(tmp_path):
    params, path = toy_params(tmp_path)
    split, dialogues, states = eval_states(params, path, n_states=12)
    assert [d.id for d in dialogues] == split.ids("eval") == ["d0", "d1", "d2", "d3", "d4"]
    again = eval_states(params, path, n_states=12)[2]
    assert [(s.dialogue, s.cut) for s in states] == [(s.dialogue, s.cut) for s in again]
    assert len(states) == 12 and {s.dialogue for s in states} <= set(split.ids("eval"))
    per = pd.Series([s.dialogue for s in states]).value_counts()
    assert per.max() == 3 and len(per) == 4         # 3 cuts (1, 3, 5) each from 4 of the 5
    by_id = {d.id: d for d in dialogues}
    for s in states:
        turns = by_id[s.dialogue].turns
        assert s.cut in (1, 3, 5) and s.cut < s.diagnosis_turn == 7
        assert turns[s.cut].role == "doctor" and s.history[-1] == turns[s.cut - 1]
        assert len(s.history) <= 4 and s.history[-1].role == "patient"
        assert s.real_turn == turns[s.cut].text                 # the real next turn
        assert s.bad_turn == turns[7].text == f"{s.dialogue} doctor 3"   # its diagnosis, early
        assert s.bad_turn_from == "diagnosis_turn"
    # another seed, another choice; fewer states than asked when the eval part runs out
    other = eval_states(params, path, n_states=12, seed=8)[2]
    assert [(s.dialogue, s.cut) for s in other] != [(s.dialogue, s.cut) for s in states]
    assert len(eval_states(params, path, n_states=100, per=2)[2]) == 10
    table = heldout.states_table(states, split)
    assert list(table.columns) == heldout.STATE_COLUMNS and set(table["part"]) == {"eval"}


def test_without_a_diagnosis_turn_the_bad_turn_is_templated_and_every_cut_is_open():
    d = dialogue("d9", 5)
    bad, source = heldout.bad_turn(d, "This is {diagnosis}; I'll start treatment today.")
    assert (bad, source) == ("This is d9itis; I'll start treatment today.", "template")
    states = heldout.select_states([d], 10, 10, 0, 8, "It is {diagnosis}.")
    assert [s.cut for s in states] == [1, 3, 5, 7, 9] and states[0].bad_turn == "It is d9itis."
    with pytest.raises(ValueError, match="d9: the bad-turn control needs"):
        heldout.bad_turn(Dialogue(id="d9", turns=d.turns), "{diagnosis}")


def test_eval_dialogues_refuse_unlisted_dialogues_and_bad_diagnosis_turns(tmp_path):
    from medpref.contracts import ContractError
    from medpref.data.split import DialogueSplit

    path = tmp_path / "d.jsonl"
    write_jsonl(path, [dialogue("a", 3, 3), dialogue("b", 3, 2)])
    with pytest.raises(ContractError, match=r"d.jsonl:2: field 'id': .*'b' is in no part"):
        heldout.eval_dialogues(path, DialogueSplit({"a": "eval"}))
    with pytest.raises(ContractError, match=r"d.jsonl:2: field 'meta.diagnosis_turn': 2 is not "
                                            r"the index of a doctor turn"):
        heldout.eval_dialogues(path, DialogueSplit({"a": "eval", "b": "eval"}))
    assert [d.id for d in heldout.eval_dialogues(path, DialogueSplit({"a": "eval", "b": "dev"}))
            ] == ["a"]


def test_committed_params_hold_out_68_states_of_the_18_eval_dialogues_before_diagnosis():
    params = load_params()
    hp = params.simulation.heldout
    split = load_split(params.shared.split)
    dialogues = heldout.eval_dialogues(hp.dialogues, split)
    states = heldout.select_states(dialogues, hp.n_states, hp.states_per_dialogue,
                                   params.shared.seed, hp.history_max_turns,
                                   hp.bad_turn_template)
    assert len(dialogues) == len(split.ids("eval")) == 18
    assert len(states) == hp.n_states == 68 and len({s.dialogue for s in states}) == 18
    assert {split.part(s.dialogue) for s in states} == {"eval"}
    assert all(s.diagnosis_turn is not None and s.cut < s.diagnosis_turn for s in states)
    assert {s.bad_turn_from for s in states} == {"diagnosis_turn"}
    # nothing the policies trained on: no state's history is a train or dev dialogue's
    # (turns of a sentence or more: a short question may be said in any dialogue)
    trained = {t.text for d in read_jsonl(hp.dialogues, Dialogue)
               if split.part(d.id) != "eval" for t in d.turns if len(t.text) > 40}
    assert not any(t.text in trained for s in states for t in s.history)


def test_grid_cells_are_left_out_unless_asked():
    docs = [DoctorConfig(name=n) for n in ("base", "sft", "cai_dep", "agent")]
    docs.insert(3, DoctorConfig(name="cell_a", cell={"weighting": "avg", "trajectory": 1}))
    assert [d.name for d in heldout.heldout_doctors(docs, False)] == [
        "base", "sft", "cai_dep", "agent"]
    assert len(heldout.heldout_doctors(docs, True)) == 5


def test_the_cost_estimate_is_states_times_policies_at_the_measured_rates():
    gen, rem = heldout.estimated_seconds(60, 6, 6)
    assert gen == pytest.approx(360 * 2.9)
    assert rem == pytest.approx((360 + 2 * 60) * 6 * 0.46)   # the two controls: REM only
    # the committed run took 1,872 s for 6 policies on 60 states, no controls
    # (reports/06_simulation/timings.json)
    assert 1500 < gen + 360 * 6 * 0.46 < 2500


# -- scores and the paired table -----------------------------------------------------------

def states_of(n_dialogues: int, per: int) -> list[heldout.HeldoutState]:
    return [heldout.HeldoutState(f"d{k}", 2 * j + 1,
                                 (Turn(role="patient", text=f"d{k} p{j}"),))
            for k in range(n_dialogues) for j in range(per)]


def test_identical_states_are_scored_once_and_a_failed_turn_scores_nothing():
    states = states_of(2, 2)
    scorer = FakeScorer()
    turns = {"sft": ["no", "no", "no", None], "same": ["no", "no", "no", "no"]}
    scores = heldout.score_turns(states, turns, scorer, RULES)
    assert scorer.asked == 4                         # 3 shared + the one sft could not answer
    assert len(scores) == 2 * 4 * len(RULES)
    failed = scores[(scores["policy"] == "sft") & (scores["dialogue"] == "d1")
                    & (scores["cut"] == 3)]
    assert failed["score"].isna().all()


def test_a_policy_that_always_complies_beats_one_that_never_does_clustered_by_dialogue():
    states = states_of(6, 3)                         # 6 dialogues x 3 states
    turns = {"sft": ["no"] * 18, "good": ["I comply"] * 18, "twin": ["no"] * 18}
    scores = heldout.score_turns(states, turns, FakeScorer(), RULES)
    table = heldout.compliance_table(scores, ["sft", "good", "twin"], n_boot=500, seed=0)
    assert list(table.columns) == heldout.COLUMNS
    assert list(table["rule"].unique()) == ["all", *[r.id for r in RULES]]
    t = table.set_index(["policy", "rule"])
    good = t.loc[("good", "all")]
    assert good["mean"] == 1.0 and good["delta_vs_sft"] == pytest.approx(1.0)
    assert good["ci_lo"] > 0 and good["verdict"] == "higher" and good["n_states"] == 18
    # the sign flips act on the 6 dialogue totals (exact): 2 of 2^6 sign vectors as extreme
    assert good["p_value"] == pytest.approx(2 / 64)
    twin = t.loc[("twin", "all")]
    assert twin["delta_vs_sft"] == 0.0 and twin["p_value"] == 1.0
    assert twin["verdict"] == "no detectable difference"
    assert t.loc[("sft", "all"), "verdict"] == "reference"
    assert np.isnan(t.loc[("sft", "all"), "delta_vs_sft"])


def test_the_difference_is_paired_by_state_and_its_interval_resamples_dialogues():
    from medpref.metrics.intervals import paired_difference

    states = states_of(4, 2)
    # good complies in 5 of 8 states, sft in 2 (one state in common)
    good = ["comply", "comply", "comply", "no", "comply", "no", "comply", "no"]
    sft = ["comply", "no", "no", "no", "no", "no", "no", "comply"]
    scores = heldout.score_turns(states, {"sft": sft, "good": good}, FakeScorer(), RULES)
    row = heldout.compliance_table(scores, ["sft", "good"], n_boot=400, seed=3).set_index(
        ["policy", "rule"]).loc[("good", "A")]
    a = np.array([w == "comply" for w in good], dtype=float)
    b = np.array([w == "comply" for w in sft], dtype=float)
    ref = paired_difference(a, b, n_boot=400, seed=3, clusters=[s.dialogue for s in states])
    assert row["delta_vs_sft"] == pytest.approx(3 / 8) and row["mean"] == pytest.approx(5 / 8)
    assert (row["ci_lo"], row["ci_hi"], row["p_value"], row["mde"]) == pytest.approx(
        (ref.lo, ref.hi, ref.p_value, ref.mde))


def test_all_averages_only_states_every_rule_scored():
    states = states_of(2, 1)
    turns = {"sft": ["no", "no"], "good": ["comply", "comply abstain"]}
    table = heldout.compliance_table(heldout.score_turns(states, turns, FakeScorer(), RULES),
                                     ["sft", "good"], n_boot=100, seed=0).set_index(
        ["policy", "rule"])
    assert table.loc[("good", "A"), "n_states"] == 1       # the REM abstained on one
    assert table.loc[("good", "all"), "n_states"] == 1
    assert table.loc[("good", "B"), "n_states"] == 2
    no_ref = heldout.compliance_table(heldout.score_turns(states, {"good": ["comply"] * 2},
                                                          FakeScorer(), RULES),
                                      ["good"], n_boot=100, seed=0)
    assert set(no_ref["verdict"]) == {"no sft policy"}


# -- the REM's range: the real next turn against a premature diagnosis ---------------------

def with_controls(turns: dict, real: list[str], bad: list[str]) -> dict:
    return {**turns, heldout.REAL: real, heldout.BAD: bad}


def test_the_rem_range_is_the_paired_real_minus_bad_difference_clustered_by_dialogue():
    from medpref.metrics.intervals import paired_difference

    states = states_of(6, 2)                         # 6 dialogues x 2 states
    real = ["comply", "comply", "no", "comply", "comply", "comply",
            "comply", "no", "comply", "comply", "comply", "comply"]
    turns = with_controls({"sft": ["no"] * 12, "good": ["comply"] * 12}, real, ["no"] * 12)
    scores = heldout.score_turns(states, turns, FakeScorer(), RULES)
    table = heldout.compliance_table(scores, ["sft", "good", heldout.REAL, heldout.BAD], n_boot=500,
                                     seed=1)
    assert list(table.columns) == heldout.COLUMNS
    line = table[(table["policy"] == heldout.RANGE) & (table["rule"] == "B")].iloc[0]
    a = np.array([t == "comply" for t in real], dtype=float)
    ref = paired_difference(a, np.zeros(12), n_boot=500, seed=1,
                            clusters=[s.dialogue for s in states])
    assert line["rem_range"] == pytest.approx(10 / 12) and line["n_states"] == 12
    assert (line["rem_range_lo"], line["rem_range_hi"], line["p_value"]) == pytest.approx(
        (ref.lo, ref.hi, ref.p_value))
    assert line["verdict"].startswith("separates")
    t = table.set_index(["policy", "rule"])
    good = t.loc[("good", "B")]                      # ranked, with the range beside it
    assert good["verdict"] == "higher" and good["rem_range"] == pytest.approx(10 / 12)
    assert t.loc[(heldout.REAL, "B"), "mean"] == pytest.approx(10 / 12)
    assert t.loc[(heldout.BAD, "B"), "mean"] == 0.0
    m = heldout.metrics_of(heldout.HeldoutResult(pd.DataFrame(), table))
    assert m["rem_range_separates"] is True
    assert m["heldout/rem_range"]["rem_range"] == pytest.approx(10 / 12, abs=1e-3)
    assert m["heldout/control_bad_turn"]["mean"] == 0.0


def test_a_rem_that_does_not_separate_real_from_bad_ranks_nothing():
    states = states_of(6, 2)
    # the REM scores the real and the bad turn alike: its range is 0 on every rule
    turns = with_controls({"sft": ["no"] * 12, "good": ["comply"] * 12}, ["no"] * 12,
                          ["no"] * 12)
    scores = heldout.score_turns(states, turns, FakeScorer(), RULES)
    table = heldout.compliance_table(scores, ["sft", "good", heldout.REAL, heldout.BAD], n_boot=500,
                                     seed=1)
    t = table.set_index(["policy", "rule"])
    assert t.loc[("good", "all"), "delta_vs_sft"] == 1.0     # measured, but not ranked:
    assert t.loc[("good", "all"), "verdict"] == heldout.NOT_RANKED
    assert t.loc[("sft", "all"), "verdict"] == "reference"
    assert t.loc[(heldout.RANGE, "all"), "verdict"].startswith("does not separate")
    assert t.loc[(heldout.RANGE, "all"), "rem_range"] == 0.0
    assert heldout.metrics_of(heldout.HeldoutResult(pd.DataFrame(), table))[
        "rem_range_separates"] is False
    # a bad turn the REM likes better than the real one does not separate either
    turns = with_controls({"sft": ["no"] * 12}, ["no"] * 12, ["comply"] * 12)
    table = heldout.compliance_table(heldout.score_turns(states, turns, FakeScorer(), RULES),
                                     ["sft", heldout.REAL, heldout.BAD], n_boot=500, seed=1)
    line = table[(table["policy"] == heldout.RANGE) & (table["rule"] == "all")].iloc[0]
    assert line["rem_range"] == -1.0 and line["verdict"].startswith("does not separate")


def test_without_the_controls_there_is_no_range_and_the_verdicts_stand():
    states = states_of(4, 2)
    scores = heldout.score_turns(states, {"sft": ["no"] * 8, "good": ["comply"] * 8},
                                 FakeScorer(), RULES)
    table = heldout.compliance_table(scores, ["sft", "good"], n_boot=200, seed=0)
    assert heldout.RANGE not in set(table["policy"]) and table["rem_range"].isna().all()
    assert "rem_range_separates" not in heldout.metrics_of(
        heldout.HeldoutResult(pd.DataFrame(), table))


# -- the stage's call and its reports ------------------------------------------------------

def doctor_says(text):
    return lambda req: text


def test_run_makes_the_records_and_tables_with_scripted_policies(tmp_path):
    # 7 eval dialogues whose doctor "complies" until the diagnosis at turn 7 (FakeScorer: 1)
    def doctor(did, k):    # complies in the turns before its diagnosis (turn 7 = round 3)
        return f"{did}: the diagnosis" if k == 3 else f"{did} asks, I comply {k}"

    params, path = toy_params(tmp_path, n_dialogues=10, n_eval=7, n_states=14,
                              states_per_dialogue=2, doctor=doctor)
    clients = {"sft": client(doctor_says("Doctor: How long?"), "sft"),
               "cai_dep": client(doctor_says("I comply. Patient: ok"), "cai_dep"),
               "grid_dep_1": client(doctor_says("I comply."), "grid")}

    class TmpStage(Stage):
        data_dir = property(lambda self: tmp_path / "data")
        reports_dir = property(lambda self: tmp_path / "reports")

    st = TmpStage(name="06_simulation", params=params)
    p = params.simulation
    h = SimpleNamespace(scorer=FakeScorer(), flowchart=SimpleNamespace(rules=RULES),
                        templates={p.doctor_prompt: load_prompt(p.doctor_prompt)})
    doctors = [DoctorConfig(name=n, cell={"weighting": "dep", "trajectory": 1}
                            if n == "grid_dep_1" else None) for n in clients]
    out = heldout.run_heldout(st, p, *reads(h, p), doctors, lambda d: clients[d.name])
    assert not (tmp_path / "reports").exists() and not (tmp_path / "data").exists()
    # the turn records, through JSON as the stage writes them, give the table again
    turns = json.loads(json.dumps(out.turns))
    table = heldout.table_of(turns, p.grader.bootstrap_rounds, 7)
    pd.testing.assert_frame_equal(table, out.table)
    assert list(table.columns) == heldout.COLUMNS
    assert list(dict.fromkeys(table["policy"])) == [   # the grid cell left out
        "sft", "cai_dep", heldout.REAL, heldout.BAD, heldout.RANGE]
    t = table.set_index(["policy", "rule"])
    row = t.loc[("cai_dep", "all")]
    assert row["mean"] == 1.0 and row["delta_vs_sft"] == 1.0 and row["n_states"] == 14
    assert row["verdict"] == "higher" and row["rem_range"] == 1.0
    assert t.loc[(heldout.REAL, "all"), "mean"] == 1.0 and t.loc[(heldout.BAD, "all"), "mean"] == 0
    states = heldout.states_of(json.loads(json.dumps(out.state_rows)))
    pd.testing.assert_frame_equal(states, out.states)
    assert list(states.columns) == heldout.STATE_COLUMNS and len(states) == 14
    assert set(states["part"]) == {"eval"} and set(states["dialogue"]) <= {
        f"d{k}" for k in range(7)}
    assert (states["cut"] < states["diagnosis_turn"]).all()
    assert len(turns) == 4 * 14 and turns[0]["turn"] == "How long?"    # label cut, raw kept
    assert turns[27]["turn"] == "I comply." and turns[27]["scores"]["A"] == 1.0
    assert list(turns[0]["scores"]) == [r.id for r in RULES]     # the flowchart's order
    bad = [r for r in turns if r["policy"] == heldout.BAD]
    assert len(bad) == 14 and all(r["turn"] == f"{r['dialogue']}: the diagnosis"
                                  and r["control_from"] == "diagnosis_turn"
                                  and r["scores"]["A"] == 0.0 for r in bad)
    m = heldout.metrics_of(out)
    assert m["heldout/cai_dep"]["delta_vs_sft"] == 1.0 and m["rem_range_separates"] is True
    # disabled: no records and empty tables with the same columns, so the outputs exist
    off = parse_params({**{k: v for k, v in params.raw.items()},
                        "simulation": {"heldout": {"enabled": False}}})
    st_off = TmpStage(name="06_simulation", params=off)
    empty = heldout.run_heldout(st_off, off.simulation, *reads(h, off.simulation), doctors,
                                lambda d: clients[d.name])
    assert empty.table.empty and heldout.metrics_of(empty) == {}
    assert empty.turns == [] and empty.state_rows == []
    assert list(heldout.table_of([], 100, 0).columns) == heldout.COLUMNS
    assert list(heldout.states_of([]).columns) == heldout.STATE_COLUMNS


def test_stage_run_adds_heldout_compliance_after_the_sp_test(tmp_path, monkeypatch):
    from medpref.simulation import heldout_stage, whole
    from medpref.simulation import stage as sim_stage

    cases = [case("sp-a", "internal_medicine"), case("sp-b", "surgery", tests=())]
    write_jsonl(tmp_path / "cases.jsonl", cases)
    dialogues = tmp_path / "dialogues.jsonl"
    # real turns that "comply" against the templated diagnosis: the REM has a range here
    write_jsonl(dialogues, [dialogue(f"d{k}", 4, doctor=lambda did, k: f"{did} I comply {k}")
                            for k in range(8)])   # 8 dialogues: a sign-flip p can be < 0.05
    (tmp_path / "split.yaml").write_text(f"eval: [{', '.join(f'd{k}' for k in range(8))}]\n")
    params = parse_params({
        "shared": {"split": str(tmp_path / "split.yaml")},
        "simulation": {
            "split_overlap": {"dialogues": str(dialogues)},
            "cases": str(tmp_path / "cases.jsonl"), "rounds": 1, "trained_policies": False,
            "grader": {"mode": "generate", "graded_items": None},
            "next_turn": {"enabled": False},
            # no control doctors: this keyword judge credits control_reciter's list of the
            # checklist, and the controls' gate (test_sp_controls) would stop the run
            "controls": [],
            "heldout": {"enabled": True, "dialogues": str(dialogues), "n_states": 8,
                        "states_per_dialogue": 1},
            "doctors": [{"name": "sft", "role": "policy"}, {"name": "good", "role": "good"}]}})
    clients = {"policy": client(doctor_says("Do you have a fever?"), "policy"),
               "good": client(doctor_says("I comply: do you have a fever?"), "good"),
               "patient": client(doctor_says("Yes."), "patient"),
               "judge": client(keyword_judge, "judge")}

    new_stage = scripted_sim_stage(tmp_path, monkeypatch, clients)
    for module in (sim_stage, heldout_stage):    # the radar's REM and the held-out one's
        monkeypatch.setattr(module, "rem_scorer",
                            lambda stage, p: (FakeScorer(), SimpleNamespace(rules=RULES), "fake"))
    out = whole.run(new_stage(params))
    row = out.heldout.table.set_index(["policy", "rule"]).loc[("good", "all")]
    assert row["delta_vs_sft"] == 1.0 and row["n_states"] == 8
    assert out.metrics["heldout/good"]["mean"] == 1.0
    reports = tmp_path / "reports"
    assert (reports / "06_heldout" / "heldout_states.md").exists()
    # the other tables exist: the overlap check, the (empty) GPD check, questions
    for name in ("06_simulation/split_overlap", "06_next_turn/next_turn_gpd_check",
                 "06_heldout/question_share"):
        assert (reports / f"{name}.md").exists()
    share = out.question_share.set_index(["setting", "doctor"])
    assert share.loc[("eval states", "good"), "share"] == 1.0     # "... do you have a fever?"
    assert share.loc[("SP openings", "sft"), "turns"] == 2
    assert set(share["verdict"]) == {"no base"}
    assert out.metrics["split_overlap"]["flagged_in_train"] == 0


@pytest.mark.parametrize("mode", ["if_range_separates", "always"])
def test_controls_first_the_policies_are_scored_only_where_the_rem_has_a_range(tmp_path, mode):
    # the real and the diagnosis turns both "comply": the REM scores them alike, no range
    def doctor(did, k):
        return f"{did}: I comply, the diagnosis" if k == 3 else f"{did} I comply {k}"

    params, path = toy_params(tmp_path, n_dialogues=10, n_eval=7, n_states=14,
                              states_per_dialogue=2, doctor=doctor, score_policies=mode)
    clients = {"sft": client(doctor_says("How long?"), "sft"),
               "cai_dep": client(doctor_says("I comply."), "cai_dep")}
    st = Stage(name="06_simulation", params=params)
    p = params.simulation
    scorer = FakeScorer()
    h = SimpleNamespace(scorer=scorer, flowchart=SimpleNamespace(rules=RULES),
                        templates={p.doctor_prompt: load_prompt(p.doctor_prompt)})
    out = heldout.run_heldout(st, p, *reads(h, p), [DoctorConfig(name=n) for n in clients],
                              lambda d: clients[d.name])
    turns = json.loads(json.dumps(out.turns))
    policy_turns = [r for r in turns if r["policy"] in clients]
    assert len(policy_turns) == 28 and {r["turn"] for r in policy_turns} == {
        "How long?", "I comply."}                    # generated either way (question share)
    t = out.table.set_index(["policy", "rule"])
    assert t.loc[(heldout.RANGE, "all"), "verdict"].startswith("does not separate")
    if mode == "always":
        assert all(r["scores"] is not None for r in policy_turns)
        assert t.loc[("cai_dep", "all"), "verdict"] == heldout.NOT_RANKED
        assert scorer.asked == 14 * 2 + 14 * 2     # controls' states, then the policies'
    else:
        assert all(r["scores"] is None for r in policy_turns)
        assert scorer.asked == 14 * 2               # the controls' states only
        for name in clients:
            row = t.loc[(name, "all")]
            assert row["verdict"] == heldout.NOT_SCORED and row["n_states"] == 0
            assert np.isnan(row["mean"])
        assert t.loc[(heldout.REAL, "all"), "mean"] == 1.0
    # the table is rebuilt from the records as written, either way
    pd.testing.assert_frame_equal(heldout.table_of(turns, p.grader.bootstrap_rounds, 7),
                                  out.table)
    assert heldout.metrics_of(out)["rem_range_separates"] is False


def test_policies_are_scored_when_one_rule_separates(tmp_path):
    def doctor(did, k):    # complies until its diagnosis: the REM separates
        return f"{did}: the diagnosis" if k == 3 else f"{did} asks, I comply {k}"

    params, _ = toy_params(tmp_path, n_dialogues=10, n_eval=7, n_states=14,
                           states_per_dialogue=2, doctor=doctor)
    assert params.simulation.heldout.score_policies == "if_range_separates"   # the default
    clients = {"sft": client(doctor_says("How long?"), "sft")}
    p = params.simulation
    h = SimpleNamespace(scorer=FakeScorer(), flowchart=SimpleNamespace(rules=RULES),
                        templates={p.doctor_prompt: load_prompt(p.doctor_prompt)})
    out = heldout.run_heldout(Stage(name="06_simulation", params=params), p, *reads(h, p),
                              [DoctorConfig(name="sft")], lambda d: clients[d.name])
    assert all(r["scores"] is not None for r in out.turns)


# -- the per-rule control design (issue 40 item 6) ------------------------------------------

class RubricScorer:
    """Scores each rule the way the written rubric ranks the toy turns: asking is A, naming
    the diagnosis B and C (a vague "could be" half), an unsafe dose fails D, an AI refusal
    fails E, five or more questions fail F; the repeated apology (junk) half-engages (E 1)
    and never reaches the point (F 0)."""

    def score_states(self, states, rules):
        out = []
        for s in states:
            t = s[-1].text
            asks = "?" in t and "diagnosis" not in t
            names = 2.0 if "diagnosis" in t else 1.0 if "could be" in t else 0.0
            by_rule = {"A": 2.0 * asks, "B": names, "C": names,
                       "D": 0.0 if "amoxicillin" in t else 2.0,
                       "E": 0.0 if "AI language model" in t else 1.0 if "so sorry" in t else 2.0,
                       "F": 0.0 if t.count("?") >= 5 or "so sorry" in t else 2.0}
            out.append({r.id: RuleJudgement(r.id, by_rule[r.id]) for r in rules})
        return out


class LengthScorer:
    """Every rule scores the turn's length: the shortcut the controls must expose."""

    def score_states(self, states, rules):
        return [{r.id: RuleJudgement(r.id, min(2.0, len(s[-1].text.split()) / 10))
                 for r in rules} for s in states]


def run_design(tmp_path, scorer):
    def doctor(did, k):
        return f"{did}: the diagnosis" if k == 3 else f"{did}: when did it start {k}?"

    params, _ = toy_params(tmp_path, n_dialogues=12, n_eval=9, n_states=18,
                           states_per_dialogue=2, doctor=doctor,
                           **{k: v for k, v in load_params().raw["simulation"]["heldout"].items()
                              if k in LEGACY_CONTROLS})          # the committed design
    clients = {"sft": client(doctor_says("How long?"), "sft")}
    p = params.simulation
    h = SimpleNamespace(scorer=scorer, flowchart=SimpleNamespace(rules=RULES),
                        templates={p.doctor_prompt: load_prompt(p.doctor_prompt)})
    out = heldout.run_heldout(Stage(name="06_simulation", params=params), p, *reads(h, p),
                              [DoctorConfig(name="sft")], lambda d: clients[d.name])
    return p, out


def test_each_rule_is_read_by_the_pair_the_rubric_ranks(tmp_path):
    p, out = run_design(tmp_path, RubricScorer())
    design = heldout.design_of(p.heldout)
    assert design.pair("B") == (heldout.BAD, "control_vague")
    assert design.pair("A") == (heldout.REAL, heldout.BAD)
    t = out.table.set_index(["policy", "rule"])
    for rule in ("all", "A", "B", "C", "D", "E", "F"):
        assert t.loc[(heldout.RANGE, rule), "verdict"].startswith("separates"), rule
    # on B the early diagnosis is the better turn (B scores naming it), not the real question
    assert t.loc[(heldout.BAD, "B"), "mean"] == 2.0 and t.loc[(heldout.REAL, "B"), "mean"] == 0
    # junk sits below the higher turn on every rule the rubric ranks it on; not on D, where
    # a turn that advises nothing is safe by the rubric's words
    junk = out.table[out.table["policy"] == heldout.JUNK_RANGE].set_index("rule")["verdict"]
    assert {r for r, v in junk.items() if v.startswith("junk below")} == {
        "all", "A", "B", "C", "E", "F"}
    controls = {r["policy"] for r in out.turns if r["policy"].startswith("control_")}
    assert controls == set(design.names) and len(controls) == 7
    m = heldout.metrics_of(out)
    assert m["rem_range_separating_rules"] == ["A", "B", "C", "D", "E", "F"]
    # the table is rebuilt from the records as written, with the design of the params
    pd.testing.assert_frame_equal(
        heldout.table_of(json.loads(json.dumps(out.turns)), p.grader.bootstrap_rounds, 7,
                         design), out.table)


def test_a_length_scorer_does_not_pass_the_rules_whose_pair_is_not_ordered_by_length(tmp_path):
    _, out = run_design(tmp_path, LengthScorer())
    t = out.table.set_index(["policy", "rule"])
    # the battery of questions is longer than the real question: F's range is reversed
    assert t.loc[(heldout.RANGE, "F"), "rem_range"] < 0
    assert t.loc[(heldout.RANGE, "F"), "verdict"].startswith("does not separate")
    assert t.loc[("sft", "F"), "verdict"] in (heldout.NOT_RANKED, "reference")


def test_a_control_design_naming_an_unknown_control_is_refused():
    raw = copy.deepcopy(load_params().raw)
    raw["simulation"]["heldout"]["rule_controls"]["B"] = ["control_bad_turn", "control_nope"]
    with pytest.raises(ValueError, match="control_nope"):
        parse_params(raw)
    raw["simulation"]["heldout"]["rule_controls"]["B"] = ["control_vague", "control_vague"]
    with pytest.raises(ValueError, match="compare a control with itself"):
        parse_params(raw)


def test_old_records_with_two_controls_rank_only_the_rules_their_pair_covers():
    """Records of the first design (real and bad only) under the per-rule design: A and all
    are read... only A has its pair; every other rule is not ranked."""
    states = states_of(6, 2)
    real = ["comply"] * 12
    turns = with_controls({"sft": ["no"] * 12, "good": ["comply"] * 12}, real, ["no"] * 12)
    scores = heldout.score_turns(states, turns, FakeScorer(), RULES)
    design = heldout.design_of(load_params().simulation.heldout)
    table = heldout.compliance_table(scores, ["sft", "good", heldout.REAL, heldout.BAD],
                                     n_boot=300, seed=1, design=design)
    t = table.set_index(["policy", "rule"])
    assert t.loc[("good", "A"), "verdict"] == "higher"
    for rule in ("all", "B", "C", "D", "E", "F"):
        assert t.loc[("good", rule), "verdict"] == heldout.NOT_RANKED, rule
    assert set(table.loc[table["policy"] == heldout.RANGE, "rule"]) == {"A"}
