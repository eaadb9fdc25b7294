"""Stage 06's held-out process compliance: which states, the paired table, the reports."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from medpref.contracts import Dialogue, Turn, read_jsonl, write_jsonl
from medpref.params import load_params, parse_params
from medpref.prompts import load_prompt
from medpref.rem.base import RuleJudgement
from medpref.rules import load_rules
from medpref.simulation import heldout
from medpref.simulation.config import DoctorConfig
from medpref.stagekit import Stage
from test_simulation import case, client, keyword_judge, scripted_sim_stage

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


def dialogue(did: str, rounds: int) -> Dialogue:
    turns = []
    for k in range(rounds):
        turns += [Turn(role="patient", text=f"{did} patient {k}"),
                  Turn(role="doctor", text=f"{did} doctor {k}")]
    return Dialogue(id=did, turns=turns)


def toy_params(tmp_path, n_dialogues=8, n_items=3, **heldout_kw):
    """The committed params with a toy dialogue file read by stage 01, SFT and this."""
    path = tmp_path / "dialogues.jsonl"
    write_jsonl(path, [dialogue(f"d{k}", 5) for k in range(n_dialogues)])
    raw = copy.deepcopy(load_params().raw)
    raw["shared"]["seed"] = 7
    raw["sampling"].update(dialogues=str(path), n_items=n_items, future_rounds=1,
                           min_future_rounds=1)
    raw["training"]["sft"]["dialogues"] = [str(path)]
    raw["simulation"]["heldout"].update(enabled=True, dialogues=str(path), **heldout_kw)
    return parse_params(raw), path


# -- which states --------------------------------------------------------------------------

def test_states_leave_out_the_sampled_dialogues_and_are_deterministic(tmp_path):
    params, path = toy_params(tmp_path)
    sampled = heldout.sampled_dialogue_ids(params, str(path))
    assert len(sampled) == 3                        # n_items 3 over 8 dialogues: 3 distinct
    dialogues = read_jsonl(path, Dialogue)
    states = heldout.select_states(dialogues, sampled, 12, 3, 7, 4)
    again = heldout.select_states(dialogues, sampled, 12, 3, 7, 4)
    assert [(s.dialogue, s.cut) for s in states] == [(s.dialogue, s.cut) for s in again]
    assert len(states) == 12 and not {s.dialogue for s in states} & sampled
    per = pd.Series([s.dialogue for s in states]).value_counts()
    assert per.max() == 3 and len(per) == 4         # 3 cuts each from 4 of the 5 left
    by_id = {d.id: d for d in dialogues}
    for s in states:
        turns = by_id[s.dialogue].turns
        assert turns[s.cut].role == "doctor" and s.history[-1] == turns[s.cut - 1]
        assert len(s.history) <= 4 and s.history[-1].role == "patient"
    # another seed, another choice; fewer states than asked when dialogues run out
    other = heldout.select_states(dialogues, sampled, 12, 3, 8, 4)
    assert [(s.dialogue, s.cut) for s in other] != [(s.dialogue, s.cut) for s in states]
    assert len(heldout.select_states(dialogues, sampled, 100, 2, 7, 4)) == 10


def test_a_sampler_reading_another_file_excludes_nothing_and_no_section_is_an_error(tmp_path):
    params, path = toy_params(tmp_path)
    assert heldout.sampled_dialogue_ids(params, str(tmp_path / "other.jsonl")) == set()
    assert heldout.sft_corpus_has(params, str(path)) is True
    with pytest.raises(ValueError, match="sampling"):
        heldout.sampled_dialogue_ids(parse_params({"simulation": {}}), str(path))


def test_committed_params_hold_out_60_states_of_the_15_unsplit_embedded_dialogues():
    params = load_params()
    hp = params.simulation.heldout
    sampled = heldout.sampled_dialogue_ids(params, hp.dialogues)
    dialogues = read_jsonl(hp.dialogues, Dialogue)
    states = heldout.select_states(dialogues, sampled, hp.n_states, hp.states_per_dialogue,
                                   params.shared.seed, hp.history_max_turns)
    assert len(sampled) == params.sampling.n_items == 32
    assert len(states) == 60 and len({s.dialogue for s in states}) == 15
    assert not {s.dialogue for s in states} & sampled


def test_grid_cells_are_left_out_unless_asked():
    docs = [DoctorConfig(name=n) for n in ("base", "sft", "cai_dep", "grid_avg_1", "agent")]
    pattern = r"grid_(?P<weighting>avg|dep)_(?P<trajectory>\d+)"
    assert [d.name for d in heldout.heldout_doctors(docs, pattern, False)] == [
        "base", "sft", "cai_dep", "agent"]
    assert len(heldout.heldout_doctors(docs, pattern, True)) == 5


def test_the_cost_estimate_is_states_times_policies_at_the_measured_rates():
    gen, rem = heldout.estimated_seconds(60, 6, 6)
    assert gen == pytest.approx(360 * 2.9) and rem == pytest.approx(360 * 6 * 0.46)
    # the committed run took 1,872 s for this work (reports/06_simulation/timings.json)
    assert 1500 < gen + rem < 2500


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


# -- the stage's call and its reports ------------------------------------------------------

def doctor_says(text):
    return lambda req: text


def test_run_writes_the_reports_with_scripted_policies(tmp_path):
    params, path = toy_params(tmp_path, n_states=8, states_per_dialogue=2)
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
    doctors = [DoctorConfig(name=n) for n in clients]
    out = heldout.run_heldout(st, p, h, doctors, lambda d: clients[d.name])
    table = pd.read_csv(tmp_path / "reports" / "heldout_compliance.csv")
    assert list(table.columns) == heldout.COLUMNS
    assert set(table["policy"]) == {"sft", "cai_dep"}      # the grid cell left out
    row = table.set_index(["policy", "rule"]).loc[("cai_dep", "all")]
    assert row["mean"] == 1.0 and row["delta_vs_sft"] == 1.0 and row["n_states"] == 8
    states = pd.read_csv(tmp_path / "reports" / "heldout_states.csv")
    assert list(states.columns) == heldout.STATE_COLUMNS and len(states) == 8
    assert states["in_sft_corpus"].all()
    assert not set(states["dialogue"]) & heldout.sampled_dialogue_ids(params, str(path))
    assert (tmp_path / "reports" / "heldout_compliance.md").exists()
    turns = [json.loads(x) for x in
             (tmp_path / "data" / "heldout_turns.jsonl").read_text().splitlines()]
    assert len(turns) == 16 and turns[0]["turn"] == "How long?"    # label cut, raw kept
    assert turns[-1]["turn"] == "I comply." and turns[-1]["scores"]["A"] == 1.0
    assert heldout.metrics_of(out)["heldout/cai_dep"]["delta_vs_sft"] == 1.0
    # disabled: empty tables with the same columns, so the declared outputs exist
    off = parse_params({**{k: v for k, v in params.raw.items()},
                        "simulation": {"heldout": {"enabled": False}}})
    st_off = TmpStage(name="06_simulation", params=off)
    empty = heldout.run_heldout(st_off, off.simulation, h, doctors, lambda d: clients[d.name])
    assert empty.table.empty and heldout.metrics_of(empty) == {}
    assert list(pd.read_csv(tmp_path / "reports" / "heldout_compliance.csv").columns) == \
        heldout.COLUMNS


def test_stage_run_adds_heldout_compliance_after_the_sp_test(tmp_path, monkeypatch):
    from medpref.simulation import stage as sim_stage

    cases = [case("sp-a", "internal_medicine"), case("sp-b", "surgery", tests=())]
    write_jsonl(tmp_path / "cases.jsonl", cases)
    dialogues = tmp_path / "dialogues.jsonl"
    write_jsonl(dialogues, [dialogue(f"d{k}", 4) for k in range(5)])
    params = parse_params({
        "sampling": {"dialogues": str(dialogues), "n_items": 2, "future_rounds": 1,
                     "min_future_rounds": 1},
        "simulation": {
            "cases": str(tmp_path / "cases.jsonl"), "rounds": 1, "trained_policies": False,
            "grader": {"mode": "generate", "graded_items": None},
            "next_turn": {"enabled": False},
            "heldout": {"enabled": True, "dialogues": str(dialogues), "n_states": 6,
                        "states_per_dialogue": 2},
            "doctors": [{"name": "sft", "role": "policy"}, {"name": "good", "role": "good"}]}})
    clients = {"policy": client(doctor_says("Do you have a fever?"), "policy"),
               "good": client(doctor_says("I comply: do you have a fever?"), "good"),
               "patient": client(doctor_says("Yes."), "patient"),
               "judge": client(keyword_judge, "judge")}

    new_stage = scripted_sim_stage(tmp_path, monkeypatch, clients)
    monkeypatch.setattr(sim_stage, "rem_scorer",
                        lambda stage, p: (FakeScorer(), SimpleNamespace(rules=RULES), "fake"))
    out = sim_stage.run(new_stage(params))
    row = out.heldout.table.set_index(["policy", "rule"]).loc[("good", "all")]
    assert row["delta_vs_sft"] == 1.0 and row["n_states"] == 6
    assert out.metrics["heldout/good"]["mean"] == 1.0
    assert (tmp_path / "reports" / "heldout_states.md").exists()
