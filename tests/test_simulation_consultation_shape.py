"""One consultation shape: stage 06's consultation records read back into the objects that
wrote them (``Consultation.from_record`` inverts ``Consultation.record``), and every reader
of those lines validates them with the one schema, ``medpref.contracts.ConsultationRecord``."""

from __future__ import annotations

import pytest

from medpref import REPO_ROOT
from medpref.contracts import ConsultationRecord, ContractError, Turn, parse_record, read_jsonl
from medpref.simulation.consult import Consultation

RECORDS = REPO_ROOT / "reports" / "06_simulation" / "records" / "consultations.jsonl"


def test_a_consultation_reads_back_from_its_record():
    c = Consultation("sp-1", "cardiology", "en", "sft", "hf:x+lora:y",
                     [Turn(role="patient", text="Chest pain."),
                      Turn(role="doctor", text="Since when?")],
                     [{"round": 1, "speaker": "doctor"}], "end_marker", None, "model")
    assert Consultation.from_record(c.record()) == c
    assert Consultation.from_record(c.record()).record() == c.record()


def test_a_page_record_of_turns_only_takes_the_defaults():
    c = Consultation.from_record({"case": "sp-1", "doctor": "base",
                                  "turns": [{"role": "patient", "text": "Rash."}]})
    assert (c.lang, c.kind, c.ended_by, c.steps, c.error) == ("en", "model", "rounds", [], None)


def test_a_bad_line_names_file_line_and_field(tmp_path):
    with pytest.raises(ContractError, match=r"c\.jsonl:1: field 'turns'"):
        parse_record(ConsultationRecord, {"case": "sp-1", "doctor": "x"},
                     str(tmp_path / "c.jsonl"), 1)


def test_the_committed_consultations_read_as_the_schema_and_back():
    if not RECORDS.exists():
        pytest.skip("no stage-06 records in this checkout")
    rows = read_jsonl(RECORDS, ConsultationRecord)
    assert rows
    import json

    raw = [json.loads(line) for line in RECORDS.read_text(encoding="utf-8").splitlines()]
    for line, r in zip(raw, rows):
        again = Consultation.from_record(r).record()
        assert again == {k: v for k, v in line.items() if k != "key"}
