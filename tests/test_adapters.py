"""Adapters from the real data sets (read from the shared data directory) to contracts.

Counts are the data rows of each file as measured with pandas (``len(read_csv(f))``;
the JSONL's non-blank lines). Tests marked ``shared_data`` skip when it is absent.
"""

from __future__ import annotations

import csv
import logging
from pathlib import Path

import pytest

from medpref.contracts import ContractError, Turn
from medpref.data.adapters import (
    ACI_DIR,
    ACI_METADATA,
    ACI_SPLITS,
    DEFAULT_SPEAKERS,
    MTS_DIR,
    MTS_SPLITS,
    aci_dialogues,
    aci_notes,
    agentclinic_cases,
    checklist_tests,
    load_aci_bench,
    load_mts_correlation_study,
    load_mts_dialog,
    mts_dialogues,
    mts_notes,
    parse_tagged_dialogue,
    shared_data_dir,
    split_note_sections,
)

MTS_COUNTS = {"train": 1201, "validation": 100, "test1": 200, "test2": 200}
ACI_COUNTS = {"train": 67, "test1": 40}


@pytest.fixture(scope="module")
def shared() -> Path:
    root = shared_data_dir()
    if root is None:
        pytest.skip("shared data directory absent (set MEDPREF_SHARED_DATA or ../shared/data)")
    return root


def _alternates(turns: list[Turn]) -> bool:
    return all(a.role != b.role for a, b in zip(turns, turns[1:]))


# ------------------------------------------------------------------ pure parsing


def test_parse_tagged_dialogue_golden():
    text = ("Doctor: Hello there. \r\n"
            "Doctor:   \n"                      # empty turn, dropped
            "Doctor: What brings you in?\n"      # merged with the first doctor turn
            " Patient: My knee hurts.\n"
            "Guest_family_2: Since Tuesday,\n"   # guest speaks for the patient: merged
            "  she fell.\n"                      # continuation line joins the turn
            "Doctor: I see. Any swelling? Patient: No. Doctor: Good.\n"
            "Patient's wife: We iced it.")
    assert parse_tagged_dialogue(text) == [
        Turn(role="doctor", text="Hello there. What brings you in?"),
        Turn(role="patient", text="My knee hurts. Since Tuesday, she fell."),
        Turn(role="doctor", text="I see. Any swelling?"),
        Turn(role="patient", text="No."),
        Turn(role="doctor", text="Good."),
        Turn(role="patient", text="We iced it."),
    ]


def test_parse_bracket_tags_and_guest():
    text = "[doctor] hi , anna .\n[patient] hello .\n[patient_guest] she is tired .\n[doctor]\n"
    assert parse_tagged_dialogue(text) == [
        Turn(role="doctor", text="hi , anna ."),
        Turn(role="patient", text="hello . she is tired ."),
    ]


def test_unknown_labels_and_lowercase_inline_are_not_tags():
    text = "Doctor: BP: 120/80. I asked the nurse. patient: said no.\nNurse: ok"
    assert parse_tagged_dialogue(text) == [
        Turn(role="doctor", text="BP: 120/80. I asked the nurse. patient: said no. Nurse: ok")]
    assert parse_tagged_dialogue("no tags at all") == []
    assert parse_tagged_dialogue("Doctor: hi", {"patient": "patient"}) == []
    assert DEFAULT_SPEAKERS["guest_family"] == "patient"


def test_split_note_sections_golden():
    note = ("CHIEF COMPLAINT\n\nKnee pain.\n\nPAST HISTORY\n\nMedical\nHIV\n\n"
            "PHYSICAL EXAM\n\nMSK:\nTender knee.\n\nHPI:\n\nFell on Tuesday.")
    assert split_note_sections(note) == {
        "CHIEF COMPLAINT": "Knee pain.", "PAST HISTORY": "Medical\nHIV",
        "PHYSICAL EXAM": "MSK:\nTender knee.", "HPI": "Fell on Tuesday."}
    assert split_note_sections("Just prose.\nNo headings here.") is None


def test_checklist_tests_expand_groups_only():
    results = {"Blood_Tests": {"Acetylcholine_Receptor_Antibodies": "high"},
               "Imaging": {"Chest_CT": {"Findings": "normal"}, "Findings": "x"},
               "Complete_Blood_Count": {"WBC": "7"}, "Electromyography": {"Findings": "low"}}
    assert checklist_tests(results) == [
        "Acetylcholine Receptor Antibodies", "Chest CT", "Complete Blood Count",
        "Electromyography"]


def test_checklist_tests_leave_out_optional_and_not_indicated():
    results = {"X_Ray_Knee": {"Findings": "No fracture."},
               "MRI_Knee": {"Optional": "Can be considered if pain persists."},
               "Imaging": {"CT_Head": "Not indicated here.", "Chest_X_Ray": "Clear."},
               "Skin_Biopsy": {"Findings": "Optional and not typically necessary."},
               "EEG": "Not performed", "Lipid_Panel": "Optional fasting; LDL 4.1"}
    assert checklist_tests(results) == ["X Ray Knee", "Chest X Ray", "Lipid Panel"]


def test_shared_data_dir_reads_env_at_call_time(tmp_path, monkeypatch):
    monkeypatch.setenv("MEDPREF_SHARED_DATA", str(tmp_path))
    assert shared_data_dir() == tmp_path
    monkeypatch.setenv("MEDPREF_SHARED_DATA", str(tmp_path / "missing"))
    assert shared_data_dir() is None


def _write_mts(root: Path, rows: list[list[str]]) -> Path:
    path = root / MTS_DIR / MTS_SPLITS["train"]
    path.parent.mkdir(parents=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["ID", "section_header", "section_text", "dialogue"])
        writer.writerows(rows)
    return path


def test_malformed_csv_row_names_file_line_and_field(tmp_path, caplog):
    path = _write_mts(tmp_path, [
        ["0", "CC", "Knee pain.", "Doctor: Hi.\nPatient: My knee."],   # lines 2-3
        ["1", "CC", "Cough.", "just some text, no speakers"],            # line 4
        ["2", "CC", "Rash.", "Doctor: Rash?\nPatient: Yes."],            # lines 5-6
    ])
    with pytest.raises(ContractError) as err:
        load_mts_dialog("train", root=tmp_path)
    assert (err.value.line, err.value.field) == (4, "dialogue")
    assert f"{path}:4: field 'dialogue'" in str(err.value)
    assert "MTS-Dialog-TrainingSet.csv" in str(err.value)

    with caplog.at_level(logging.WARNING, logger="medpref.data.readers"):
        pairs = load_mts_dialog("train", root=tmp_path, skip_bad=True)
    assert [d.id for d, _ in pairs] == ["mts-train-0000", "mts-train-0002"]
    assert pairs[1][0].meta["line"] == 5
    assert "skipped 1 malformed row" in caplog.text


def test_missing_column_is_a_contract_error(tmp_path):
    path = tmp_path / MTS_DIR / MTS_SPLITS["train"]
    path.parent.mkdir(parents=True)
    path.write_text("ID,section_header,section_text\n0,CC,x\n", encoding="utf-8")
    with pytest.raises(ContractError, match=r"TrainingSet\.csv:1: field 'dialogue'"):
        load_mts_dialog("train", root=tmp_path)


def _write_aci(root: Path, split: str, encounters: list[str], metadata: bool = True) -> None:
    folder = root / ACI_DIR
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ACI_SPLITS[split], "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["dataset", "encounter_id", "dialogue", "note"])
        for enc in encounters:
            writer.writerow(["aci", enc, "[doctor] hi .\n[patient] my knee hurts .",
                             "CHIEF COMPLAINT\n\nKnee pain.\n\nPLAN\n\nRest."])
    if metadata:
        with open(folder / ACI_METADATA[split], "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(["dataset", "encounter_id", "id", "patient_age", "cc"])
            writer.writerow(["aci", encounters[0], "ACI001", "50", "knee pain "])


def test_every_aci_split_by_name_with_its_metadata(tmp_path, caplog):
    assert ACI_SPLITS == {"train": "train.csv", "valid": "valid.csv",
                          "test1": "clinicalnlp_taskB_test1.csv",
                          "test2": "clinicalnlp_taskC_test2.csv", "test3": "clef_taskC_test3.csv"}
    assert ACI_METADATA["test3"] == "clef_taskC_test3_metadata.csv"
    for split, first in [("valid", "D2N068"), ("test2", "D2N128"), ("test3", "D2N168")]:
        _write_aci(tmp_path, split, [first, "D2N999"])
        dialogues = aci_dialogues(split, root=tmp_path)
        assert [d.id for d in dialogues] == [f"aci-{split}-{first}", f"aci-{split}-D2N999"]
        # the metadata row joins by encounter_id (values stripped); an encounter without
        # a row gets none
        assert dialogues[0].meta["metadata"] == {"dataset": "aci", "id": "ACI001",
                                                 "patient_age": "50", "cc": "knee pain"}
        assert "metadata" not in dialogues[1].meta
        assert [n.id for n in aci_notes(split, root=tmp_path)] == [d.id for d in dialogues]
    _write_aci(tmp_path, "train", ["D2N001"], metadata=False)
    with caplog.at_level(logging.WARNING, logger="medpref.data.aci_bench"):
        assert "metadata" not in aci_dialogues("train", root=tmp_path)[0].meta
    assert "train_metadata.csv: no metadata file" in caplog.text
    with pytest.raises(FileNotFoundError, match=r"split 'test1' not found \(splits present: "
                                                r"train, valid, test2, test3\)"):
        aci_dialogues("test1", root=tmp_path)
    with pytest.raises(ValueError, match=r"unknown split 'validation'.*'valid'"):
        aci_dialogues("validation", root=tmp_path)


# ------------------------------------------------------------------ real data


@pytest.mark.shared_data
@pytest.mark.parametrize("split", list(MTS_COUNTS))
def test_mts_split_counts_and_alternation(shared, split):
    pairs = load_mts_dialog(split, root=shared)
    assert len(pairs) == MTS_COUNTS[split]
    assert len({d.id for d, _ in pairs}) == len(pairs)
    for dialogue, note in pairs:
        assert dialogue.id == note.id and dialogue.id.startswith(f"mts-{split}-")
        assert dialogue.source == note.source == "mts-dialog" and dialogue.lang == "en"
        assert _alternates(dialogue.turns) and note.reference_dialogue == dialogue.turns
        assert note.sections and note.note.startswith(next(iter(note.sections)))


@pytest.mark.shared_data
def test_mts_first_dialogue_and_note_match_the_file(shared):
    dialogue, note = load_mts_dialog("train", root=shared, limit=1)[0]
    assert dialogue.id == "mts-train-0000"
    assert dialogue.turns[:2] == [
        Turn(role="doctor", text="What brings you back into the clinic today, miss?"),
        Turn(role="patient", text="I came in for a refill of my blood pressure medicine."),
    ]
    assert list(note.sections) == ["GENHX"]
    assert note.sections["GENHX"].startswith("The patient is a 76-year-old white female")
    assert [d.id for d in mts_dialogues("test2", root=shared, limit=3)] == [
        n.id for n in mts_notes("test2", root=shared, limit=3)]


@pytest.mark.shared_data
def test_mts_guest_family_lines_land_in_patient_turns(shared):
    with open(shared / MTS_DIR / MTS_SPLITS["validation"], encoding="utf-8", newline="") as fh:
        raw = {int(row["ID"]): row["dialogue"] for row in csv.DictReader(fh)}
    guests = [d for d in mts_dialogues("validation", root=shared)
              if "guest_family" in d.meta["speakers"]]
    assert len(guests) == 11
    for dialogue in guests:
        text = raw[int(dialogue.id.rsplit("-", 1)[1])]
        said = text.split("Guest_family:", 1)[1].splitlines()[0].strip()
        assert any(said in t.text for t in dialogue.turns if t.role == "patient"), said
        assert _alternates(dialogue.turns)


@pytest.mark.shared_data
@pytest.mark.parametrize("split", list(ACI_COUNTS))
def test_aci_split_counts_sections_and_alternation(shared, split):
    pairs = load_aci_bench(split, root=shared)
    assert len(pairs) == ACI_COUNTS[split]
    for dialogue, note in pairs:
        assert dialogue.id == note.id and dialogue.id.startswith(f"aci-{split}-D2N")
        assert dialogue.source == note.source == "aci-bench"
        assert _alternates(dialogue.turns) and note.reference_dialogue == dialogue.turns
        assert note.sections and len(note.sections) >= 3


@pytest.mark.shared_data
def test_aci_first_encounter_matches_the_file(shared):
    dialogue = aci_dialogues("train", root=shared, limit=1)[0]
    note = aci_notes("train", root=shared, limit=1)[0]
    assert dialogue.id == note.id == "aci-train-D2N001"
    assert dialogue.turns[:2] == [Turn(role="doctor", text="hi , martha . how are you ?"),
                                  Turn(role="patient", text="i'm doing okay . how are you ?")]
    assert list(note.sections) == [
        "CHIEF COMPLAINT", "HISTORY OF PRESENT ILLNESS", "REVIEW OF SYSTEMS",
        "PHYSICAL EXAMINATION", "VITALS REVIEWED", "RESULTS", "ASSESSMENT AND PLAN"]
    assert note.sections["CHIEF COMPLAINT"] == "Annual exam."
    assert note.sections["HISTORY OF PRESENT ILLNESS"].startswith("Martha Collins is a 50-year-old")


@pytest.mark.shared_data
@pytest.mark.parametrize("split", list(ACI_COUNTS))
def test_aci_metadata_joins_every_encounter(shared, split):
    dialogues = aci_dialogues(split, root=shared)
    assert all(d.meta["metadata"]["dataset"] == d.meta["subset"] for d in dialogues)
    if split == "train":
        first = dialogues[0].meta["metadata"]
        assert (first["cc"], first["patient_age"], first["id"]) == ("annual exam", "50", "VA049")


@pytest.mark.shared_data
def test_aci_patient_guest_is_on_the_patient_side(shared):
    with_guest = [d for d in aci_dialogues("test1", root=shared)
                  if "patient_guest" in d.meta["speakers"]]
    assert len(with_guest) == 2
    assert all(_alternates(d.turns) for d in with_guest)


@pytest.mark.shared_data
def test_agentclinic_cases(shared):
    cases = agentclinic_cases(root=shared)
    assert len(cases) == 107
    assert len({c.id for c in cases}) == 107
    for case in cases:
        assert case.chief_complaint and case.department == "general"
        assert case.checklist.diseases and all(case.checklist.diseases)
        assert case.checklist.symptoms[0] == case.chief_complaint
        assert {"Demographics", "History", "Physical Examination Findings"} <= set(
            case.patient_info)
        assert all(case.patient_info.values())
    first = cases[0]
    assert first.id == "agentclinic-0001" and first.chief_complaint == "Double vision"
    assert first.checklist.diseases == ["Myasthenia gravis"]
    assert first.checklist.tests == ["Acetylcholine Receptor Antibodies", "Electromyography",
                                     "Chest CT"]
    assert "Weakness in upper limbs" in first.checklist.symptoms
    assert "Present (elevated)" in first.patient_info["Test Results"]
    assert sum(not c.checklist.tests for c in cases) == 2   # two cases list no tests
    assert all(c.script == [] for c in cases)                # no reference dialogue
    # agentclinic-0006 lists an MRI only as "Optional": not a key test
    assert cases[5].checklist.tests == ["X-Ray Knee"]
    assert "MRI Knee: Optional" in cases[5].patient_info["Test Results"]
    assert sum(len(c.checklist.tests) for c in cases) == 357


@pytest.mark.shared_data
def test_mts_correlation_study_joins_scores_by_row(shared):
    records = load_mts_correlation_study(root=shared)
    assert len(records) == 400
    assert sorted({r.system for r in records}) == [f"system-{k}" for k in range(1, 5)]
    assert all(r.id.startswith("mts-corr-s") and r.response for r in records)
    first = records[0]
    assert (first.id, first.system, first.dialogue_id) == (
        "mts-corr-s1-0000", "system-1", "mts-validation-0000")
    assert (first.human.acc, first.human.cmp) == (1.0, 0.125)
    assert first.human.spc == pytest.approx(1 - 0.901515152)
    assert first.human_raw["FactualF1"] == pytest.approx(0.22222222)
    # a summary identical to its reference is scored perfect: the row join is right
    same = [r for r in records if r.response == r.reference]
    assert same and all(r.human.acc == r.human.cmp == 1.0 for r in same)
