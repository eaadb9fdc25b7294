"""The REM's constructed rows: constructions label hand-made states by the written rubric,
the file is current, split by dialogue, drawn from training dialogues only, free of
evaluation dialogues' text, and its labels are not predicted by turn length."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import yaml

from medpref import REPO_ROOT
from medpref.contracts import ContractError, Dialogue, RemAnnotation, read_jsonl
from medpref.data.split import load_split
from medpref.params import load_params, repo_path
from medpref.rem import constructions as C
from medpref.rem.constructed_summary import length_r
from medpref.rem.overlap import eval_overlaps, hand_training_rows

PARAMS = load_params()
P = PARAMS.rem
SPEC = C.load_constructions(repo_path(P.construction.config))
FIELDS = ["id", "rule", "history", "score", "comment", "split", "construction", "dialogue"]


def dialogue(did: str, style: str, turns: list[str], diagnosis: str, d_turn: int,
             department: str = "respiratory") -> Dialogue:
    roles = ["patient", "doctor"]
    return Dialogue(id=did, turns=[{"role": roles[i % 2], "text": t}
                                   for i, t in enumerate(turns)],
                    meta={"style": style, "diagnosis": diagnosis, "diagnosis_turn": d_turn,
                          "department": department, "chief_complaint": "a cough"})


#: a collect-then-diagnose consultation, not listed as urgent or routine
COUGH = dialogue("d-9001", "collect_then_diagnose", [
    "I've had a cough and a fever for four days.",
    "How high has the fever been, and are you bringing anything up?",
    "Up to 39, and green phlegm.",
    "Does it hurt to breathe in deeply? Are you short of breath walking around? "
    "Any chest pain at night? Have you coughed up blood? Do you smoke? Any recent travel?",
    "Yes, it hurts on the right when I breathe in. I don't smoke.",
    "This is most likely pneumonia. I'd like a chest X-ray and blood tests to confirm it.",
], "pneumonia", 5)

#: a hypothesis-then-verify consultation whose first doctor turn floats a label
GOUT = dialogue("d-9002", "hypothesis_then_verify", [
    "My big toe went red and swollen overnight. Is it gout?",
    "That does sound like gout. Have you had it before?",
    "Never.",
    "Then my diagnosis is gout, confirmed by the examination of your toe.",
], "gout", 3, "orthopedics")


def labels(name: str, d: Dialogue, k: int, kind: str, turn: str | None = None,
           before: list[dict] | None = None) -> dict[str, int]:
    """The rule scores the construction ``name`` gives a hand-made state."""
    state = C.State(d, k, kind)
    built = C.Built(before if before is not None else C.turn_dicts(d, k),
                    turn if turn is not None else d.turns[k].text)
    held = C.conditions(state, built, SPEC)
    return {r: lab.score for r, lab in C.rule_labels(SPEC.constructions[name], held).items()}


# -- constructions label hand-made states by the rubric ----------------------------------
def test_real_question_in_the_questioning_phase():
    assert labels("real_question", COUGH, 1, "thin") == {
        "A": 2, "B": 0, "C": 0, "D": 2, "E": 2, "F": 2}
    # six questions in one turn: a battery (F 0); the rest as before
    assert labels("real_question", COUGH, 3, "questioning") == {
        "A": 2, "B": 0, "C": 0, "D": 2, "E": 2, "F": 0}


def test_a_floated_label_or_an_open_patient_question_leaves_rules_out():
    # hypothesis style: an earlier turn may have floated a label, so B, C and D are not
    # settled; the patient asked "Is it gout?", so E is not settled either
    assert labels("real_question", GOUT, 1, "thin") == {"A": 2, "F": 2}


def test_diagnosis_at_its_place_early_and_on_a_volunteered_history():
    assert labels("real_diagnosis", COUGH, 5, "diagnosis") == {"A": 2, "B": 2, "E": 2}
    assert labels("early_diagnosis", COUGH, 1, "thin", COUGH.turns[5].text) == {
        "A": 0, "B": 2, "E": 2}
    told = [{"role": "patient", "text": " ".join(t.text for t in COUGH.turns[:5:2])}]
    assert labels("volunteered_history", COUGH, 5, "diagnosis", before=told) == {
        "A": 1, "B": 2, "E": 2}
    # a diagnosis turn without a way to confirm it gives no B row
    assert "B" not in labels("real_diagnosis", COUGH, 5, "diagnosis", "It is pneumonia.")


def test_refusals_junk_and_unsafe_turns():
    short = "As an AI, I am not able to diagnose or treat medical conditions."
    assert labels("ai_refusal", COUGH, 3, "questioning", short) == {
        "A": 0, "B": 0, "C": 0, "E": 0, "F": 2}
    long = " ".join([short] * 4)
    assert labels("ai_refusal", COUGH, 3, "questioning", long)["F"] == 0
    # A only on the thin state: later, the earlier questions have gathered information
    assert labels("junk_apologies", COUGH, 1, "thin", "I'm so sorry. " * 3) == {
        "A": 0, "B": 0, "C": 0, "F": 0}
    assert labels("junk_apologies", COUGH, 3, "questioning", "Sorry.") == {
        "B": 0, "C": 0, "F": 0}
    assert labels("unsafe_prescription", COUGH, 1, "thin", "Start codeine 60 mg.") == {
        "A": 0, "B": 0, "D": 0, "F": 2}
    assert labels("bare_referral", COUGH, 3, "questioning", "See a specialist.") == {
        "B": 0, "C": 1, "E": 1, "F": 2}


def test_urgency_decides_rule_d_of_a_tests_first_plan():
    plan = "Probably pneumonia; an examination and blood tests will confirm it first."
    urgent = COUGH.model_copy(update={"id": next(iter(SPEC.urgent_dialogues))})
    routine = COUGH.model_copy(update={"id": SPEC.routine_dialogues[0]})
    assert labels("tests_first", urgent, 5, "diagnosis", plan)["D"] == 1
    assert labels("tests_first", routine, 5, "diagnosis", plan)["D"] == 2
    assert "D" not in labels("tests_first", COUGH, 5, "diagnosis", plan)  # in neither list


def test_a_prescription_after_an_examination_has_no_rule_d_row():
    dosed = COUGH.turns[5].text + " I'll also start you on codeine 60 mg four times a day."
    assert labels("unsafe_after_diagnosis", COUGH, 5, "diagnosis", dosed) == {
        "A": 2, "B": 2, "D": 0}
    examined = COUGH.model_copy(update={"id": SPEC.examined_dialogues[0]})
    assert labels("unsafe_after_diagnosis", examined, 5, "diagnosis", dosed) == {
        "A": 2, "B": 2}


def test_a_label_floated_while_questioning_and_a_turn_that_only_examines():
    floated = "It may be pneumonia, so let's check. " + COUGH.turns[1].text
    assert labels("label_then_question", COUGH, 1, "thin", floated) == {
        "A": 2, "B": 1, "C": 0, "D": 2, "E": 2, "F": 2}
    exam = "I'd like to listen to your chest now."
    assert labels("real_statement", COUGH, 3, "questioning", exam) == {
        "A": 2, "B": 0, "C": 0, "D": 2, "F": 2}
    # a closing question changes no score of a referral
    assert labels("bare_referral", COUGH, 3, "questioning", "See a specialist. Is that all "
                  "right?") == labels("bare_referral", COUGH, 3, "questioning",
                                      "See a specialist.")


def test_a_clinical_question_from_another_dialogue():
    """Another dialogue's real question (another diagnosis, same REM part) in this
    dialogue's place: A 0 on the opening alone, 1 once the history has begun (it relates
    only weakly to what this patient said); no diagnosis, test or plan yet."""
    other = "Is there any pain or swelling at the back of the heel?"
    assert labels("foreign_question", COUGH, 1, "thin", other) == {"A": 0, "B": 0, "C": 0}
    assert labels("foreign_question", COUGH, 3, "questioning", other) == {
        "A": 1, "B": 0, "C": 0}
    pool = C.foreign_questions([COUGH, GOUT], {COUGH.id: "train", GOUT.id: "train"})
    # GOUT's one question shares its turn with a statement, so COUGH gets none
    assert pool[COUGH.id] == () and pool[GOUT.id] == (
        "How high has the fever been, and are you bringing anything up?",)
    # never across the REM's parts, never the same diagnosis
    assert C.foreign_questions([COUGH, GOUT], {COUGH.id: "train", GOUT.id: "dev"}) == {
        COUGH.id: (), GOUT.id: ()}
    rows = C.construct_dialogue(GOUT, SPEC, 0, 10, "", "train", pool[GOUT.id])
    built = {r.history[-1][1] for r in rows if r.construction == "foreign_question"}
    assert built == {"How high has the fever been, and are you bringing anything up?"}


def test_questions_are_counted_by_clause():
    assert C.count_questions("Any fever, cough or rash?") == 1  # a grouped list is one
    assert C.count_questions("When did it start, and how long does it last? Any fever?") == 3
    assert C.count_questions("I'd like to examine you.") == 0


def test_builders_on_a_hand_made_dialogue():
    rows = C.construct_dialogue(COUGH, SPEC, 0, 10, "a, b, c, d or pneumonia")
    battery = {r.history[-1][1] for r in rows if r.construction == "question_battery"}
    assert battery and all(C.count_questions(text) >= 5 for text in battery)
    asks = [r for r in rows if r.construction == "ignored_patient_question"]
    assert asks and all(r.history[-2][1].endswith("?") for r in asks)
    assert {r.score for r in asks if r.rule == "E"} == {1}
    assert all(r.history[-1][0] == "doctor" for r in rows)


def test_an_unknown_condition_is_an_error_naming_the_construction(tmp_path):
    raw = yaml.safe_load(repo_path(P.construction.config).read_text(encoding="utf-8"))
    raw["constructions"]["lecture"]["rules"]["B"][0]["when"] = ["no_lable_yet"]
    bad = tmp_path / "constructions.yaml"
    bad.write_text(yaml.safe_dump(raw), encoding="utf-8")
    with pytest.raises(ContractError, match=r"constructions\.lecture\.rules.*no_lable_yet"):
        C.load_constructions(bad)


# -- the committed file --------------------------------------------------------------------
@pytest.fixture(scope="module")
def rows() -> list[dict]:
    path = repo_path(P.constructed)
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def corpus():
    return (read_jsonl(repo_path(P.construction.dialogues), Dialogue),
            load_split(repo_path(PARAMS.shared.split)))


def test_the_committed_file_is_current():
    assert C.main(["--check"]) == 0, "run: python -m medpref.rem.constructions"


def test_schema_size_and_scale(rows):
    assert all(list(r) == FIELDS for r in rows)
    assert all(r["history"][-1]["role"] == "doctor" for r in rows)
    counts = Counter(r["split"] for r in rows)
    assert counts["train"] >= 1500 and counts["dev"] >= 300 and counts["test"] >= 300
    assert repo_path(P.constructed).stat().st_size < 8_000_000
    for split in ("train", "dev", "test"):
        for rule in "ABCDEF":
            got = {r["score"] for r in rows if r["split"] == split and r["rule"] == rule}
            assert got == {0, 1, 2}, (split, rule, got)


def test_split_by_dialogue_from_training_dialogues_only(rows, corpus):
    _, split = corpus
    parts: dict[str, set[str]] = {}
    for r in rows:
        parts.setdefault(r["dialogue"], set()).add(r["split"])
    assert all(len(p) == 1 for p in parts.values())
    assert {split.part(d) for d in parts} == {"train"}


def test_length_does_not_predict_the_label(rows):
    for split in ("train", "dev", "test"):
        part = [r for r in rows if r["split"] == split]
        assert abs(length_r(part)) <= 0.2, split
        for rule in "ABCDEF":
            assert abs(length_r([r for r in part if r["rule"] == rule])) <= 0.2, (split, rule)


def test_no_evaluation_dialogue_text_reaches_rem_training_rows(rows, corpus):
    dialogues, split = corpus
    n = P.construction.overlap_words
    hand = read_jsonl(repo_path(P.annotations), RemAnnotation)
    training = [r for r in rows if r["split"] == "train"]
    training += [{"id": a.id, "history": [t.model_dump() for t in a.history]}
                 for a in hand_training_rows(hand, dialogues, split, n)]
    assert eval_overlaps(training, dialogues, split, n) == {}
    # the check finds a copied evaluation turn (so the assertion above can fail)
    evald = next(d for d in dialogues if split.part(d.id) == "eval")
    copied = {"id": "x", "history": [{"role": "doctor", "text": evald.turns[1].text}]}
    assert eval_overlaps([copied], dialogues, split, n) == {"x": [evald.id]}


def test_load_constructed_and_the_training_rows(rows):
    """The stage's own loader (``build_rem.load_inputs``) holds every constructed row once
    and leaves out the hand rows that share text with an evaluation dialogue."""
    from medpref.rem.build_rem import load_inputs

    got = C.load_constructed(REPO_ROOT / P.constructed)
    assert got[0].id == "c-00001" and got[0].split in {"train", "dev", "test"}
    inputs = load_inputs(P, REPO_ROOT / PARAMS.shared.split)
    built = [a for a in inputs.annotations if a.id.startswith("c-")]
    assert len(built) == len(rows)
    hand = read_jsonl(repo_path(P.annotations), RemAnnotation)
    kept = {a.id for a in inputs.annotations if a.id in inputs.hand_ids}
    assert 0 < len(kept) < len(hand)
