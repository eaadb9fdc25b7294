"""Every AgentClinic file: the NEJM shape on our own synthetic fixture
(``tests/fixtures/agentclinic``), the file choice, and the shared MedQA file's count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medpref.contracts import ContractError
from medpref.data.adapters import AGENTCLINIC_FILES, agentclinic_cases, shared_data_dir
from medpref.data.agentclinic import image_cues, nejm_complaint, nejm_symptoms, nejm_tests

FIXTURES = Path(__file__).parent / "fixtures"   # holds agentclinic/agentclinic_<name>.jsonl


def test_nejm_records_convert_as_text_with_the_image_dependence_marked():
    cases = agentclinic_cases(FIXTURES, file="nejm")
    assert [c.id for c in cases] == ["agentclinic-nejm-0001", "agentclinic-nejm-0002",
                                     "agentclinic-nejm-0003"]
    lump, throat, rash = cases
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
    assert all(c.department == "general" and c.lang == "en" and c.source == "agentclinic"
               for c in cases)


def test_extended_files_and_ids():
    ext = agentclinic_cases(FIXTURES, file="nejm_extended")
    assert [c.id for c in ext] == ["agentclinic-nejm_extended-0001"]
    assert ext[0].meta["image_types"] == ["hist/path", "xray"]
    assert ext[0].meta["file"] == "agentclinic_nejm_extended.jsonl"
    osce = agentclinic_cases(FIXTURES, file="medqa_extended")
    assert [c.id for c in osce] == ["agentclinic-medqa_extended-0001"]
    assert osce[0].checklist.tests == ["CT Head"]
    assert osce[0].checklist.symptoms == ["Sudden severe headache", "Neck stiffness", "Vomiting"]


def test_unknown_and_missing_files_say_what_there_is(tmp_path):
    with pytest.raises(ValueError, match=r"unknown AgentClinic file 'mimic'.*'nejm_extended'"):
        agentclinic_cases(FIXTURES, file="mimic")
    with pytest.raises(FileNotFoundError, match=r"'medqa' not found \(present: "
                                                 r"agentclinic_medqa_extended\.jsonl, "):
        agentclinic_cases(FIXTURES, file="medqa")
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
        agentclinic_cases(tmp_path, file="nejm")
    assert agentclinic_cases(tmp_path, file="nejm", skip_bad=True) == []


def test_a_record_of_neither_shape_is_a_contract_error(tmp_path):
    folder = tmp_path / "agentclinic"
    folder.mkdir()
    (folder / "agentclinic_nejm.jsonl").write_text('{"case": 1}\n')
    with pytest.raises(ContractError, match="neither an OSCE record"):
        agentclinic_cases(tmp_path, file="nejm")


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
    counts = {name: len(agentclinic_cases(root, file=name)) for name in sorted(present)}
    assert counts["medqa"] == 107
    expected = {"medqa_extended": 213}   # the published count (issue 22)
    for name, n in counts.items():
        assert n == expected.get(name, n) and n > 0, (name, n)


def test_simulation_param_chooses_the_file():
    from medpref.simulation.config import SimulationParams
    from medpref.simulation.stage import load_cases

    p = SimulationParams(source="agentclinic", source_root=str(FIXTURES),
                         agentclinic_file="nejm", source_limit=2)
    assert [c.id for c in load_cases(p)] == ["agentclinic-nejm-0001", "agentclinic-nejm-0002"]
    assert SimulationParams().agentclinic_file == "medqa"
    with pytest.raises(ValueError, match="agentclinic_file"):
        SimulationParams(agentclinic_file="mimiciv")
