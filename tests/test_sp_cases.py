"""SP case contract, the embedded cases and the hand-graded checklist items."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from medpref.contracts import SP_CATEGORIES, ContractError, SPCase, SPGradedItem, read_jsonl
from medpref.data.adapters import SP_CASE_SOURCES
from medpref.data.sp_cases import embedded_sp_cases, embedded_sp_graded

DEPARTMENTS = {"internal_medicine", "surgery", "gynecology", "pediatrics", "psychiatry"}

GOOD = {"id": "sp-x", "department": "surgery", "chief_complaint": "Groin lump",
        "patient_info": {"Present history": "A lump for three months."},
        "script": [{"doctor": "How long?", "patient": "Three months."}],
        "checklist": {"symptoms": ["duration"], "tests": [], "diseases": ["inguinal hernia"]}}


def _write(path, records):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                    encoding="utf-8")


# ------------------------------------------------------------------ contract


def test_good_case_round_trips_with_defaults(tmp_path):
    f = tmp_path / "c.jsonl"
    _write(f, [GOOD, {k: v for k, v in GOOD.items() if k != "script"}])
    first, second = read_jsonl(f, SPCase)
    assert first.lang == "en" and first.checklist.tests == []
    assert first.script[0]["doctor"] == "How long?"
    assert second.script == []


@pytest.mark.parametrize("broken, field", [
    ({"department": ""}, "department"),
    ({"chief_complaint": None}, "chief_complaint"),
    ({"patient_info": {"Present history": "  "}}, "patient_info"),
    ({"script": [{"doctor": "Q?", "patient": "A."}, {"doctor": "Q?"}]}, "script.1"),
    ({"script": [{"doctor": "Q?", "patient": "A.", "nurse": "x"}]}, "script.0"),
    ({"script": [{"doctor": " ", "patient": "A."}]}, "script.0"),
    ({"checklist": {"symptoms": ["ok", ""], "diseases": ["x"]}}, "checklist.symptoms"),
    ({"checklist": {"diseases": "hernia"}}, "checklist.diseases"),
])
def test_broken_case_names_file_line_and_field(tmp_path, broken, field):
    f = tmp_path / "cases.jsonl"
    _write(f, [GOOD, {**GOOD, **broken}])
    with pytest.raises(ContractError) as err:
        read_jsonl(f, SPCase)
    assert (err.value.line, err.value.field) == (2, field)
    assert str(err.value).startswith(f"{f}:2: field '{field}'")


def test_missing_checklist_is_named(tmp_path):
    f = tmp_path / "cases.jsonl"
    _write(f, [{k: v for k, v in GOOD.items() if k != "checklist"}])
    with pytest.raises(ContractError, match=r"cases\.jsonl:1: field 'checklist': Field required"):
        read_jsonl(f, SPCase)


def test_graded_item_contract(tmp_path):
    good = {"id": "g-1", "case": "sp-x", "category": "tests", "item": "ultrasound",
            "transcript": [{"role": "doctor", "text": "Let's scan it."}], "passed": True}
    f = tmp_path / "g.jsonl"
    _write(f, [good, {**good, "category": "history"}])
    with pytest.raises(ContractError, match=r"g\.jsonl:2: field 'category'"):
        read_jsonl(f, SPGradedItem)
    _write(f, [{**good, "transcript": [{"role": "patient", "text": "I have a lump."}]}])
    with pytest.raises(ContractError, match=r"g\.jsonl:1: field 'transcript'.*doctor turn"):
        read_jsonl(f, SPGradedItem)


# ------------------------------------------------------------------ embedded cases


@pytest.fixture(scope="module")
def cases() -> list[SPCase]:
    return embedded_sp_cases()


def test_embedded_cases_cover_the_departments(cases):
    english = [c for c in cases if c.lang == "en"]
    per_department = Counter(c.department for c in english)
    assert len(english) >= 15 and set(per_department) == DEPARTMENTS
    assert min(per_department.values()) >= 3
    chinese = [c for c in cases if c.lang == "zh"]
    assert len(chinese) >= 2
    # Chinese cases really are Chinese: most characters of the complaint are CJK
    for case in chinese:
        text = case.chief_complaint + case.script[0]["doctor"]
        assert sum("\u4e00" <= ch <= "\u9fff" for ch in text) > len(text) / 2
    assert len({c.id for c in cases}) == len(cases)
    assert SP_CASE_SOURCES["embedded"]() == cases


def test_every_case_has_a_long_script_and_a_full_checklist(cases):
    for case in cases:
        assert len(case.script) >= 20, case.id
        assert 1 <= len(case.checklist.diseases) <= 2, case.id
        assert case.checklist.symptoms and case.checklist.tests, case.id
        assert len(case.patient_info) >= 4, case.id


def test_every_case_states_test_results_and_history(cases):
    for case in cases:
        keys = " ".join(case.patient_info).lower()
        assert ("test" in keys or "辅助检查" in keys), case.id
        assert ("present history" in keys or "现病史" in keys), case.id
        assert ("past history" in keys or "既往史" in keys), case.id


def test_scripts_hold_distractors(cases):
    """Each script has questions answered in the negative (``No``/``没有``/``不``...)."""
    negative = ("no", "not", "never", "none", "没有", "不", "没")
    for case in cases:
        answers = [p["patient"].lower() for p in case.script]
        n = sum(a.startswith(negative) for a in answers)
        assert n >= 2, (case.id, n)


def test_checklist_diseases_do_not_leak_into_the_script(cases):
    """The script's patient never states the diagnosis (it may only guess in a question)."""
    for case in cases:
        for disease in case.checklist.diseases:
            name = disease.split(" (")[0].split("（")[0].lower()
            statements = [p["patient"].lower() for p in case.script
                          if not p["patient"].rstrip().endswith(("?", "？"))]
            assert not any(name in s for s in statements), (case.id, disease)


# ------------------------------------------------------------------ graded items


@pytest.fixture(scope="module")
def graded() -> list[SPGradedItem]:
    return embedded_sp_graded()


def test_graded_items_refer_to_existing_cases_and_items(cases, graded):
    by_id = {c.id: c for c in cases}
    assert len(graded) >= 30 and len({g.id for g in graded}) == len(graded)
    for item in graded:
        assert item.case in by_id, item.id
        assert item.item in getattr(by_id[item.case].checklist, item.category), item.id
        assert item.why, item.id


def test_graded_items_are_balanced_and_hold_hard_negatives(graded):
    labels = Counter(g.passed for g in graded)
    assert labels[True] >= 10 and labels[False] >= 10
    assert {g.category for g in graded} == set(SP_CATEGORIES)
    tags = Counter(g.tag for g in graded)
    assert tags["patient_volunteered"] >= 3 and tags["four_or_more_diseases"] >= 3
    assert all(not g.passed for g in graded
               if g.tag in {"patient_volunteered", "four_or_more_diseases", "near_miss",
                            "negated", "not_asked", "not_recommended", "not_named"})
    assert all(g.passed for g in graded if g.tag in {"asked", "recommended", "named"})


def test_hard_negatives_look_like_their_tag(graded):
    """A volunteered item: only the patient side touches it. A four-disease item: one
    doctor turn lists at least four candidates (three commas or more, 'or')."""
    for g in graded:
        doctor = [t.text for t in g.transcript if t.role == "doctor"]
        if g.tag == "four_or_more_diseases":
            assert g.category == "diseases"
            assert any(t.count(",") >= 3 or (t.count(",") >= 2 and " or " in t)
                       for t in doctor), g.id
        if g.tag == "patient_volunteered":
            assert any(t.role == "patient" for t in g.transcript[:2]), g.id
