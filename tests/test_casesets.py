"""One grader on every case set the SP stage accepts (issue 41, items 4 and 5): the controls
on short fixtures made like the published rows (a NEJM brief, a CSPT case with long Chinese
checklist sentences, an asymptomatic MedQA screening case), the rules behind their
outcomes, the hand-read coverage the gate uses, and the real files where they are."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from medpref.contracts import ContractError, SPCase, Turn
from medpref.data.agentclinic import agentclinic_cases
from medpref.data.cspt import cspt_cases
from medpref.data.readers import shared_data_dir
from medpref.echo import asks_history, doctor_sentences, names_disease, zh_item_parts, zh_share
from medpref.params import REPO_ROOT, load_params
from medpref.simulation import casesets, consult, controls, grading
from medpref.simulation.config import GraderParams
from medpref.simulation.graders import GraderContext, build_grader

FIXTURES = Path(__file__).parent / "fixtures" / "casesets"
COVERAGE = REPO_ROOT / "data" / "embedded" / "sp_script_coverage.jsonl"
NEGATIVE = ("control_reciter", "control_lecture", "control_echo", "control_testlist")
#: where a user keeps CSPT's two published archives (the project may not ship them)
CSPT_ENV = "MEDPREF_CSPT"


def lexical_grader(**kw):
    """The default grader without an encoder: content units only (no model to load)."""
    setup = grading.GradingSetup(judge=None, templates=[], count_template=None, encode=None,
                                 max_candidates=4)
    return build_grader("echo_aware", GraderContext(GraderParams(**kw), setup))


def play(name: str, case: SPCase, replies=("I'm not sure about that.",), rounds=5):
    """A control's consultation against a patient that gives ``replies`` in turn."""
    doc = controls.build_control(name, controls.ControlContext({case.id: case}, rounds))
    conv = consult.Consultation(case.id, case.department, case.lang, name, doc.model_id,
                                [Turn(role="patient", text=case.chief_complaint)],
                                kind="control")
    for r in range(1, rounds + 1):
        (turn,) = doc.turns([conv], r)
        conv.turns += [Turn(role="doctor", text=turn.text),
                       Turn(role="patient", text=replies[(r - 1) % len(replies)])]
    return conv


def scores(case: SPCase, names=(*NEGATIVE, "control_script"), replies=("I'm not sure.",)):
    """Each control's c/m per category on the case (None: not measured)."""
    out = {}
    for name in names:
        conv = play(name, case, replies)
        grades = grading.leave_out_unmeasurable(lexical_grader().grade([conv], {case.id: case}),
                                                {case.id: case})
        out[name] = grading.case_scores(grades, [case.id])[0]
    return out


@pytest.fixture(scope="module")
def nejm_case() -> SPCase:
    (case,) = agentclinic_cases(FIXTURES, file="nejm")
    return case


@pytest.fixture(scope="module")
def screening_case() -> SPCase:
    (case,) = agentclinic_cases(FIXTURES, file="medqa_extended")
    return case


@pytest.fixture(scope="module")
def cspt_case() -> SPCase:
    (case,) = cspt_cases(FIXTURES / "cspt")
    return case


# -- a NEJM brief: every symptom in the complaint, a diagnosis inside a recital -----------------

def test_nejm_brief_symptoms_cannot_measure_and_are_left_out(nejm_case):
    assert nejm_case.checklist.symptoms == ["Yellow-brown spots on her shins"]
    assert grading.unmeasurable_categories(nejm_case) == {"symptoms"}
    got = scores(nejm_case)
    assert all(s["symptoms"] is None for s in got.values())       # left out, not scored 0
    assert got["control_script"]["tests"] == 1.0 and got["control_script"]["diseases"] == 1.0
    for name in NEGATIVE:
        assert got[name]["tests"] == 0.0 and got[name]["diseases"] == 0.0, name


def test_the_reciters_question_is_a_recital_and_names_no_diagnosis(nejm_case):
    """Issue 41's sentence: one question holding a symptom, a test and the diagnosis of a
    three-item case earned all three; now a history question names no diagnosis and a
    question mentioning three items of more than one category earns nothing."""
    said = ("Do you have yellow-brown spots on her shins, skin biopsy of the right shin, or "
            "necrobiosis lipoidica?")
    assert controls.recital(nejm_case) == said
    assert asks_history(said) and not names_disease(said, "Necrobiosis lipoidica")
    assert names_disease("Could this be necrobiosis lipoidica?", "Necrobiosis lipoidica")
    assert names_disease("Do you think this is necrobiosis lipoidica?", "Necrobiosis lipoidica")
    conv = consult.Consultation(nejm_case.id, "general", "en", "d", "m", [
        Turn(role="patient", text=nejm_case.chief_complaint), Turn(role="doctor", text=said)])
    grades = lexical_grader().grade([conv], {nejm_case.id: nejm_case})
    assert not any(g.passed for g in grades)
    assert {g.category for g in grades if g.listing_excluded} == {"symptoms", "tests"}


def test_a_question_about_two_items_of_two_categories_still_earns_them(nejm_case):
    conv = consult.Consultation(nejm_case.id, "general", "en", "d", "m", [
        Turn(role="patient", text=nejm_case.chief_complaint),
        Turn(role="doctor", text="How long have the yellow-brown spots on your shins been there, "
                                 "and has anyone done a skin biopsy of the right shin?")])
    grades = {g.category: g.passed for g in
              lexical_grader().grade([conv], {nejm_case.id: nejm_case})}
    assert grades == {"symptoms": True, "tests": True, "diseases": False}


# -- a CSPT case: long checklist sentences in Chinese ---------------------------------------

def test_the_chinese_item_frame_is_not_matched(cspt_case):
    fever, sputum, night, allergy = cspt_case.checklist.symptoms
    assert frozenset("咳痰") in zh_item_parts(sputum)
    assert zh_item_parts(allergy) == [frozenset("药物敏")]     # 是否询问患者询问…史 removed
    assert max(zh_share(p, "有痰吗？") for p in zh_item_parts(sputum)) >= 0.6
    assert max(zh_share(p, "您有没有对什么药过敏？") for p in zh_item_parts(allergy)) >= 0.6
    assert max(zh_share(p, "发烧吗？最高烧到多少度？") for p in zh_item_parts(fever)) >= 0.6
    assert max(zh_share(p, "一天里什么时候最难受？") for p in zh_item_parts(night)) < 0.6


def test_cspt_script_earns_the_items_its_words_ask_and_the_controls_nothing(cspt_case):
    """The script asks all four symptom items (a reader's count); characters match three:
    "一天里什么时候最难受？" asks whether it is worse at night only by meaning, which the
    lexical grader cannot read (the served judge is the path for CSPT, docs/sp-test.md)."""
    got = scores(cspt_case, replies=("不清楚。",))
    assert got["control_script"]["symptoms"] == pytest.approx(3 / 4)
    assert got["control_script"]["diseases"] == 1.0
    assert got["control_script"]["tests"] == 0.0          # the script orders no test
    for name in NEGATIVE:
        assert all(v in (0.0, None) for k, v in got[name].items() if k != "case"), name


def test_ordering_fourteen_common_tests_earns_no_test(cspt_case, screening_case):
    for case in (cspt_case, screening_case):
        conv = play("control_testlist", case)
        (sentence,) = {s.text for s in doctor_sentences(conv.turns) if s.act == "recommendation"}
        assert len(controls.COMMON_TESTS[controls.lang_of(case)]) == 14
        grades = lexical_grader().grade([conv], {case.id: case})
        tests = [g for g in grades if g.category == "tests"]
        assert not any(g.passed for g in tests)
        assert all(sentence in g.listing_excluded for g in tests if g.item in ("血常规", "胸片"))
    # with the rule off (a cap above fourteen) the same order earns the common tests
    conv = play("control_testlist", cspt_case)
    loose = lexical_grader(max_requests=20).grade([conv], {cspt_case.id: cspt_case})
    assert {g.item for g in loose if g.passed} == {"血常规", "胸片"}


# -- an asymptomatic MedQA case -------------------------------------------------------------

def test_an_asymptomatic_screening_case_has_no_symptom_score(screening_case):
    """No symptom item: no symptom score (None, not 0). The complaint of a screening visit
    names its raised fasting glucose, so the script's "I'd like to check fasting glucose."
    adds one unit to it and is an echo (a request needs two new units): the test half
    the script earns is the grader's, a reader counts both requests."""
    assert screening_case.checklist.symptoms == []
    assert grading.unmeasurable_categories(screening_case) == frozenset()
    got = scores(screening_case)
    assert got["control_script"] == {"case": screening_case.id, "symptoms": None,
                                     "tests": 0.5, "diseases": 1.0}
    for name in NEGATIVE:
        assert got[name]["tests"] == 0.0 and got[name]["diseases"] == 0.0, name


# -- the hand-read coverage: counts only where a set has no open licence --------------------

def test_a_counts_only_row_is_checked_against_the_checklist(tmp_path, cspt_case):
    items = cspt_case.checklist.symptoms
    row = {"case": cspt_case.id, "category": "symptoms", "covered": 4, "total": 4,
           "items_sha": controls.items_fingerprint(items), "note": "read by hand"}
    path = tmp_path / "coverage.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    (got,) = controls.load_script_coverage(path, [cspt_case]).values()
    assert got.covered / got.total == 1.0
    path.write_text(json.dumps({**row, "items_sha": "0" * 12}) + "\n", encoding="utf-8")
    with pytest.raises(ContractError, match=r"coverage.jsonl:1: field 'asked/uncovered'"):
        controls.load_script_coverage(path, [cspt_case])
    path.write_text(json.dumps({**row, "covered": 5}) + "\n", encoding="utf-8")
    with pytest.raises(ContractError, match="covered ≤ total"):
        controls.load_script_coverage(path, [cspt_case])


def test_the_committed_coverage_quotes_no_cspt_text():
    rows = [json.loads(line) for line in COVERAGE.read_text(encoding="utf-8").splitlines()]
    cspt = [r for r in rows if r["case"].startswith("cspt-")]
    assert len({r["case"] for r in cspt}) >= 15
    assert all(r["items_sha"] and not r.get("asked") and not r.get("uncovered") for r in cspt)
    # 15 cases read in each AgentClinic file; a NEJM case whose symptoms the complaint
    # names and which lists no test has no category to gate, so no row
    least = {"medqa": 15, "medqa_extended": 15, "nejm": 11, "nejm_extended": 5}
    for name, n in least.items():
        prefix = "agentclinic-0" if name == "medqa" else f"agentclinic-{name}-"
        assert len({r["case"] for r in rows if r["case"].startswith(prefix)}) == n, name


def test_the_gate_expects_nothing_of_a_category_that_cannot_measure(nejm_case):
    expected = controls.expected_coverage([nejm_case], {})
    assert expected[(nejm_case.id, "symptoms")] is None
    assert expected[(nejm_case.id, "tests")] == 1.0


# -- hand-read coverage beside stage 06's file: what the case-set check reads --------------

def toy_encode(texts):
    """Hashed bag of words and Han characters, L2-normalised (no model to load)."""
    vecs = np.zeros((len(texts), 256), dtype=np.float32)
    for i, t in enumerate(texts):
        for w in re.findall(r"[a-z]+|[\u4e00-\u9fff]", t.lower()):
            vecs[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % 256] += 1
    return vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-9)


def coverage_row(case: SPCase, category: str, covered: int) -> dict:
    items = getattr(case.checklist, category)
    return {"case": case.id, "category": category, "covered": covered, "total": len(items),
            "items_sha": controls.items_fingerprint(items), "note": "read by hand"}


def write_rows(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                    encoding="utf-8")
    return path


def with_stage_coverage(path: Path):
    """The repository's params (what run_case_set reads of them: the stage 06 section)
    with stage 06's coverage file replaced by ``path``."""
    sim = load_params().simulation
    gate = sim.controls_gate.model_copy(update={"script_coverage": str(path)})
    return SimpleNamespace(simulation=sim.model_copy(update={"controls_gate": gate}))


def test_an_extra_coverage_files_rows_reach_the_gate(tmp_path, monkeypatch, cspt_case):
    """The fixture's script is real (not derived), so without a reading its symptoms are
    not gated; a row in the extra file (2 of 4 asked) sets the gate's expectation to 50
    and its limit to 0.8 x 50, while stage 06's file (here: 1 of its 3 tests) still sets
    the tests' expectation."""
    from medpref import embedding

    monkeypatch.setattr(embedding, "load_encoder", lambda *a, **k: toy_encode)
    params = with_stage_coverage(write_rows(tmp_path / "stage.jsonl",
                                            [coverage_row(cspt_case, "tests", 1)]))
    extra = write_rows(tmp_path / "extra.jsonl", [coverage_row(cspt_case, "symptoms", 2)])

    def script_gate(coverage):
        table, _, _ = casesets.run_case_set("cspt", FIXTURES / "cspt", params=params,
                                            names=["control_script", "control_lecture"],
                                            coverage=coverage)
        gate = table.attrs["gate"].set_index(["control", "metric"])
        return table, gate.loc["control_script"]

    table, gate = script_gate([extra])
    assert gate.loc["Sym.", "expected_coverage"] == pytest.approx(50.0)
    assert gate.loc["Sym.", "limit"] == pytest.approx(40.0)
    assert gate.loc["Sym.", "passed"] is not None
    assert gate.loc["Test", "expected_coverage"] == pytest.approx(100 / 3)
    assert table.attrs["hand_read"] == [cspt_case.id]
    assert "hand-read cases in this run: 1" in casesets.render(table)
    _, gate = script_gate([])
    assert np.isnan(gate.loc["Sym.", "expected_coverage"])
    assert gate.loc["Sym.", "passed"] is None                         # not gated
    assert gate.loc["Test", "expected_coverage"] == pytest.approx(100 / 3)


def test_a_case_read_in_two_files_is_refused_naming_both(tmp_path, cspt_case):
    row = coverage_row(cspt_case, "tests", 0)
    first = write_rows(tmp_path / "first.jsonl", [coverage_row(cspt_case, "symptoms", 3), row])
    second = write_rows(tmp_path / "second.jsonl", [row])
    with pytest.raises(ContractError, match=r"second\.jsonl:1: field 'case'.*"
                                            r"cspt-internal_medicine-01 tests.*first\.jsonl:2"):
        casesets.hand_coverage([first, second], [cspt_case])
    # refused as well when the case is not in the run: the files merge at the next rerun
    absent = {**row, "case": "cspt-surgery-09"}
    write_rows(first, [absent])
    write_rows(second, [absent])
    with pytest.raises(ContractError, match="cspt-surgery-09 tests is read in two files"):
        casesets.hand_coverage([first, second], [cspt_case])
    write_rows(second, [coverage_row(cspt_case, "symptoms", 3)])
    assert set(casesets.hand_coverage([first, second], [cspt_case])) == {
        (cspt_case.id, "symptoms")}


def test_cases_are_picked_by_id_and_an_unknown_id_is_refused():
    (case,) = casesets.load_case_set("cspt", FIXTURES / "cspt", ids=["cspt-internal_medicine-01"])
    assert case.id == "cspt-internal_medicine-01"
    with pytest.raises(ValueError, match="has no case cspt-surgery-01"):
        casesets.load_case_set("cspt", FIXTURES / "cspt", ids=["cspt-surgery-01"])


def test_stage_06s_file_holds_every_cspt_reading_and_is_the_default():
    rows = [json.loads(line) for line in COVERAGE.read_text(encoding="utf-8").splitlines()]
    assert len({r["case"] for r in rows if r["case"].startswith("cspt-")}) >= 25
    assert casesets.coverage_files(load_params().simulation) == [COVERAGE]


# -- the real files, where they are ---------------------------------------------------------

def shared_agentclinic(name: str):
    root = shared_data_dir()
    if root is None or not (root / "agentclinic" / f"agentclinic_{name}.jsonl").is_file():
        pytest.skip(f"agentclinic_{name}.jsonl absent from the shared data directory")
    return agentclinic_cases(root, file=name)


@pytest.mark.shared_data
def test_every_nejm_case_leaves_its_symptoms_out():
    cases = shared_agentclinic("nejm")
    assert len(cases) == 15
    assert casesets.unmeasurable(cases) == {
        "symptoms": "every symptom item of all 15 cases is named in the opening complaint"}


@pytest.mark.shared_data
def test_the_read_agentclinic_cases_match_their_coverage_rows():
    cases = [*shared_agentclinic("medqa"), *shared_agentclinic("nejm"),
             *shared_agentclinic("medqa_extended")]
    hand = controls.load_script_coverage(COVERAGE, cases)   # a changed case raises
    assert len({case for case, _ in hand}) == 15 + 11 + 15   # medqa, nejm, medqa_extended


@pytest.fixture
def cspt_published():
    """CSPT's cases as published (the folder of its two archives in MEDPREF_CSPT)."""
    source = os.environ.get(CSPT_ENV)
    if not source or not Path(source).exists():
        pytest.skip(f"set {CSPT_ENV} to the folder of CSPT's two published archives")
    return cspt_cases(Path(source))


@pytest.mark.shared_data
def test_cspt_as_published_has_72_cases_and_its_read_rows_match(cspt_published):
    cases = cspt_published
    assert len(cases) == 72
    hand = controls.load_script_coverage(COVERAGE, cases)
    assert len({case for case, _ in hand}) == 25


@pytest.mark.shared_data
def test_every_cspt_row_fits_its_published_case(cspt_published):
    cases = cspt_published
    hand = controls.load_script_coverage(COVERAGE, cases)       # a changed case raises
    rows = [json.loads(line) for line in COVERAGE.read_text(encoding="utf-8").splitlines()]
    assert {k for k in hand if k[0].startswith("cspt-")} == {
        (r["case"], r["category"]) for r in rows if r["case"].startswith("cspt-")}
    assert len({case for case, _ in hand if case.startswith("cspt-")}) == 25
