"""The embedded dialogue corpus (``data/embedded/dialogues.jsonl``) as a data set.

Every dialogue validates, alternates patient / doctor from the patient, marks the
diagnosis the doctor reaches (``meta.diagnosis``) and the doctor turn that reaches it
(``meta.diagnosis_turn``), and sits in the written split. No training dialogue shares a
content word of its diagnosis with a disease on an English SP case's checklist, so SFT
never trains on the SP test's own diseases.
"""

from __future__ import annotations

import re

import pytest

from medpref.contracts import Dialogue, read_jsonl
from medpref.data.sp_cases import embedded_sp_cases
from medpref.data.split import load_split
from medpref.params import load_params, repo_path

DIALOGUES = "data/embedded/dialogues.jsonl"

# Function words, and clinical words too generic to mean the same disease.
STOP_WORDS = set("""
a an and as at by due for from in of on or the to with without after before
""".split())
GENERIC_CLINICAL = set("""
acute chronic disease syndrome disorder infection suspected probable possible likely
primary secondary mild moderate severe major minor episode recurrent left right
upper lower bilateral type childhood deficiency
""".split())


def content_words(text: str) -> set[str]:
    """Lower-cased words of a disease name, less stop words, generic clinical words and
    bare numbers; hyphens and apostrophes split words ("Graves'" gives "graves")."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    return {w for w in words
            if w not in STOP_WORDS and w not in GENERIC_CLINICAL and not w.isdigit()}


def overlaps(diagnosis: str, diseases: dict[str, list[str]]) -> list[str]:
    """``case: disease (shared words)`` for each SP disease that shares a content word."""
    mine = content_words(diagnosis)
    return [f"{case}: {d} ({', '.join(sorted(mine & content_words(d)))})"
            for case, names in diseases.items() for d in names
            if mine & content_words(d)]


@pytest.fixture(scope="module")
def dialogues() -> list[Dialogue]:
    return read_jsonl(repo_path(DIALOGUES), Dialogue)


@pytest.fixture(scope="module")
def sp_diseases() -> dict[str, list[str]]:
    return {c.id: c.checklist.diseases for c in embedded_sp_cases() if c.lang == "en"}


def test_roles_alternate_from_the_patient(dialogues):
    bad = [(d.id, i) for d in dialogues for i, t in enumerate(d.turns)
           if t.role != ("patient" if i % 2 == 0 else "doctor")]
    assert not bad, f"turns out of patient/doctor order (dialogue, turn): {bad}"


def test_every_dialogue_marks_its_diagnosis_at_a_doctor_turn(dialogues):
    for d in dialogues:
        dx, k = d.meta.get("diagnosis"), d.meta.get("diagnosis_turn")
        assert isinstance(dx, str) and dx.strip(), f"{d.id}: meta.diagnosis missing or blank"
        assert type(k) is int and 0 <= k < len(d.turns), \
            f"{d.id}: meta.diagnosis_turn {k!r} is not an index into its {len(d.turns)} turns"
        assert d.turns[k].role == "doctor", f"{d.id}: meta.diagnosis_turn {k} is a patient turn"


def test_the_doctor_asks_before_the_diagnosis_turn(dialogues):
    """diagnosis_turn is the turn reached after a history: at least three doctor turns
    before it ask a question."""
    for d in dialogues:
        k = d.meta["diagnosis_turn"]
        asked = sum("?" in t.text for t in d.turns[:k] if t.role == "doctor")
        assert asked >= 3, f"{d.id}: only {asked} doctor question turns before turn {k}"


def test_ids_are_unique_and_each_is_in_the_split(dialogues):
    ids = [d.id for d in dialogues]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
    split = load_split(repo_path(load_params().shared.split))
    assert [i for i in ids if i not in split.parts] == []


def test_no_train_diagnosis_shares_a_word_with_an_sp_disease(dialogues, sp_diseases):
    split = load_split(repo_path(load_params().shared.split))
    assert len(sp_diseases) >= 10
    found = {d.id: hits for d in split.select(dialogues, "train")
             if (hits := overlaps(d.meta["diagnosis"], sp_diseases))}
    assert not found, f"train dialogues whose diagnosis overlaps an SP case: {found}"


@pytest.mark.parametrize("diagnosis, case", [
    ("community-acquired pneumonia", "sp-0002"),
    ("Graves disease", "sp-0003"),
    ("otitis media with effusion", "sp-0010"),
    ("acute appendicitis", "sp-0004"),
    ("umbilical hernia", "sp-0006"),
    ("obsessive-compulsive disorder", "sp-0015"),
])
def test_the_overlap_check_catches_an_sp_disease(sp_diseases, diagnosis, case):
    assert any(h.startswith(f"{case}:") for h in overlaps(diagnosis, sp_diseases))


@pytest.mark.parametrize("diagnosis", [
    "stable angina", "acute sinusitis", "chronic obstructive pulmonary disease",
    "recurrent anterior epistaxis", "herpes zoster (shingles)",
])
def test_the_overlap_check_passes_unrelated_diseases(sp_diseases, diagnosis):
    assert overlaps(diagnosis, sp_diseases) == []
