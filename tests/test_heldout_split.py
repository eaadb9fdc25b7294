"""Stage 06 and the written split (issues 31, 32): next-turn items from eval dialogues only,
the GPD judge's validity check, the share of turns that ask, the SP overlap check."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from medpref.contracts import Dialogue, SPCase, Turn, read_jsonl, write_jsonl
from medpref.data.split import DialogueSplit, load_split
from medpref.metrics.intervals import paired_difference, proportion_ci
from medpref.params import load_params, repo_path
from medpref.prompts import load_prompt
from medpref.simulation import grading, nextturn, overlap, questions
from test_simulation import JUDGE_CALL, client, toy_encode

# -- next-turn items ---------------------------------------------------------------------------


def test_next_turn_items_are_the_eval_dialogues_only():
    from medpref.simulation.common import held_out_dialogues

    params = load_params()
    p = params.simulation
    split = load_split(repo_path(params.shared.split))
    chosen = held_out_dialogues(p, params)
    assert len(chosen) == p.next_turn.n_dialogues == len(split.ids("eval")) == 18
    assert {split.part(d.id) for d in chosen} == {"eval"}
    items = nextturn.next_turn_items(chosen, p.next_turn.cuts_per_dialogue, params.shared.seed,
                                     p.next_turn.history_max_turns)
    assert {split.part(it.dialogue) for it in items} == {"eval"} and len(items) == 18
    # nothing the policies trained on: no reference or history turn is a train/dev turn
    # (turns of a sentence or more: "What's the treatment?" may be said in any dialogue)
    trained = {t.text for d in read_jsonl(repo_path(p.next_turn.dialogues), Dialogue)
               if split.part(d.id) != "eval" for t in d.turns if len(t.text) > 40}
    assert not any(it.reference in trained or any(t.text in trained for t in it.history)
                   for it in items)


def test_next_turn_dialogue_ids_outside_eval_are_refused():
    from medpref.simulation.common import held_out_dialogues

    params = load_params()
    split = load_split(repo_path(params.shared.split))
    nt = params.simulation.next_turn
    picked = params.simulation.model_copy(update={"next_turn": nt.model_copy(
        update={"dialogue_ids": split.ids("eval")[:2]})})
    assert [d.id for d in held_out_dialogues(picked, params)] == split.ids("eval")[:2]
    train = split.ids("train")[0]
    bad = params.simulation.model_copy(update={"next_turn": nt.model_copy(
        update={"dialogue_ids": [split.ids("eval")[0], train]})})
    with pytest.raises(ValueError, match=rf"\['{train}'\] are not in the eval part"):
        held_out_dialogues(bad, params)


# -- is GPD valid with this judge? -------------------------------------------------------------

def items_of(n: int) -> list[nextturn.NextTurnItem]:
    return [nextturn.NextTurnItem(f"d{k}@1", f"d{k}", "en",
                                  [Turn(role="patient", text=f"complaint {k}")],
                                  f"Reference {k}: how long have you had it?")
            for k in range(n)]


def gpd_judge(answer):
    """A scripted judge: ``answer(prediction, reference)`` → its text."""
    def respond(req):
        text = req.messages[-1]["content"]
        pred = re.search(r"Predicted reply: (.*)", text).group(1).strip()
        ref = re.search(r"Reference reply: (.*)", text).group(1).strip()
        return answer(pred, ref)
    return grading.Judge(client(respond, "judge"), JUDGE_CALL, mode="generate")


def test_a_judge_that_tells_a_turn_from_an_unrelated_one_makes_gpd_valid():
    items = items_of(8)
    check = nextturn.gpd_check(items, gpd_judge(lambda p, r: "A" if p == r else "C"),
                               load_prompt("sp_gpt_distance"), n_boot=500, seed=3)
    assert check.valid
    t = check.table.set_index("comparison")
    assert t.loc["reference vs itself", "gpd"] == 0.0 and t.loc["reference vs itself", "fully"] == 8
    assert t.loc["reference vs unrelated", "gpd"] == 2.0
    diff = t.loc["unrelated − itself (paired)"]
    assert diff["gpd"] == 2.0 and diff["ci_lo"] == 2.0 and diff["p_value"] == pytest.approx(2 / 256)
    assert diff["verdict"] == "GPD valid with this judge"
    # each unrelated turn is another dialogue's reference, and the choice is seeded
    assert all(r["unrelated"] != r["reference"] for r in check.rows)
    assert [r["unrelated"] for r in check.rows] == nextturn.unrelated_references(items, 3)
    assert nextturn.unrelated_references(items, 4) != nextturn.unrelated_references(items, 3)
    m = nextturn.gpd_check_metrics(check)["next_turn/gpd_check"]
    assert m == {"items": 8, "self_gpd": 0.0, "unrelated_gpd": 2.0, "diff": 2.0, "ci_lo": 2.0,
                 "ci_hi": 2.0, "p_value": round(2 / 256, 3), "valid": True}


@pytest.mark.parametrize("answer, why", [
    (lambda p, r: "A", "rates everything fully implied (the 135M judge's habit)"),
    (lambda p, r: "C" if p == r else "B", "rates the reference itself worse"),
    (lambda p, r: "A" if p == r and p.startswith(("Reference 0", "Reference 1")) else "C",
     "tells them apart on too few items"),
])
def test_a_judge_that_does_not_separate_makes_gpd_not_valid(answer, why):
    check = nextturn.gpd_check(items_of(8), gpd_judge(answer), load_prompt("sp_gpt_distance"),
                               n_boot=500, seed=3)
    assert not check.valid, why
    assert check.table.iloc[-1]["verdict"] == nextturn.GPD_NOT_VALID


def test_unusable_judge_answers_are_counted_and_left_out_of_the_pairs():
    check = nextturn.gpd_check(items_of(8), gpd_judge(
        lambda p, r: "Perhaps." if r.startswith("Reference 0") else ("A" if p == r else "C")),
        load_prompt("sp_gpt_distance"), n_boot=500, seed=0)
    t = check.table.set_index("comparison")
    assert t.loc["reference vs itself", "unusable"] == 1
    assert t.loc["unrelated − itself (paired)", "items"] == 7 and check.valid


def test_an_invalid_check_marks_the_next_turn_tables_and_withdraws_gpd_verdicts():
    rows = [{"doctor": d, "item": f"d{i}@1", "prediction": "Any fever?",
             "implication": "fully" if d == "good" else "not", "rougeL_f1": 0.2, "bleu4": 0.1}
            for d in ("sft", "good") for i in range(10)]
    summary = pd.DataFrame([nextturn.summarise(d, [r for r in rows if r["doctor"] == d])
                            for d in ("sft", "good")])
    paired = nextturn.paired_table(rows, "sft", n_boot=200)
    assert paired.set_index("metric").loc["gpd", "verdict"] == "lower"
    invalid = nextturn.GpdCheck([], pd.DataFrame(), valid=False)
    s2, p2 = nextturn.apply_gpd_check(summary, paired, invalid)
    assert set(s2["gpd_note"]) == {nextturn.GPD_NOT_VALID} and not s2["gpd_valid"].any()
    assert p2.set_index("metric").loc["gpd", "verdict"] == "not valid"
    assert p2.set_index("metric").loc["rougeL_f1", "verdict"] == "no detectable difference"
    assert paired.set_index("metric").loc["gpd", "verdict"] == "lower"   # input untouched
    s3, p3 = nextturn.apply_gpd_check(summary, paired, nextturn.GpdCheck([], pd.DataFrame(), True))
    assert set(s3["gpd_note"]) == {""} and p3.equals(paired)
    with pytest.raises(ValueError, match="at least two dialogues"):
        nextturn.unrelated_references(items_of(1), 0)
    one = nextturn.gpd_check(items_of(1), gpd_judge(lambda p, r: 1 / 0),   # never asked
                             load_prompt("sp_gpt_distance"), n_boot=100)
    assert not one.valid and one.table.iloc[-1]["items"] == 0
    assert nextturn.gpd_check_metrics(one)["next_turn/gpd_check"]["valid"] is False


# -- the share of turns that ask -----------------------------------------------------------------

def test_question_share_with_wilson_intervals_and_pairs_against_base():
    asks, tells = "How long has it hurt?", "Take paracetamol."
    states = [(f"d{k}", c) for k in range(6) for c in (1, 3)]           # 6 dialogues x 2
    base = [asks if k % 3 == 0 else tells for k in range(12)]           # 4 of 12 ask
    sft = [asks] * 11 + [None]                                          # one failed turn
    records = [{"policy": name, "dialogue": d, "cut": c, "turn": t}
               for name, turns in (("base", base), ("sft", sft)) for (d, c), t in
               zip(states, turns)]
    rows = questions.state_turns(records)
    table = questions.question_share_table(rows, n_boot=500, seed=2)
    assert list(table.columns) == questions.COLUMNS
    t = table.set_index(["setting", "doctor"])
    b, s = t.loc[("eval states", "base")], t.loc[("eval states", "sft")]
    wilson = proportion_ci(4, 12)
    assert (b["turns"], b["asking"], b["share"]) == (12, 4, pytest.approx(1 / 3))
    assert (b["share_lo"], b["share_hi"]) == pytest.approx((wilson.lo, wilson.hi))
    assert b["verdict"] == "reference" and np.isnan(b["diff"])
    a = np.array([1.0] * 11)
    ref = paired_difference(a, np.array([float(x == asks) for x in base[:11]]), n_boot=500,
                            seed=2, clusters=[d for d, _ in states[:11]])
    assert (s["turns"], s["paired"], s["diff"]) == (11, 11, pytest.approx(ref.diff))
    assert (s["ci_lo"], s["ci_hi"], s["p_value"]) == pytest.approx((ref.lo, ref.hi, ref.p_value))
    assert s["diff"] == pytest.approx(1 - 4 / 11)      # base asks in 4 of the 11 paired


def test_sp_openings_are_each_consultations_first_doctor_turn():
    def consult(doctor, case, *doctor_turns):
        turns = [Turn(role="patient", text="I feel ill.")]
        for t in doctor_turns:
            turns += [Turn(role="doctor", text=t), Turn(role="patient", text="ok")]
        return SimpleNamespace(doctor=doctor, case_id=case, turns=turns,
                               doctor_turns=list(doctor_turns))
    consults = [consult("base", "sp-1", "Take rest.", "Any fever?"),
                consult("base", "sp-2", "When did it start?"),
                consult("sft", "sp-1", "Any fever?"), consult("sft", "sp-2"),   # failed
                consult("lecture", "sp-1", "Diabetes is a disease of sugar.")]
    rows = questions.opening_turns(consults)
    assert [r["asks"] for r in rows] == [False, True, True, None, False]
    t = questions.question_share_table(rows, n_boot=200).set_index("doctor")
    assert t.loc["base", "share"] == 0.5 and t.loc["sft", "turns"] == 1
    assert t.loc["sft", "paired"] == 1 and t.loc["sft", "diff"] == 1.0
    assert t.loc["lecture", "share"] == 0.0 and t.loc["lecture", "share_hi"] > 0
    m = questions.metrics_of(t.reset_index())
    assert m["question_share/SP_openings/base"]["share"] == 0.5


# -- the SP overlap check ----------------------------------------------------------------------

#: The issue's 9 SP cases with a training dialogue of the same disease and presentation.
KNOWN = {("sp-0001", "d-0020"), ("sp-0005", "d-0007"), ("sp-0007", "d-0024"),
         ("sp-0008", "d-0025"), ("sp-0009", "d-0023"), ("sp-0010", "d-0027"),
         ("sp-0014", "d-0038"), ("sp-0016", "d-0005"), ("sp-0017", "d-0030")}


def embedded_overlap(encode, split=None):
    params = load_params()
    p = params.simulation
    o = p.split_overlap
    cases = read_jsonl(repo_path(p.cases), SPCase)
    texts, unchecked = overlap.case_texts(cases, overlap.load_gloss(repo_path(o.gloss)))
    pairs = overlap.overlap_pairs(
        texts, overlap.dialogue_texts(repo_path(o.dialogues)),
        split or load_split(repo_path(params.shared.split)), encode,
        overlap.OverlapSettings(o.flag_cosine, o.flag_shared_words, o.near_cosine))
    return pairs, unchecked


@pytest.mark.slow
def test_the_overlap_check_finds_the_nine_known_pairs_and_none_is_in_train():
    from medpref.embedding import load_encoder

    encode = load_encoder(repo_path("models/all-minilm-l6-v2"))
    pairs, unchecked = embedded_overlap(encode)
    assert unchecked == []                       # the two Chinese cases have a gloss
    flagged = pairs[pairs["status"] == "flagged"]
    assert KNOWN <= set(zip(flagged["case"], flagged["dialogue"]))
    assert overlap.flagged_in_train(pairs).empty and set(flagged["part"]) == {"eval"}
    # the split as it was before issue 31 (these dialogues in train) fails the check
    committed = load_split(repo_path(load_params().shared.split))
    old = DialogueSplit({**committed.parts, **{d: "train" for _, d in KNOWN}})
    moved = overlap.flagged_in_train(embedded_overlap(encode, old)[0])
    assert set(zip(moved["case"], moved["dialogue"])) >= KNOWN


def test_disease_words_leave_out_words_that_name_no_disease():
    assert overlap.disease_words(["acute otitis media (right)"]) == {"otiti", "media"}
    assert overlap.disease_words(["Graves' disease (hyperthyroidism)"]) >= {"grave"}
    assert not overlap.disease_words(["chronic disease syndrome"])


def test_check_split_fails_the_stage_on_a_flagged_training_dialogue(tmp_path):
    from medpref.params import parse_params
    from medpref.stagekit import Stage, StageFailed

    def d(did, complaint, diagnosis):
        return Dialogue(id=did, turns=[Turn(role="patient", text="hi")],
                        meta={"chief_complaint": complaint, "diagnosis": diagnosis})
    write_jsonl(tmp_path / "d.jsonl", [d("a", "ear pain", "acute otitis media"),
                                       d("b", "knee pain", "patellofemoral pain syndrome")])
    case = read_jsonl(repo_path("data/embedded/sp_cases.jsonl"), SPCase)[9]   # otitis media
    assert case.id == "sp-0010"

    class TmpStage(Stage):
        reports_dir = property(lambda self: tmp_path / "reports")

    def run(parts, trained=("dpo_cai_avg",)):
        (tmp_path / "split.yaml").write_text(parts)
        params = parse_params({"shared": {"split": str(tmp_path / "split.yaml")},
                               "simulation": {"split_overlap": {
                                   "dialogues": str(tmp_path / "d.jsonl"), "gloss": None}}})
        return overlap.check_split(TmpStage(name="06_simulation", params=params),
                                   params.simulation, [case], toy_encode, trained)

    table = run("train: [b]\neval: [a]\n")        # "otiti media" shared: flagged, in eval
    assert table.iloc[0][["dialogue", "part", "status"]].tolist() == ["a", "eval", "flagged"]
    assert not (tmp_path / "reports").exists()   # the stage writes the table from its records
    assert overlap.table_of(overlap.overlap_records(table)).equals(table)
    with pytest.raises(StageFailed, match=r"1 training dialogues .* \(sp-0010 ~ a "
                                          r"\(cosine .*, shared 'media otiti'\)\); trained "
                                          r"policies under test: dpo_cai_avg"):
        run("train: [a, b]\n")
    assert overlap.metrics_of(table)["split_overlap"] == {
        "flagged": 1, "flagged_in_train": 0, "near": 0, "unchecked_cases": 0}


def test_check_split_only_reports_when_no_trained_policy_is_evaluated(tmp_path, capsys):
    """Issue 41 item 7: with the base doctor and the controls alone, a flagged training
    dialogue is reported (table, metrics, a printed line) and the stage goes on."""
    from medpref.params import parse_params
    from medpref.simulation.common import trained_names
    from medpref.simulation.config import DoctorConfig
    from medpref.stagekit import Stage

    write_jsonl(tmp_path / "d.jsonl", [Dialogue(
        id="a", turns=[Turn(role="patient", text="hi")],
        meta={"chief_complaint": "ear pain", "diagnosis": "acute otitis media"})])
    (tmp_path / "split.yaml").write_text("train: [a]\n")
    params = parse_params({"shared": {"split": str(tmp_path / "split.yaml")},
                           "simulation": {"split_overlap": {
                               "dialogues": str(tmp_path / "d.jsonl"), "gloss": None}}})
    case = read_jsonl(repo_path("data/embedded/sp_cases.jsonl"), SPCase)[9]
    doctors = [DoctorConfig(name="base"), DoctorConfig(name="control_echo", role="",
                                                       kind="control")]
    assert trained_names(doctors) == []
    table = overlap.check_split(Stage(name="06_simulation", params=params), params.simulation,
                                [case], toy_encode, trained_names(doctors))
    assert overlap.metrics_of(table)["split_overlap"]["flagged_in_train"] == 1
    assert "reported only: no trained policy" in capsys.readouterr().out
    assert trained_names([*doctors, DoctorConfig(name="sft", adapter="models/sft")]) == ["sft"]


def test_a_chinese_case_without_a_gloss_is_listed_as_not_checked(tmp_path):
    cases = read_jsonl(repo_path("data/embedded/sp_cases.jsonl"), SPCase)
    texts, unchecked = overlap.case_texts(cases, {})
    assert unchecked == ["sp-0016", "sp-0017"] and len(texts) == 15
    table = overlap.with_unchecked(pd.DataFrame(columns=overlap.COLUMNS), unchecked)
    assert overlap.metrics_of(table)["split_overlap"]["unchecked_cases"] == 2


def test_bad_glosses_and_dialogues_without_meta_name_file_line_and_field(tmp_path):
    from medpref.contracts import ContractError

    g = tmp_path / "gloss.yaml"
    g.write_text("sp-1:\n  chief_complaint: cough\n  diseases: [asthma]\n"
                 "sp-2:\n  chief_complaint: fever\n")
    with pytest.raises(ContractError, match=r"gloss.yaml:4: field 'sp-2'"):
        overlap.load_gloss(g)
    f = tmp_path / "d.jsonl"
    write_jsonl(f, [Dialogue(id="a", turns=[Turn(role="patient", text="hi")],
                             meta={"chief_complaint": "cough", "diagnosis": "asthma"}),
                    Dialogue(id="b", turns=[Turn(role="patient", text="hi")],
                             meta={"chief_complaint": "cough"})])
    with pytest.raises(ContractError, match=r"d.jsonl:2: field 'meta.diagnosis'"):
        overlap.dialogue_texts(f)
