"""Hand grading of SP checklist items: queue, graded-file appends, agreement, widget."""

from __future__ import annotations

import json
import math
import os

import pytest

from medpref import REPO_ROOT
from medpref.contracts import ContractError, SPGradedItem, parse_record
from medpref.simulation import handgrading as hg

FIX = REPO_ROOT / "tests" / "fixtures" / "handgrading"
TRANSCRIPTS, GRADES = FIX / "transcripts.jsonl", FIX / "grades.jsonl"

# Hand labels for the 8 gradable items (sp-b/sft: the doctor never spoke). Against the
# fixture's machine grades: 7 compared (sp-b/base ECG abstained), 5 agree; hand and machine
# both pass 4 of 7, so pe = (4/7)^2 + (3/7)^2 = 25/49 and κ = (5/7 - 25/49)/(24/49) = 5/12.
HAND = {("sp-a", "base", "symptoms"): True, ("sp-a", "base", "tests"): True,
        ("sp-a", "base", "diseases"): True, ("sp-a", "sft", "symptoms"): False,
        ("sp-a", "sft", "tests"): False, ("sp-a", "sft", "diseases"): False,
        ("sp-b", "base", "symptoms"): True, ("sp-b", "base", "tests"): False}


def _queue(**kw):
    return hg.grading_queue(TRANSCRIPTS, GRADES, **kw)


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_queue_has_one_item_per_gradable_consultation_item_and_hides_the_machine():
    q = _queue()
    assert len(q) == 8  # 10 grades, minus the two of the consultation with no doctor turn
    assert {(w.case, w.doctor, w.category) for w in q} == set(HAND)
    assert len({w.id for w in q}) == 8 and all(w.id.startswith(f"hg-{w.case}-") for w in q)
    assert all(w.machine_passed is None and w.machine_method is None for w in q)
    first = next(w for w in q if (w.case, w.doctor, w.category) == ("sp-a", "base", "tests"))
    assert first.item == "HbA1c" and first.department == "endocrinology"
    assert [t.role for t in first.transcript] == ["patient", "doctor", "patient", "doctor"]
    shown = {(w.case, w.category): (w.machine_passed, w.machine_method)
             for w in _queue(reveal_machine=True, doctors=["base"])}
    assert shown[("sp-b", "tests")] == (None, "none")
    assert shown[("sp-a", "diseases")] == (False, "embedding")


def test_queue_is_seed_reproducible_and_skips_graded_ids_keeping_the_order():
    a, b, c = _queue(seed=3), _queue(seed=3), _queue(seed=4)
    assert [w.id for w in a] == [w.id for w in b]
    assert [w.id for w in a] != [w.id for w in c]  # 8! orders: a clash here is a bug
    done = {a[0].id, a[3].id}
    rest = _queue(seed=3, already_graded_ids=done)
    assert [w.id for w in rest] == [w.id for w in a if w.id not in done]
    assert [w.id for w in _queue(seed=3, already_graded_ids=done, limit=2)] == \
        [w.id for w in rest[:2]]
    assert {w.doctor for w in _queue(doctors=["sft"])} == {"sft"}
    assert hg.work_id("sp-a", "base", "tests", "HbA1c") == \
        hg.work_id("sp-a", "base", "tests", "HbA1c") != hg.work_id("sp-a", "sft", "tests", "HbA1c")


def test_queue_input_errors_name_file_line_and_field(tmp_path):
    bad = tmp_path / "grades.jsonl"
    lines = GRADES.read_text().splitlines()
    row = json.loads(lines[2])
    del row["category"]
    bad.write_text("\n".join([lines[0], lines[1], json.dumps(row)]) + "\n")
    with pytest.raises(ContractError, match=r"grades\.jsonl:3: field 'category'"):
        hg.grading_queue(TRANSCRIPTS, bad)
    with pytest.raises(FileNotFoundError, match="make repro"):
        hg.grading_queue(tmp_path / "none.jsonl", GRADES)
    orphan = tmp_path / "orphan.jsonl"
    orphan.write_text(json.dumps({**json.loads(lines[0]), "case": "sp-z"}) + "\n")
    with pytest.raises(ValueError, match="'sp-z'.*no transcript"):
        hg.grading_queue(TRANSCRIPTS, orphan)


def test_to_graded_item_round_trips_through_the_contract():
    work = _queue()[0]
    item = hg.to_graded_item(work, False, "  only the patient said it ", "dr-li")
    back = parse_record(SPGradedItem, json.loads(item.model_dump_json()))
    assert back == item
    assert (back.id, back.case, back.category, back.item) == \
        (work.id, work.case, work.category, work.item)
    assert (back.passed, back.tag, back.why) == (False, "hand:dr-li", "only the patient said it")
    assert [(t.role, t.text) for t in back.transcript] == \
        [(t.role, t.text) for t in work.transcript]
    assert back.model_extra["doctor"] == work.doctor
    if "lang" in SPGradedItem.model_fields:
        assert back.lang == "en"
    with pytest.raises(TypeError):
        hg.to_graded_item(work, None, "", "dr-li")
    with pytest.raises(ValueError, match="grader"):
        hg.to_graded_item(work, True, "", "  ")


def test_append_refuses_duplicates_and_leaves_the_file_unchanged(tmp_path):
    out = tmp_path / "hand.jsonl"
    q = _queue()
    assert hg.append_graded(out, [hg.to_graded_item(q[0], True, "", "a")]) == 1
    before = out.read_bytes()
    batch = [hg.to_graded_item(q[1], True, "", "a"), hg.to_graded_item(q[0], False, "", "b")]
    with pytest.raises(hg.DuplicateGradedItem, match=rf"{out.name}: id '{q[0].id}'"):
        hg.append_graded(out, batch)
    assert out.read_bytes() == before
    twice = [hg.to_graded_item(q[2], True, "", "a")] * 2
    with pytest.raises(hg.DuplicateGradedItem, match=q[2].id):
        hg.append_graded(out, twice)
    assert out.read_bytes() == before
    invalid = {**json.loads(hg.to_graded_item(q[3], True, "", "a").model_dump_json()),
               "category": "vitals"}
    with pytest.raises(ContractError, match="field 'category'"):
        hg.append_graded(out, [invalid])
    assert out.read_bytes() == before
    assert hg.append_graded(out, [hg.to_graded_item(q[1], False, "x", "a")]) == 1
    assert [r["id"] for r in _lines(out)] == [q[0].id, q[1].id]
    assert hg.load_graded_ids(out) == {q[0].id, q[1].id}
    assert hg.load_graded_ids(tmp_path / "absent.jsonl") == set()


def test_append_is_atomic_a_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    out = tmp_path / "hand.jsonl"
    q = _queue()
    hg.append_graded(out, [hg.to_graded_item(q[0], True, "", "a")])
    before = out.read_bytes()

    def crash(src, dst):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        hg.append_graded(out, [hg.to_graded_item(q[1], True, "", "a")])
    assert out.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["hand.jsonl"]  # no temp file left


def test_append_keeps_existing_lines_and_reports_bad_ones(tmp_path):
    out = tmp_path / "hand.jsonl"
    embedded = (REPO_ROOT / "data" / "embedded" / "sp_graded.jsonl").read_text().splitlines()[0]
    out.write_text(embedded)  # no trailing newline
    hg.append_graded(out, [hg.to_graded_item(_queue()[0], True, "", "a")])
    assert out.read_text().splitlines()[0] == embedded and len(_lines(out)) == 2
    out.write_text(embedded + "\n{not json\n")
    with pytest.raises(ContractError, match=r"hand\.jsonl:2: field '<json>'"):
        hg.append_graded(out, [hg.to_graded_item(_queue()[1], True, "", "a")])


def test_agreement_counts_abstentions_apart_and_gives_cohen_kappa(tmp_path):
    out = tmp_path / "hand.jsonl"
    items = [hg.to_graded_item(w, HAND[(w.case, w.doctor, w.category)], "", "a")
             for w in _queue()]
    hg.append_graded(out, items)
    embedded = (REPO_ROOT / "data" / "embedded" / "sp_graded.jsonl").read_text().splitlines()[0]
    hg.append_graded(out, [json.loads(embedded)])   # a hand item with no machine grade
    table = hg.agreement(out, GRADES).set_index("category")
    every = table.loc["all"]
    assert (every["items"], every["abstained"], every["compared"], every["unmatched"]) == \
        (8, 1, 7, 1)
    assert every["accuracy"] == pytest.approx(5 / 7)
    assert every["kappa"] == pytest.approx(5 / 12, abs=1e-6)
    assert (every["hand_pass"], every["machine_pass"]) == (4, 4)
    assert table.loc["symptoms", "kappa"] == pytest.approx(1.0)
    assert table.loc["tests", "compared"] == 2 and table.loc["tests", "kappa"] == pytest.approx(0)
    assert table.loc["diseases", "accuracy"] == pytest.approx(0.5)
    same = hg.agreement(items, GRADES).set_index("category")
    assert same.loc["all", "unmatched"] == 0 and same.loc["all", "compared"] == 7
    empty = hg.agreement([], GRADES)
    assert list(empty["category"]) == ["all"] and math.isnan(empty.loc[0, "kappa"])


def test_widget_builds_and_a_pass_click_appends_a_line(tmp_path):
    pytest.importorskip("ipywidgets")
    out = tmp_path / "hand.jsonl"
    q = _queue(limit=2, reveal_machine=True)
    panel = hg.grading_widget(q, hg.appender(out, "dr-li"))
    assert q[0].item in panel.item.value and "Pass" == panel.pass_button.description
    assert "machine:" not in panel.item.value   # blind unless show_machine
    assert "Doctor:" in panel.transcript.value
    panel.why.value = "asked directly"
    panel.pass_button.click()
    rows = _lines(out)
    assert len(rows) == 1 and rows[0]["id"] == q[0].id and rows[0]["passed"] is True
    assert rows[0]["why"] == "asked directly" and rows[0]["tag"] == "hand:dr-li"
    assert panel.current == q[1] and panel.why.value == "" and "2 / 2" in panel.progress.value
    panel.skip_button.click()
    assert len(_lines(out)) == 1 and panel.current is None and panel.pass_button.disabled
    again = hg.grading_widget(q, hg.appender(out, "dr-li"), show_machine=True)
    assert "machine:" in again.item.value
    again.fail_button.click()                    # already graded: shown, not raised
    assert "already graded" in again.status.value and again.current == q[0]
    assert len(_lines(out)) == 1
    with pytest.raises(ValueError, match="grader"):
        hg.appender(out, "")


# -- reading a committed transcripts.html -------------------------------------------------

PAGE_RECORDS = REPO_ROOT / "tests" / "fixtures" / "sp_transcripts" / "records.jsonl"


def test_transcripts_from_html_reads_every_turn_and_no_grade(tmp_path):
    """The page of stage 06 read back: case, doctor, language, department and the text of
    every turn, without the verdicts, evidence marks or "echo (not credited)" labels."""
    from medpref.simulation.transcripts_html import write_transcripts_html

    records = [json.loads(x) for x in PAGE_RECORDS.read_text(encoding="utf-8").splitlines()]
    page = tmp_path / "transcripts.html"
    write_transcripts_html(records, page)
    back = hg.transcripts_from_html(page)
    assert [(t.case, t.doctor, t.lang, t.department) for t in back] == \
        [(r["case"], r["doctor"], r.get("lang", "en"), r["department"]) for r in records]
    def shown(turn):       # the page shows a turn's sentences when the record has them
        words = " ".join(s["text"] for s in turn["sentences"]) if turn.get("sentences") \
            else turn["text"]
        return " ".join(words.split())

    for t, r in zip(back, records):
        assert [(x.role, x.text) for x in t.turns] == [(x["role"], shown(x)) for x in r["turns"]]
    text = " ".join(x.text for t in back for x in t.turns)
    assert "echo (not credited)" not in text and "not in the case" not in text
    assert "doesn’t know" not in text and "✓" not in text and "earned" not in text
    assert "You have been losing weight." in text       # an echo keeps its words


def test_transcripts_from_html_refuses_a_page_without_consultations(tmp_path):
    page = tmp_path / "other.html"
    page.write_text("<html><body><p>nothing here</p></body></html>", encoding="utf-8")
    with pytest.raises(ValueError, match="other.html: no consultation"):
        hg.transcripts_from_html(page)


def test_excerpt_keeps_the_complaint_and_the_patient_turn_before_each_doctor_turn():
    turns = [hg.Turn(role=r, text=f"{r} {i}") for i, r in
             enumerate(["patient", "doctor", "patient", "doctor", "patient", "doctor"])]
    assert [t.text for t in hg.excerpt(turns, [5])] == ["patient 0", "patient 4", "doctor 5"]
    assert [t.text for t in hg.excerpt(turns, [3, 1])] == \
        ["patient 0", "doctor 1", "patient 2", "doctor 3"]
    with pytest.raises(ValueError, match="turn 2 is not a doctor turn"):
        hg.excerpt(turns, [2])
    with pytest.raises(ValueError, match="turn 9 is not a doctor turn"):
        hg.excerpt(turns, [9])
