"""Contract violations name file, line and field; writes are atomic."""

from __future__ import annotations

import json

import pytest

from medpref.contracts import ContractError, Dialogue, UnlabeledItem, read_jsonl, write_jsonl

GOOD = {"id": "d-1", "turns": [{"role": "patient", "text": "hi"},
                               {"role": "doctor", "text": "hello"}]}


def _write_lines(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_bad_role_names_file_line_and_field(tmp_path):
    f = tmp_path / "d.jsonl"
    bad = {"id": "d-2", "turns": [{"role": "patient", "text": "a"}, {"role": "nurse", "text": "b"}]}
    _write_lines(f, [GOOD, bad])
    with pytest.raises(ContractError) as err:
        read_jsonl(f, Dialogue)
    assert err.value.line == 2 and err.value.field == "turns.1.role"
    assert str(err.value).startswith(f"{f}:2: field 'turns.1.role'")


def test_missing_field_and_invalid_json(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text(json.dumps(GOOD) + "\n{not json\n")
    with pytest.raises(ContractError, match=r":2: field '<json>'"):
        read_jsonl(f, Dialogue)
    _write_lines(f, [{"turns": GOOD["turns"]}])
    with pytest.raises(ContractError, match=r":1: field 'id'"):
        read_jsonl(f, Dialogue)


def test_unlabeled_history_must_end_with_the_patient(tmp_path):
    f = tmp_path / "u.jsonl"
    _write_lines(f, [{"id": "u-1", "history": GOOD["turns"],
                      "candidates": [{"response": "r", "source": "sampled"}]}])
    with pytest.raises(ContractError, match="field 'history'.*patient"):
        read_jsonl(f, UnlabeledItem)


def test_failed_write_leaves_the_old_file_untouched(tmp_path):
    f = tmp_path / "out.jsonl"
    write_jsonl(f, [GOOD])
    before = f.read_bytes()
    with pytest.raises(ContractError, match=r"out\.jsonl:2: field 'turns'"):
        write_jsonl(f, [GOOD, {"id": "x", "turns": []}], model=Dialogue)
    assert f.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]


def test_extra_fields_survive_a_round_trip(tmp_path):
    f = tmp_path / "d.jsonl"
    write_jsonl(f, [{**GOOD, "meta": {"department": "ent"}, "stage_field": 3}], model=Dialogue)
    (d,) = read_jsonl(f, Dialogue)
    assert d.meta == {"department": "ent"} and d.model_extra == {"stage_field": 3}


def test_embedded_corpus_meets_the_contract_and_the_issue():
    from medpref import REPO_ROOT

    dialogues = read_jsonl(REPO_ROOT / "data/embedded/dialogues.jsonl", Dialogue)
    assert len(dialogues) >= 40
    assert all(len([t for t in d.turns if t.role == "doctor"]) >= 6 for d in dialogues)
    assert {d.meta["style"] for d in dialogues} == {"collect_then_diagnose",
                                                    "hypothesis_then_verify"}
    assert len({d.meta["department"] for d in dialogues}) >= 5


# -- files that are not UTF-8, or empty: one error naming file and line ----------------
def test_latin1_line_names_file_and_line(tmp_path):
    from medpref.contracts import DataFileError

    f = tmp_path / "d.jsonl"
    bad = json.dumps({"id": "d-2", "turns": [{"role": "patient", "text": "caf\u00e9"}]},
                     ensure_ascii=False)
    f.write_bytes((json.dumps(GOOD) + "\n").encode() + (bad + "\n").encode("latin-1"))
    with pytest.raises(DataFileError, match=rf"^{f}:2: not UTF-8 \(byte 0xe9 .*latin-1"):
        read_jsonl(f, Dialogue)


def test_utf16_file_is_named(tmp_path):
    from medpref.contracts import DataFileError

    f = tmp_path / "d.jsonl"
    f.write_text(json.dumps(GOOD) + "\n", encoding="utf-16")
    with pytest.raises(DataFileError, match=rf"^{f}: the file is UTF-16"):
        read_jsonl(f, Dialogue)


def test_utf8_bom_is_accepted(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text(json.dumps(GOOD) + "\n", encoding="utf-8-sig")
    assert read_jsonl(f, Dialogue)[0].id == "d-1"


def test_empty_file_is_an_error_naming_it(tmp_path):
    from medpref.contracts import DataFileError

    f = tmp_path / "d.jsonl"
    f.write_text("\n\n")
    with pytest.raises(DataFileError, match=rf"^{f}: empty file: no Dialogue records"):
        read_jsonl(f, Dialogue)
    assert read_jsonl(f, Dialogue, allow_empty=True) == []


def test_latin1_csv_of_a_real_data_set_names_file_and_line(tmp_path):
    from medpref.contracts import DataFileError
    from medpref.data.readers import csv_rows

    f = tmp_path / "x.csv"
    f.write_bytes("ID,dialogue\n1,Doctor: hi\n2,Patient: caf\u00e9\n".encode("latin-1"))
    with pytest.raises(DataFileError, match=rf"^{f}:3: not UTF-8"):
        list(csv_rows(f, ["ID", "dialogue"]))
