"""Controls in every SP test (issue 31): the four control doctors, the listing rule that
makes a recital of the checklist earn nothing, the gate that fails a run whose instrument
cannot tell a clinician's script from a lecture, the patient that does not steer and
knows its own opening words."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from medpref.contracts import ContractError, SPCase, Turn, read_jsonl, write_jsonl
from medpref.echo import list_pieces, speech_act
from medpref.params import REPO_ROOT
from medpref.sentences import split_sentences
from medpref.simulation import consult, controls, grading, tables
from medpref.simulation.config import GraderParams, PatientParams, SimulationParams
from medpref.simulation.graders import GraderContext, build_grader
from medpref.simulation.knowledge import build_knowledge_bases
from medpref.simulation.patients import ExtractivePatient, PatientContext
from medpref.stagekit import StageFailed
from test_simulation import case, client, scripted_sim_stage, toy_encode

EMBEDDED = REPO_ROOT / "data" / "embedded" / "sp_cases.jsonl"
COVERAGE = REPO_ROOT / "data" / "embedded" / "sp_script_coverage.jsonl"


def embedded_cases() -> list[SPCase]:
    return read_jsonl(EMBEDDED, SPCase)


def echo_aware(encode=toy_encode, **kw):
    setup = grading.GradingSetup(judge=None, templates=[], count_template=None, encode=encode,
                                 max_candidates=4)
    return build_grader("echo_aware", GraderContext(GraderParams(**kw), setup))


def four_symptom_case() -> SPCase:
    c = case("sp-l")
    return c.model_copy(update={"checklist": c.checklist.model_copy(update={
        "symptoms": ["fever", "phlegm", "wheeze", "rash"], "tests": ["chest X-ray"],
        "diseases": ["pneumonia"]})})


# -- the control doctors' turns ----------------------------------------------------------------

def turns_of(name, c, rounds=5, patient_says=("Yes.",)):
    """A control's turns over ``rounds`` rounds against a patient saying ``patient_says``."""
    doc = controls.build_control(name, controls.ControlContext({c.id: c}, rounds))
    conv = consult.Consultation(c.id, c.department, c.lang, name, doc.model_id,
                                [Turn(role="patient", text=c.chief_complaint)], kind="control")
    said = []
    for r in range(1, rounds + 1):
        (turn,) = doc.turns([conv], r)
        said.append(turn.text)
        conv.turns += [Turn(role="doctor", text=turn.text),
                       Turn(role="patient", text=patient_says[(r - 1) % len(patient_says)])]
    return said


def test_control_script_asks_the_whole_script_in_order_then_names_the_diagnosis():
    c = next(x for x in embedded_cases() if x.id == "sp-0001")
    said = turns_of("control_script", c)
    lines = [p["doctor"] for p in c.script]
    assert len(lines) == 23 and [len(controls.spread(lines, 5)[r]) for r in range(5)] == \
        [5, 5, 5, 4, 4]
    sentences = [s for t in said for s in split_sentences(t)]
    assert sentences[:-1] == lines                      # every line, in order, its own sentence
    assert sentences[-1] == ("From what you've told me, the most likely diagnosis is type 2 "
                             "diabetes mellitus.")
    assert controls.CONTROLS["control_script"].polarity == "positive"


def test_a_case_without_a_script_gets_one_question_per_symptom_and_one_request_per_test():
    c = case("sp-n").model_copy(update={"script": []})
    lines, derived = controls.script_lines(c)
    assert derived and lines == ["Any fever?", "Any phlegm?", "I'd like to check chest X-ray."]
    assert [speech_act(s) for s in lines] == ["question", "question", "recommendation"]
    said = turns_of("control_script", c, rounds=5)
    assert said[:3] == lines and said[3] == controls.NEUTRAL["en"]
    assert said[4] == "From what you've told me, the most likely diagnosis is pneumonia."
    zh = c.model_copy(update={"lang": "zh", "checklist": c.checklist.model_copy(update={
        "symptoms": ["发热"], "tests": ["血常规"], "diseases": ["肺炎"]})})
    assert controls.script_lines(zh)[0] == ["有没有发热？", "建议做血常规。"]
    assert [speech_act(s) for s in controls.script_lines(zh)[0]] == ["question", "recommendation"]


def test_control_reciter_lists_every_item_as_one_question_then_says_nothing():
    c = next(x for x in embedded_cases() if x.id == "sp-0002")
    said = turns_of("control_reciter", c)
    (sentence,) = split_sentences(said[0])
    assert speech_act(sentence) == "question"
    items = [*c.checklist.symptoms, *c.checklist.tests, *c.checklist.diseases]
    assert all(i.lower() in sentence.lower() for i in items)
    assert list_pieces(sentence) >= len(items)
    assert said[1:] == [controls.NEUTRAL["en"]] * 4
    assert speech_act(controls.NEUTRAL["en"]) == "statement"


def test_control_lecture_asks_nothing_and_control_echo_repeats_the_patient():
    c = case("sp-e")
    lecture = turns_of("control_lecture", c)
    assert set(lecture) == {controls.LECTURE["en"]}
    assert {speech_act(s) for s in split_sentences(lecture[0])} == {"statement"}
    assert {speech_act(s) for s in split_sentences(controls.LECTURE["zh"])} == {"statement"}
    echo = turns_of("control_echo", c, patient_says=("Since Monday.", "No."))
    assert echo == [c.chief_complaint, "Since Monday.", "No.", "Since Monday.", "No."]


def test_a_user_registers_a_control_kind_the_way_graders_and_patients_are():
    @controls.register_control("control_test_greeter")
    class Greeter(controls.ControlDoctor):
        polarity = controls.NEGATIVE

        def turn(self, case, consultation, round_no):
            return f"Hello {round_no}."

    try:
        assert SimulationParams(controls=["control_test_greeter"]).controls == [
            "control_test_greeter"]
        c = case("sp-g")
        setup = consult.SimulationSetup(patient=ExtractivePatient(PatientContext(
            PatientParams(), {c.id: c}, {}, toy_encode)), doctor_template=None, rounds=2)
        doc = controls.build_control("control_test_greeter",
                                     controls.ControlContext({c.id: c}, 2))
        (out,) = consult.simulate([c], doc, setup)
        assert out.kind == "control" and out.doctor_model == "control:control_test_greeter"
        assert out.doctor_turns == ["Hello 1.", "Hello 2."]
        assert out.record()["kind"] == "control"
    finally:
        del controls.CONTROLS["control_test_greeter"]


def test_controls_are_validated_by_name():
    with pytest.raises(ValueError, match="simulation.controls: no control doctor"):
        SimulationParams(controls=["control_nope"])
    with pytest.raises(ValueError, match="also named in simulation.doctors"):
        SimulationParams(doctors=[{"name": "control_echo"}], controls=["control_echo"])
    with pytest.raises(ValueError, match="name a control in simulation.controls"):
        SimulationParams(doctors=[{"name": "x", "kind": "control"}])
    with pytest.raises(ValueError, match="must be distinct"):
        SimulationParams(controls=["control_echo", "control_echo"])


# -- the patient: it knows its opening words and does not steer ----------------------------

def test_the_patients_neutral_fallback_is_no_claim_and_is_counted_per_doctor():
    from medpref.simulation.behaviour import consult_rows

    c = case("sp-f")
    p = SimulationParams()
    kbs = build_knowledge_bases([c], toy_encode, 128)
    patient = ExtractivePatient(PatientContext(p.patient, {c.id: c}, kbs, toy_encode))
    setup = consult.SimulationSetup(patient=patient, doctor_template=None, rounds=3)
    lecture = controls.build_control("control_lecture", controls.ControlContext({c.id: c}, 3))
    script = controls.build_control("control_script", controls.ControlContext({c.id: c}, 3))
    rows = consult_rows([*consult.simulate([c], lecture, setup),
                         *consult.simulate([c], script, setup)], kbs, toy_encode, p)
    by = {r["doctor"]: r for r in rows}
    assert by["control_lecture"]["fallbacks"] == by["control_lecture"]["nothing_asked"] == 3
    assert by["control_lecture"]["sentences"] == 0 and by["control_lecture"]["unsupported"] == 0
    assert by["control_script"]["fallbacks"] == 0 and by["control_script"]["sentences"] >= 3
    share = tables.doctor_behaviour(rows).set_index("doctor")["fallback_share"]
    assert share["control_lecture"] == 1.0 and share["control_script"] == 0.0


# -- the gate and the range -----------------------------------------------------------------

def per_case(rows):
    return pd.DataFrame([{"doctor": d, "kind": k, "case": c, "department": "im",
                          "symptoms": s, "tests": t, "diseases": x}
                         for d, k, c, s, t, x in rows])


def test_the_gate_reads_negatives_against_a_cap_and_the_script_against_its_expected_coverage():
    pc = per_case([
        ("control_script", "control", "c1", 0.7, 1.0, 1.0),
        ("control_script", "control", "c2", 0.4, None, 1.0),
        ("control_lecture", "control", "c1", 0.0, 0.0, 0.0),
        ("control_lecture", "control", "c2", 0.25, None, 0.0),
        ("control_echo", "control", "c1", 0.2, 0.0, 0.0),
        ("control_echo", "control", "c2", 0.0, None, 0.0)])
    expected = {("c1", "symptoms"): 1.0, ("c2", "symptoms"): 0.5, ("c1", "tests"): None,
                ("c1", "diseases"): 1.0, ("c2", "diseases"): 1.0}
    gate = tables.controls_gate(pc, {"control_script": "positive", "control_lecture": "negative",
                                     "control_echo": "negative"}, expected, 0.10, 0.8)
    g = gate.set_index(["control", "metric"])
    # script Sym.: mean 55 over c1, c2 against 0.8 × mean(100, 50) = 60
    assert g.loc[("control_script", "Sym."), "score"] == pytest.approx(55.0)
    assert g.loc[("control_script", "Sym."), "limit"] == pytest.approx(60.0)
    assert g.loc[("control_script", "Sym."), "passed"] == False  # noqa: E712
    assert pd.isna(g.loc[("control_script", "Test"), "passed"])    # no known coverage
    assert g.loc[("control_script", "Dis."), "passed"] == True  # noqa: E712
    assert g.loc[("control_lecture", "Sym."), "score"] == pytest.approx(12.5)
    assert g.loc[("control_lecture", "Sym."), "passed"] == False  # noqa: E712
    assert g.loc[("control_echo", "Sym."), "score"] == pytest.approx(10.0)
    assert g.loc[("control_echo", "Sym."), "passed"] == True  # noqa: E712  (≤ 10 % passes)
    with pytest.raises(StageFailed) as err:
        controls.check_controls(gate)
    msg = str(err.value)
    assert "control_script Sym. 55.0 (must be ≥ 60.0, 75.0 expected, 2 cases)" in msg
    assert "control_lecture Sym. 12.5 (must be ≤ 10.0, 2 cases)" in msg
    assert "control_echo" not in msg
    controls.check_controls(gate[gate["passed"] != False])  # noqa: E712  (passes silently)


def test_expected_coverage_comes_from_the_hand_reading_a_derived_script_or_nowhere():
    scripted, bare = case("sp-s"), case("sp-b").model_copy(update={"script": []})
    empty = case("sp-t", tests=())
    row = controls.ScriptCoverage(case="sp-s", category="symptoms", covered=1, total=2,
                                  asked=[{"item": "fever", "by": ["Q0: Do you have a fever?"]}],
                                  uncovered=[{"item": "phlegm", "reason": "not asked"}])
    exp = controls.expected_coverage([scripted, bare, empty], {("sp-s", "symptoms"): row})
    assert exp[("sp-s", "symptoms")] == 0.5
    assert exp[("sp-s", "tests")] is None                 # a real script nobody read by hand
    assert exp[("sp-b", "symptoms")] == exp[("sp-b", "tests")] == 1.0   # derived: all asked
    # ... but not a symptom the opening complaint already names (asking it repeats it)
    told = bare.model_copy(update={"id": "sp-c", "chief_complaint": "Fever since Monday"})
    assert controls.expected_coverage([told], {})[("sp-c", "symptoms")] == 0.5
    assert controls.named_in_complaint("Double vision", "double vision")
    assert not controls.named_in_complaint("pleuritic chest pain", "Chest pain and fever")
    assert exp[("sp-s", "diseases")] == 1.0               # the closing sentence names it
    assert exp[("sp-t", "tests")] is None                 # empty category


def test_the_committed_script_coverage_matches_the_embedded_scripts_and_checklists():
    cases = embedded_cases()
    hand = controls.load_script_coverage(COVERAGE, cases)
    english = [c for c in cases if c.lang == "en"]
    assert len(english) == 15 and set(hand) == {(c.id, cat) for c in english
                                               for cat in ("symptoms", "tests", "diseases")}
    by_id = {c.id: c for c in cases}
    for (cid, cat), row in hand.items():
        script = [p["doctor"] for p in by_id[cid].script]
        for a in row.asked:
            for line in a.by:
                if cat != "diseases":         # "Q3: <line>" quotes the script exactly
                    k, text = line.split(": ", 1)
                    assert script[int(k[1:])] == text, (cid, a.item, line)
        assert all(u.reason for u in row.uncovered)


def test_a_bad_coverage_row_names_its_file_line_and_field(tmp_path):
    cases = embedded_cases()
    rows = [json.loads(x) for x in COVERAGE.read_text().splitlines()]
    bad = tmp_path / "cov.jsonl"
    write_jsonl(bad, [rows[0], {**rows[1], "covered": rows[1]["covered"] + 1}])
    with pytest.raises(ContractError, match=r"cov\.jsonl:2: field '<record>'|cov\.jsonl:2"):
        controls.load_script_coverage(bad, cases)
    stale = dict(rows[0], asked=rows[0]["asked"][1:], covered=rows[0]["covered"] - 1,
                 uncovered=[{"item": "something else", "reason": "x"}])
    write_jsonl(bad, [stale])
    with pytest.raises(ContractError, match=r"cov\.jsonl:1: field 'asked/uncovered'"):
        controls.load_script_coverage(bad, cases)
    write_jsonl(bad, [rows[0], rows[0]])
    with pytest.raises(ContractError, match=r"cov\.jsonl:2: field 'case': a second row"):
        controls.load_script_coverage(bad, cases)
    write_jsonl(bad, [{**rows[0], "categroy": "symptoms"}])
    with pytest.raises(ContractError, match=r"cov\.jsonl:1: field 'categroy'"):
        controls.load_script_coverage(bad, cases)


def test_the_range_table_sets_each_mde_against_script_minus_lecture():
    rows = []
    for i in range(6):
        rows += [("control_script", "control", f"c{i}", 0.5 + 0.1 * (i % 2), 1.0, 1.0),
                 ("control_lecture", "control", f"c{i}", 0.0, 0.0, 0.0),
                 ("base", "model", f"c{i}", 0.1 * (i % 3), 0.0, 0.0),
                 ("sft", "model", f"c{i}", 0.1 * (i % 2), 0.0, 1.0 * (i % 2))]
    pc = per_case(rows)
    kinds = {"control_script": "control", "control_lecture": "control"}
    paired = tables.with_kind(tables.table2_paired(pc, n_boot=500), kinds)
    assert set(paired.loc[paired["kind"] == "control", "doctor"]) == {"control_script",
                                                                      "control_lecture"}
    rng = tables.table2_range(pc, paired, kinds, n_boot=500)
    sym = rng[rng["metric"] == "Sym."]
    assert sym["range_diff"].iloc[0] == pytest.approx(55.0) and sym["range_cases"].iloc[0] == 6
    assert set(zip(sym["doctor"], sym["vs"])) == {("sft", "base"), ("base", "sft")}  # models
    sft = sym.set_index("doctor").loc["sft"]
    assert sft["mde_share_of_range"] == pytest.approx(sft["mde"] / 55.0)
    assert sft["reading"] == "MDE inside the range"
    test_row = rng[rng["metric"] == "Test"].iloc[0]
    assert test_row["range_diff"] == pytest.approx(100.0)
    assert tables.range_reading(10.0, 12.0) == "MDE larger than the range"
    assert tables.range_reading(0.0, 1.0).startswith("no range")
    alone = tables.table2_range(pc[pc["doctor"].str.startswith("control")], paired.iloc[0:0],
                                kinds)
    assert list(alone["reading"]) == ["no model comparison"] * 3
    assert list(alone["range_diff"]) == pytest.approx([55.0, 100.0, 100.0])


# -- the stage: labelled rows, the range, the gate ------------------------------------------

def test_the_stage_runs_the_controls_as_labelled_rows_and_writes_range_and_gate(
        tmp_path, monkeypatch):
    from medpref.params import parse_params
    from medpref.simulation import whole

    # cases of 4+ items: a recital of 3 items is a 3-item question, which the rule allows
    four = four_symptom_case()
    write_jsonl(tmp_path / "cases.jsonl", [
        four.model_copy(update={"id": "sp-a"}),
        four.model_copy(update={"id": "sp-b", "department": "surgery",
                                "checklist": four.checklist.model_copy(update={"tests": []})})])
    params = parse_params({"simulation": {
        "cases": str(tmp_path / "cases.jsonl"), "rounds": 2, "trained_policies": False,
        "rem_radar": False, "next_turn": {"enabled": False}, "grader": {"graded_items": None},
        "doctors": [{"name": "base", "role": "policy"}]}})
    clients = {"policy": client(lambda r: "Do you have a fever?", "policy"),
               "judge": client(lambda r: "no", "judge")}
    out = whole.run(scripted_sim_stage(tmp_path, monkeypatch, clients)(params))
    names = ["base", "control_script", "control_reciter", "control_lecture", "control_echo",
             "control_testlist"]
    kinds = ["model"] + ["control"] * 5
    assert list(out.table2["doctor"]) == names and list(out.table2["kind"]) == kinds
    assert set(out.table2_ci.groupby("doctor")["kind"].first().items()) == set(zip(names, kinds))
    assert set(out.per_case["kind"]) == {"model", "control"}
    assert {"kind", "fallback_share"} <= set(out.behaviour.columns)
    t2 = out.table2.set_index("doctor")
    assert t2.loc["control_script", "ALL Dis."] == 100.0
    for neg in names[2:]:
        assert t2.loc[neg, ["ALL Sym.", "ALL Dis."]].max() == 0.0
    gate = out.controls_gate.set_index(["control", "metric"])
    assert pd.isna(gate.loc[("control_script", "Sym."), "passed"])   # no hand reading of sp-a
    assert gate.loc[("control_script", "Dis."), "passed"] == True  # noqa: E712
    reports = tmp_path / "reports" / "06_sp_grading"
    for name in ("table2_range", "controls_gate", "doctors"):
        assert (reports / f"{name}.md").exists() and (reports / f"{name}.csv").exists()
    doctors = pd.read_csv(reports / "doctors.csv").set_index("doctor")
    assert doctors.loc["control_lecture", "kind"] == "control"
    assert doctors.loc["control_lecture", "fallback_share"] == 1.0
    assert doctors.loc["control_lecture", "model_id"] == "control:control_lecture"
    assert out.metrics["sp_range/Dis."]["range_diff"] == 100.0
    assert out.metrics["sp/control_lecture"] == {"Sym.": 0.0, "Test": 0.0, "Dis.": 0.0}
    html = (reports / "transcripts.html").read_text()
    assert 'control_echo <span class="tag tag-control">control</span>' in html
    lines = [json.loads(x) for x in (reports.parent / "06_simulation" / "records" /
                                     "consultations.jsonl").read_text().splitlines()]
    assert {r["kind"] for r in lines} == {"model", "control"}
    assert len(lines) == 2 * len(names)


# -- the controls on the embedded cases (MiniLM, the extractive patient, the default grader) --

@pytest.fixture(scope="module")
def embedded_run():
    """The four controls on all 17 embedded cases at 5 rounds, as stage 06 runs them
    (about two CPU-minutes: MiniLM for the patient, the grader and the fidelity check)."""
    from medpref.embedding import load_encoder
    from medpref.simulation.behaviour import consult_rows
    from medpref.simulation.outputs import per_case_rows
    from medpref.simulation.patients import build_patient

    p, cases = SimulationParams(), embedded_cases()
    encode = load_encoder(REPO_ROOT / p.embedding_model)
    kbs = build_knowledge_bases(cases, encode, p.patient.chunk_tokens)
    by_id = {c.id: c for c in cases}
    patient = build_patient("extractive", PatientContext(p.patient, by_id, kbs, encode))
    setup = consult.SimulationSetup(patient=patient, doctor_template=None, rounds=p.rounds)
    grader = echo_aware(encode, **p.grader.model_dump(include={"match_threshold",
                                                               "lexical_threshold",
                                                               "echo_overlap", "echo_min_new"}))
    consults, grades, rows = [], [], []
    for name in p.controls:
        doc = controls.build_control(name, controls.ControlContext(by_id, p.rounds))
        mine = consult.simulate(cases, doc, setup)
        consults += mine
        grades += grader.grade(mine, by_id)
        rows += consult_rows(mine, kbs, encode, p)
    pc = pd.DataFrame(per_case_rows(consults, grades))
    hand = controls.load_script_coverage(COVERAGE, cases)
    gate = tables.controls_gate(pc, {n: controls.CONTROLS[n].polarity for n in p.controls},
                                controls.expected_coverage(cases, hand),
                                p.controls_gate.max_negative_pass, p.controls_gate.script_fraction)
    return {"table2": tables.table2(pc.to_dict("records")).set_index("doctor"), "grades": grades,
            "gate": gate.set_index(["control", "metric"]), "rows": rows,
            "behaviour": tables.doctor_behaviour(rows).set_index("doctor")}


@pytest.mark.slow
@pytest.mark.parametrize("control", ["control_reciter", "control_lecture", "control_echo",
                                     "control_testlist"])
def test_every_negative_control_scores_at_most_ten_percent_on_the_embedded_cases(embedded_run,
                                                                                 control):
    t2 = embedded_run["table2"]
    assert t2.loc[control, ["ALL Sym.", "ALL Test", "ALL Dis."]].max() <= 10.0
    if control != "control_reciter":          # no question, no item: exactly nothing
        assert t2.loc[control, ["ALL Sym.", "ALL Test", "ALL Dis."]].max() == 0.0
    assert all(embedded_run["gate"].loc[control, "passed"])


@pytest.mark.slow
def test_the_reciters_list_is_what_the_listing_rule_refuses(embedded_run):
    """Without the rule its one sentence would match most items; with it, none passes and
    the grades say why."""
    listed = [g for g in embedded_run["grades"] if g.doctor == "control_reciter"
              and g.listing_excluded]
    assert len(listed) > 100
    assert not any(g.passed for g in embedded_run["grades"] if g.doctor == "control_reciter")


@pytest.mark.slow
def test_control_script_names_every_diagnosis_and_loses_nothing_to_the_listing_rule(
        embedded_run):
    t2, grades = embedded_run["table2"], embedded_run["grades"]
    assert t2.loc["control_script", "ALL Dis."] == 100.0
    assert not any(g.listing_excluded for g in grades if g.doctor == "control_script")
    b = embedded_run["behaviour"]
    # the script's own questions always find their scripted answers; a lecture never asks
    assert b.loc["control_script", "fallback_share"] == 0.0
    assert b.loc["control_lecture", "fallback_share"] == 1.0
    assert (b["patient_unsupported_share"] == 0.0).all()


@pytest.mark.slow
@pytest.mark.parametrize("metric", ["Sym.", "Test", "Dis."])
def test_control_script_reaches_its_gate_on_the_embedded_cases(embedded_run, metric):
    """A clinician's script earns at least simulation.controls_gate.script_fraction of what
    a clinician reads it to ask (data/embedded/sp_script_coverage.jsonl). Before the
    grader's request-forms and question-one-new-unit changes (sp_grader_changes.yaml) it
    did not: clarifying questions were echoes, requests were statements."""
    row = embedded_run["gate"].loc[("control_script", metric)]
    assert row["passed"] == True, row  # noqa: E712
    assert row["cases"] == (17 if metric == "Dis." else 15)
