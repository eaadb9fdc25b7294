"""Every AgentClinic file as published: each file's shape on our own synthetic fixtures
(``tests/fixtures/agentclinic``: written for these tests, not copied), a case without
symptoms, malformed rows reported with line and reason while the rest load, the file
choice, and the shared MedQA file's count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medpref.contracts import ContractError
from medpref.data.adapters import AGENTCLINIC_FILES, agentclinic_cases, shared_data_dir
from medpref.data.agentclinic import (
    SkippedRow,
    image_cues,
    nejm_complaint,
    nejm_symptoms,
    nejm_tests,
)

FIXTURES = Path(__file__).parent / "fixtures"   # holds agentclinic/agentclinic_<name>.jsonl


def test_nejm_records_convert_as_text_with_the_image_dependence_marked():
    cases = agentclinic_cases(FIXTURES, file="nejm")
    assert [c.id for c in cases] == ["agentclinic-nejm-0001", "agentclinic-nejm-0002",
                                     "agentclinic-nejm-0003", "agentclinic-nejm-0005"]
    lump, throat, rash, eye = cases
    assert lump.chief_complaint == "A painless lump on his neck, night sweats, and itching"
    assert lump.checklist.symptoms == ["Painless lump on his neck", "Night sweats", "Itching"]
    # "Findings relevant to the case:" heads the list without a result: not a test
    assert lump.checklist.tests == ["Neck examination", "Node biopsy", "Chest radiograph"]
    assert lump.checklist.diseases == ["Hodgkin lymphoma"]          # the choice marked correct
    assert lump.patient_info["History"].startswith("For your role as a patient: - Age: You")
    assert "**" not in lump.patient_info["History"]                  # markdown bold removed
    assert "binucleate" in lump.patient_info["Physical Examination and Test Results"]
    assert lump.objective == "What is the most likely diagnosis?" and lump.script == []
    assert lump.meta["image_dependent"] and lump.meta["image_cues"] == [
        "(left)", "(right, stained tissue)"]
    assert lump.meta["choices"] == ["Reactive lymphadenitis", "Hodgkin lymphoma",
                                    "Thyroid nodule"]
    assert lump.meta["image_url"].endswith("case-a.jpg") and lump.meta["line"] == 1
    # the text alone settles it: not image-dependent
    assert not throat.meta["image_dependent"] and throat.meta["image_cues"] == []
    assert throat.chief_complaint == "Fever and a sore throat"
    assert throat.checklist.tests == ["White-cell count", "Rapid antigen test"]
    assert rash.meta["image_cues"] == ["Photographs", "are shown"]
    # physical_exams only says there are no readings: no findings section, no test
    assert list(rash.patient_info) == ["History"] and rash.checklist.tests == []
    assert rash.chief_complaint == "A rash on both forearms"          # "because of ..."
    assert eye.checklist.tests == ["Slit-lamp examination", "Intraocular pressure"]
    assert all(c.department == "general" and c.lang == "en" and c.source == "agentclinic"
               for c in cases)


def test_extended_files_and_ids():
    ext = agentclinic_cases(FIXTURES, file="nejm_extended")
    assert [c.id for c in ext] == ["agentclinic-nejm_extended-0001",
                                   "agentclinic-nejm_extended-0002"]
    assert ext[0].meta["image_types"] == ["hist/path", "xray"]
    assert ext[0].meta["file"] == "agentclinic_nejm_extended.jsonl"
    # "type" before "patient_info" (key order varies in the published file)
    assert ext[1].meta["image_types"] == ["xray"] and ext[1].meta["image_dependent"]
    assert ext[1].checklist.diseases == ["Dilated cardiomyopathy"]
    osce = agentclinic_cases(FIXTURES, file="medqa_extended")
    assert osce[0].id == "agentclinic-medqa_extended-0001"
    assert osce[0].checklist.tests == ["CT Head"]
    assert osce[0].checklist.symptoms == ["Sudden severe headache", "Neck stiffness", "Vomiting"]


# one row per published file: cases loaded (ids by line) and the malformed line skipped
SHAPES = {
    "medqa": (["agentclinic-0001", "agentclinic-0002"], 3, "<record>", "not a JSON object"),
    "medqa_extended": ([f"agentclinic-medqa_extended-{n:04d}" for n in (1, 2, 3, 5)], 4,
                       "Correct_Diagnosis", "missing"),
    "nejm": ([f"agentclinic-nejm-{n:04d}" for n in (1, 2, 3, 5)], 4, "<json>",
             "invalid JSON: Unterminated string"),
    "nejm_extended": (["agentclinic-nejm_extended-0001", "agentclinic-nejm_extended-0002"], 3,
                      "answers", "2 choice(s) marked correct"),
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_each_published_file_shape_loads_and_reports_its_malformed_row(name, caplog):
    ids, line, field, reason = SHAPES[name]
    cases = agentclinic_cases(FIXTURES, file=name)
    assert [c.id for c in cases] == ids                    # the rows after it load too
    assert [(s.file, s.line, s.field) for s in cases.skipped] == [
        (f"agentclinic_{name}.jsonl", line, field)]
    assert cases.skipped[0].reason.startswith(reason)
    assert f"agentclinic_{name}.jsonl:{line}: field '{field}'" in caplog.text
    assert all(c.source == "agentclinic" and c.checklist.diseases for c in cases)


def test_a_limit_counts_cases_and_the_rows_skipped_before_it():
    cases = agentclinic_cases(FIXTURES, file="medqa_extended", limit=3)
    assert len(cases) == 3 and cases.skipped == []
    cases = agentclinic_cases(FIXTURES, file="medqa_extended", limit=4)
    assert [s.line for s in cases.skipped] == [4]


def test_a_case_without_symptoms_is_a_case():
    cases = {c.meta["line"]: c for c in agentclinic_cases(FIXTURES, file="medqa_extended")}
    screening = cases[2]                                   # "Symptoms": {} as published
    assert screening.checklist.symptoms == []
    assert screening.chief_complaint == ("The patient comes for a follow-up visit after a "
                                         "routine screening stool test came back positive.")
    assert screening.meta["complaint_from"] == "History"
    assert screening.checklist.diseases == ["Tubular adenoma of the colon"]
    assert screening.checklist.tests == ["Colonoscopy", "Histopathology"]
    assert "brother had bowel cancer" in screening.patient_info["Family History"]
    assert "No weight loss" in screening.patient_info["Review of Systems"]   # a nested block
    no_field = cases[3]                                    # no Symptoms key at all
    assert no_field.checklist.symptoms == [] and no_field.meta["complaint_from"] == "History"
    assert no_field.chief_complaint == "He attends a workplace health check."
    no_history = cases[5]                                  # empty primary symptom, no history
    assert no_history.meta["complaint_from"] == "Objective_for_Doctor"
    assert no_history.chief_complaint.startswith("Assess the newborn brought for a routine")
    assert cases[1].meta["complaint_from"] == "Primary_Symptom"


def test_an_osce_record_with_nothing_to_open_the_visit_is_malformed(tmp_path):
    folder = tmp_path / "agentclinic"
    folder.mkdir()
    record = {"OSCE_Examination": {"Patient_Actor": {"Symptoms": {}, "Demographics": "x"},
                                   "Correct_Diagnosis": "y"}}
    (folder / "agentclinic_medqa.jsonl").write_text(json.dumps(record) + "\n")
    with pytest.raises(ContractError, match=r"medqa\.jsonl:1: field "
                       r"'OSCE_Examination\.Patient_Actor\.Symptoms': no primary symptom"):
        agentclinic_cases(tmp_path, skip_bad=False)


def test_unknown_and_missing_files_say_what_there_is(tmp_path):
    with pytest.raises(ValueError, match=r"unknown AgentClinic file 'mimic'.*'nejm_extended'"):
        agentclinic_cases(FIXTURES, file="mimic")
    (tmp_path / "agentclinic").mkdir()
    (tmp_path / "agentclinic" / "agentclinic_nejm.jsonl").write_text("")
    with pytest.raises(FileNotFoundError, match=r"'medqa' not found \(present: "
                                                 r"agentclinic_nejm\.jsonl\)"):
        agentclinic_cases(tmp_path, file="medqa")
    assert sorted(AGENTCLINIC_FILES) == ["medqa", "medqa_extended", "nejm", "nejm_extended"]


@pytest.mark.parametrize(("answers", "message"), [
    ([{"text": "A", "correct": True}, {"text": "B", "correct": True}], "2 choice"),
    ([{"text": "A", "correct": False}], "0 choice"),
    ("A", "not a list"),
])
def test_nejm_answers_need_exactly_one_correct_choice(tmp_path, answers, message):
    folder = tmp_path / "agentclinic"
    folder.mkdir()
    record = {"question": "A man presented with a cough. What is it?", "patient_info": "x",
              "physical_exams": "", "answers": answers}
    (folder / "agentclinic_nejm.jsonl").write_text(json.dumps(record) + "\n")
    where = r"agentclinic_nejm\.jsonl:1: field 'answers'"
    with pytest.raises(ContractError, match=rf"{where}.*{message}"):
        agentclinic_cases(tmp_path, file="nejm", skip_bad=False)
    # skipping is the default, but a file whose every row is malformed is an error
    with pytest.raises(ValueError, match=rf"no AgentClinic case loaded, 1 malformed row.*{where}"):
        agentclinic_cases(tmp_path, file="nejm")


def test_a_record_of_neither_shape_is_a_contract_error(tmp_path):
    folder = tmp_path / "agentclinic"
    folder.mkdir()
    (folder / "agentclinic_nejm.jsonl").write_text('{"case": 1}\n')
    with pytest.raises(ContractError, match="neither an OSCE record"):
        agentclinic_cases(tmp_path, file="nejm", skip_bad=False)
    good = (FIXTURES / "agentclinic" / "agentclinic_nejm.jsonl").read_text().splitlines()[1]
    (folder / "agentclinic_nejm.jsonl").write_text(f'{{"case": 1}}\n{good}\n')
    cases = agentclinic_cases(tmp_path, file="nejm")
    assert [c.id for c in cases] == ["agentclinic-nejm-0002"]
    assert cases.skipped == [SkippedRow("agentclinic_nejm.jsonl", 1, "<record>",
                                        "neither an OSCE record (OSCE_Examination) nor a "
                                        "NEJM one (question, answers)")]


def test_nejm_text_helpers_golden():
    question = ("A 70-year-old man presented to the clinic with a 1-week history of a cough, "
                "fever and chills. A scan of the chest (top panel) showed a mass with a "
                "cavity (arrowhead). Pain in the (left lower quadrant) was noted.")
    assert nejm_complaint(question) == "A cough, fever and chills"
    assert nejm_symptoms("A cough, fever and chills") == ["Cough", "Fever", "Chills"]
    # a position word that names anatomy, not a panel, is no cue
    assert image_cues(question) == ["(top panel)", "(arrowhead)"]
    assert nejm_complaint("A woman had a rash. It itched.") == "A woman had a rash."
    assert nejm_tests("Labs: - Sodium: 131 mmol/L - Potassium level: normal. Imaging results: "
                      "- Chest CT findings: Mass. - An unlabelled remark") == [
        "Sodium", "Potassium level", "Chest CT"]
    # "Label: result" sentences without bullets
    assert nejm_tests("Endoscopy: An ulcer. Biopsy: Glands. Silver stain: Positive.") == [
        "Endoscopy", "Biopsy", "Silver stain"]
    assert image_cues("The scan showed consolidations (shown). A smear is shown.") == [
        "(shown)", "is shown"]
    assert nejm_complaint("A 12-year-old girl was referred to the clinic with a 2-week "
                          "history of a limp. It hurt.") == "A limp"


@pytest.mark.shared_data
def test_counts_of_the_shared_agentclinic_files():
    root = shared_data_dir()
    if root is None:
        pytest.skip("shared data directory absent (set MEDPREF_SHARED_DATA or ../shared/data)")
    present = {name for name, file in AGENTCLINIC_FILES.items()
               if (root / "agentclinic" / file).is_file()}
    assert "medqa" in present
    loaded = {name: agentclinic_cases(root, file=name) for name in sorted(present)}
    counts = {name: len(cases) for name, cases in loaded.items()}
    assert counts["medqa"] == 107 and loaded["medqa"].skipped == []
    # the published counts: medqa_extended holds 214 records on 213 newlines (its last
    # line has none), nejm 15 on 14 (issue 41)
    expected = {"medqa_extended": 214, "nejm": 15, "nejm_extended": 120}
    for name, n in counts.items():
        assert n == expected.get(name, n) and n > 0, (name, n)


def test_simulation_param_chooses_the_file():
    from medpref.simulation.common import load_cases
    from medpref.simulation.config import SimulationParams

    p = SimulationParams(source="agentclinic", source_root=str(FIXTURES),
                         agentclinic_file="nejm", source_limit=2)
    assert [c.id for c in load_cases(p)] == ["agentclinic-nejm-0001", "agentclinic-nejm-0002"]
    p = SimulationParams(source="agentclinic", source_root=str(FIXTURES),
                         agentclinic_file="medqa_extended")
    assert [s.line for s in load_cases(p).skipped] == [4]   # what stage 06 counts
    assert SimulationParams().agentclinic_file == "medqa"
    with pytest.raises(ValueError, match="agentclinic_file"):
        SimulationParams(agentclinic_file="mimiciv")


def test_stage_06_counts_the_skipped_rows_in_its_metrics(tmp_path, monkeypatch):
    """The adapter's ``skipped`` reaches stage 06's metrics; the symptom-free screening
    case is consulted like any other (the patient opens with its reason for the visit)."""
    from medpref.params import parse_params
    from medpref.simulation import whole
    from test_simulation import client, keyword_judge, scripted_sim_stage

    params = parse_params({"simulation": {
        "source": "agentclinic", "source_root": str(FIXTURES),
        "agentclinic_file": "medqa_extended", "n_cases": None, "rounds": 1,
        "trained_policies": False, "rem_radar": False,
        "grader": {"mode": "generate", "graded_items": None},
        "next_turn": {"enabled": False}, "controls": [],
        "doctors": [{"name": "base", "role": "policy"}]}})
    clients = {"policy": client(lambda r: "Any bleeding or weight loss?", "policy"),
               "patient": client(lambda r: "No.", "patient"),
               "judge": client(keyword_judge, "judge")}
    out = whole.run(scripted_sim_stage(tmp_path, monkeypatch, clients)(params))
    assert out.metrics["cases_skipped_malformed"] == 1
    assert out.metrics["cases"] == 4
    screening = next(c for c in out.consultations if c.case_id.endswith("-0002"))
    assert screening.turns[0].text.startswith("The patient comes for a follow-up visit")
