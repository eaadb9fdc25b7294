"""Turn quality (medpref.turns.turn_quality) on hand-written turns, stage 02's report
frames, and SFT's filter of failing doctor targets."""

from __future__ import annotations

import json
import math

import pytest

from medpref.contracts import Dialogue, Turn
from medpref.training.dialogue_sft import (
    DialogueSource,
    count_targets,
    sft_examples,
    target_passes,
)
from medpref.turns.turn_quality import (
    CHECKS,
    check_dialogue,
    claims_other_role,
    leaks_prompt,
    markers_from_template,
    prompt_markers,
    quality_per_dialogue,
    quality_per_system,
    repeats_sentence,
    table3_block,
)

# -- role ------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["I'm Dr. John Smith, and I'm glad to meet you.",
                                  "Doctor, I'm sorry. I'm a doctor.",
                                  "My name is Dr. Alex.", "I am a physician myself.",
                                  "Hello, I’m Dr. Emily Petterson."])
def test_a_patient_claiming_to_be_a_doctor_is_flagged(text):
    assert claims_other_role(text, "patient")


@pytest.mark.parametrize("text", ["Dr. Smith said I should rest.",
                                  "Thanks, Dr. Smith. Does that mean I need pills?",
                                  "I'm doing okay, doctor.", "I'm dreading the doctor's bill."])
def test_a_patient_naming_a_doctor_is_not_a_claim(text):
    assert not claims_other_role(text, "patient")


@pytest.mark.parametrize("text", ["I'm a medical journalist writing about asthma.",
                                  "I am your patient today.", "I'll be your personal trainer."])
def test_a_doctor_claiming_another_role_is_flagged(text):
    assert claims_other_role(text, "doctor")


@pytest.mark.parametrize("text", ["Hello, I'm Dr. Elena Martinez.", "I'm a doctor here.",
                                  "I'm patient with you; take your time.",
                                  "The patient portal has your results."])
def test_a_doctor_being_a_doctor_is_not_flagged(text):
    assert not claims_other_role(text, "doctor")


# -- leakage ---------------------------------------------------------------------------------

def test_markers_come_from_the_prompt_headings_and_instructions():
    headings, instructions = markers_from_template(
        "Clinical note:\n{{note}}\n\nBring up next: {{keywords}}\n\n"
        "Write the doctor's next turn only: one or two sentences. Be kind.")
    assert headings == ["clinical note:", "bring up next:"]
    assert instructions == ["write the doctor s next turn"]  # 6 words; "Be kind." too short
    headings, instructions = prompt_markers()  # the project's NoteChat prompt files
    assert "conversation so far:" in headings
    assert "write the doctor s next turn" in instructions


@pytest.mark.parametrize("text", [
    "Conversation so far: the patient has a cough.",
    "I'll start. Write the doctor's next turn only: one or two sentences.",
    "Do you have joint pain (absent) or fever?",
    "Your rash (present) looks better.",
    "How are you? Patient: I'm fine.",
    "A: I'm Dr. Alex. B: How is it going today?",
    "Subjective: chest pain for two days.",
])
def test_prompt_and_annotation_leakage_is_flagged(text):
    assert leaks_prompt(text)


@pytest.mark.parametrize("text", [
    "The doctor told me to rest.", "Is the rash still present?",
    "I was absent from work (sick) last week.", "Plan A is rest; plan B is surgery.",
    "Let's go over the conversation we had last time.",
    "The note says your blood pressure is high.",
])
def test_ordinary_speech_does_not_leak(text):
    assert not leaks_prompt(text)


# -- repetition ------------------------------------------------------------------------------

def test_a_sentence_said_twice_in_the_turn_is_flagged():
    assert repeats_sentence("I'm here to relax today. Sometimes I rest. I'm here to relax today.")
    assert not repeats_sentence("Yes. Yes. I think so.")  # short repeats are natural


def test_a_sentence_copied_from_an_earlier_turn_is_flagged():
    earlier = ["Good day, I'm Dr. Emily Petterson, a wonderful physician from the clinic."]
    assert repeats_sentence("Hello. I'm Dr. Emily Petterson, a wonderful physician from the "
                            "clinic.", earlier)
    assert not repeats_sentence("I have had a headache for two days now.", earlier)
    assert not repeats_sentence("I'm going to take it off.", ["I'm going to take it off now."])


def test_a_turn_passes_only_without_any_flag():
    flags = check_dialogue([
        {"role": "doctor", "text": "What brings you in today?"},
        Turn(role="patient", text="I'm Dr. John Smith, and I have a cough."),
        Turn(role="doctor", text="Conversation so far: how long has the cough lasted?"),
        Turn(role="patient", text="About a week, and it is worse at night.")])
    assert [f.passes for f in flags] == [True, False, False, True]
    assert (flags[1].role, flags[1].leak, flags[2].leak, flags[2].role) == (True, False, True,
                                                                            False)


# -- stage 02's report -----------------------------------------------------------------------

def test_report_counts_flags_per_dialogue_and_shares_per_system():
    good = [Turn(role="doctor", text="What brings you in?"), Turn(role="patient", text="A cough.")]
    bad = [Turn(role="doctor", text="Doctor: hello."),
           Turn(role="patient", text="I'm a doctor.")]
    per = quality_per_dialogue({"NoteChat": {"n-1": good, "n-2": bad, "n-3": []},
                                "Human": {"n-1": good}})
    assert list(per.columns) == ["system", "note_id", "turns", *CHECKS, "passing"]
    assert per.loc[1, ["turns", "role", "leak", "repeat", "passing"]].tolist() == [2, 1, 1, 0, 0]
    assert per.loc[2, "turns"] == 0
    summary = quality_per_system(per).set_index("system")
    assert list(summary.columns) == ["dialogues", "turns", "role %", "leak %", "repeat %",
                                     "empty %", "passing %"]
    assert summary.loc["NoteChat", "turns"] == 4
    assert summary.loc["NoteChat", "passing %"] == pytest.approx(50.0)
    assert summary.loc["NoteChat", "role %"] == pytest.approx(25.0)
    assert summary.loc["Human", "passing %"] == pytest.approx(100.0)
    assert list(table3_block(summary.reset_index()).columns)[0] == "Turn quality"


# -- SFT reads passing turns -----------------------------------------------------------------

def _dialogue() -> Dialogue:
    return Dialogue(id="d", turns=[Turn(role="patient", text="My knee hurts."),
                                   Turn(role="doctor", text="Conversation so far: since when?"),
                                   Turn(role="patient", text="Two days."),
                                   Turn(role="doctor", text="Did you fall?")])


def test_sft_filter_drops_a_failing_target_and_keeps_it_as_context():
    d = _dialogue()
    everything = sft_examples([d], "sys", None, 0)
    assert [ex["completion"][0]["content"] for ex in everything] == [
        "Conversation so far: since when?", "Did you fall?"]
    kept = sft_examples([d], "sys", None, 0, turn_quality=True)
    assert [ex["completion"][0]["content"] for ex in kept] == ["Did you fall?"]
    assert "Conversation so far: since when?" in [m["content"] for m in kept[0]["prompt"]]
    assert target_passes([{"role": "user", "content": "Hi."}], "How can I help?")


def test_sources_report_counts_targets_failing_and_kept():
    good = Dialogue(id="g", turns=[Turn(role="patient", text="I feel dizzy."),
                                   Turn(role="doctor", text="When did it start?")])
    sources = [DialogueSource("a.jsonl", 1, train=1), DialogueSource("b.jsonl", 1, train=1)]
    count_targets([good, _dialogue()], sources, turn_quality=False)
    assert [(s.targets, s.failing_turn_quality, s.kept) for s in sources] == [(1, 0, 1),
                                                                               (2, 1, 2)]
    count_targets([good, _dialogue()], sources, turn_quality=True)
    assert [(s.targets, s.failing_turn_quality, s.kept) for s in sources] == [(1, 0, 1),
                                                                               (2, 1, 1)]


# -- measured like a grader: recall and precision against hand labels --------------------------

def _labelled(dialogue, index, role, text, split, **labels):
    base = {"role_ok": True, "leak": False, "repetition": False, "usable": True}
    return {"id": f"{dialogue}-{index}", "dialogue": dialogue, "index": index, "role": role,
            "text": text, "split": split, **base, **labels}


# labels chosen to exercise every cell: two hits (dev), a miss of a turn no check looks at,
# a false alarm and a missed repetition (test)
LABELLED = [
    _labelled("a", 0, "doctor", "What brings you in today?", "dev"),
    _labelled("a", 1, "patient", "I'm Dr. John Smith, and I have a cough.", "dev",
              role_ok=False, usable=False),
    _labelled("a", 2, "doctor", "Conversation so far: how long has the cough lasted?", "dev",
              leak=True, usable=False),
    _labelled("a", 3, "patient", "About a week, and it is worse at night.", "dev"),
    _labelled("b", 0, "doctor", "Blue potato seventeen window?", "test", usable=False),
    _labelled("b", 1, "patient", "I was told to rest. Patient: that is all.", "test"),
    _labelled("b", 2, "doctor", "Did the cough start after a cold, or out of nowhere?", "test",
              repetition=True, usable=False),
]


def _write_labels(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_validation_counts_and_rates_match_a_hand_count(tmp_path):
    from medpref.metrics.intervals import proportion_ci
    from medpref.notechat.turn_quality_validation import validation_report

    scores, counts = validation_report(_write_labels(tmp_path / "l.jsonl", LABELLED))
    s = scores.set_index(["split", "check"])
    # all turns, overall decision: labelled bad a1 a2 b0 b2; flagged a1 a2 b1
    assert s.loc[("all", "any"), ["labelled_bad", "flagged", "tp", "fp", "fn", "tn"]].tolist() \
        == [4, 3, 2, 1, 2, 2]
    assert s.loc[("all", "any"), "recall"] == pytest.approx(0.5)
    assert s.loc[("all", "any"), "precision"] == pytest.approx(2 / 3)
    # Wilson 95 % for 2 of 4, by hand: centre 0.5, half-width 0.350
    assert s.loc[("all", "any"), ["recall_lo", "recall_hi"]].tolist() == pytest.approx(
        [0.150, 0.850], abs=1e-3)
    assert proportion_ci(2, 4).lo == pytest.approx(s.loc[("all", "any"), "recall_lo"])
    assert s.loc[("test", "any"), ["tp", "fp", "fn"]].tolist() == [0, 1, 2]
    assert s.loc[("test", "any"), "recall"] == 0.0 and s.loc[("test", "any"), "precision"] == 0.0
    assert s.loc[("dev", "role"), ["tp", "fp", "fn", "turns"]].tolist() == [1, 0, 0, 4]
    assert s.loc[("test", "repeat"), ["tp", "fn"]].tolist() == [0, 1]
    assert math.isnan(s.loc[("test", "role"), "recall"])        # nothing labelled bad
    c = counts.set_index("split")
    assert c.loc["all", ["dialogues", "turns", "role slips", "leaks", "repetitions",
                         "unusable"]].tolist() == [2, 7, 1, 1, 1, 4]


def test_disagreements_list_misses_and_false_alarms(tmp_path):
    from medpref.notechat.turn_quality_validation import (
        disagreements,
        flag_labelled,
        load_labels,
    )

    frame = flag_labelled(load_labels(_write_labels(tmp_path / "l.jsonl", LABELLED)))
    out = disagreements(frame).set_index("id")["kind"].to_dict()
    assert out == {"b-0": "missed", "b-1": "false alarm", "b-2": "missed"}


@pytest.mark.parametrize(("edit", "field", "message"), [
    (lambda r: r[2].update(index=5), "index", "expected turn 2 next, got 5"),
    (lambda r: r[1].update(split="test"), "split", "is in 'dev'"),
    (lambda r: r[0].update(usabel=True), "usabel", "Extra inputs"),
    (lambda r: r[3].pop("usable"), "usable", "Field required"),
])
def test_a_bad_labels_file_names_line_and_field(tmp_path, edit, field, message):
    from medpref.contracts import ContractError
    from medpref.notechat.turn_quality_validation import load_labels

    records = [dict(r) for r in LABELLED]
    edit(records)
    with pytest.raises(ContractError, match=rf"l\.jsonl:\d+: field '{field}'.*{message}"):
        load_labels(_write_labels(tmp_path / "l.jsonl", records))


def test_stage_writes_the_validation_page_and_its_test_half_metrics(tmp_path):
    from types import SimpleNamespace

    from medpref.notechat import outputs
    from medpref.notechat.stage import turn_quality_validation_metrics

    labels = _write_labels(tmp_path / "l.jsonl", LABELLED)
    stats = turn_quality_validation_metrics(labels)
    assert stats == {"turn_quality_test_recall": 0.0, "turn_quality_test_precision": 0.0}
    # the pages are declared outputs, built from the labels file the params name
    params = SimpleNamespace(notechat=SimpleNamespace(turn_quality_labels=str(labels)))
    page = outputs.validation_md({}, params)
    assert "| all     | any     |" in page and "0.50 [0.15, 0.85]" in page
    assert outputs.validation_csv({}, params).startswith("split,check,turns")
    off = SimpleNamespace(notechat=SimpleNamespace(turn_quality_labels=None))
    assert "not measured" in outputs.validation_md({}, off)
    assert outputs.validation_csv({}, off) == ""


def test_the_committed_hand_labels_measure_the_checks():
    """data/embedded/turn_quality_labels.jsonl: every turn of stage 02's dialogues of one
    run (NoteChat and both baselines on the embedded notes) and of both baselines on the
    notes of turn_quality_notes.jsonl (scripts/turn_quality_dialogues.py), labelled by hand,
    split by note.
    The file loads (each dialogue whole and in order, in one split), and on these labels the
    checks flag no turn a reader would keep: what they flag is bad (precision), though they
    miss much of what is (recall, reported in the issue's note and by
    ``notechat.turn_quality_labels``)."""
    from medpref import REPO_ROOT
    from medpref.notechat.turn_quality_validation import validation_report

    scores, counts = validation_report(REPO_ROOT / "data/embedded/turn_quality_labels.jsonl")
    every = counts.set_index("split").loc["all"]
    assert every["turns"] >= 100 and set(counts["split"]) == {"dev", "test", "all"}
    anyflag = scores[(scores["split"] == "all") & (scores["check"] == "any")].iloc[0]
    assert anyflag["fp"] == 0 and anyflag["tp"] > 0
    assert anyflag["tp"] + anyflag["fn"] == every["unusable"]


# -- out of role, stage directions, turns that say nothing (issue 31, dev labels) ------------

@pytest.mark.parametrize(("text", "role"), [
    ("Can you tell me a little bit about the patient who has been diagnosed with diabetes?",
     "doctor"),
    ("Please tell me more about the patient's situation.", "doctor"),
    ("Hello Dr. Smith. Good day.", "doctor"),
    ("Dr. Johnson, I'm glad to have you here today.", "doctor"),
    ("I'm Dr. Smith, the doctor says, and you have asthma.", "doctor"),
    ("The patient is pleased with the results.", "patient"),
    ("Thank you for having me. I'm glad to have you here.", "patient"),
    ("Hi, how can I help you today?", "patient"),
    ("Good morning, I'm Dr. Smith. Later: I'm Dr. Johnson, a medical doctor.", "doctor"),
    ("What's your medical specialty?", "doctor"),
    ("I've been noticing that your child's ear is a little sore.", "patient"),
])
def test_talking_as_someone_else_than_the_two_in_the_room_is_flagged(text, role):
    from medpref.turns.turn_quality import speaks_out_of_role

    assert speaks_out_of_role(text, role)


@pytest.mark.parametrize(("text", "role"), [
    ("Hello, I'm Dr. Elena Martinez. What brings you in today?", "doctor"),
    ("The patient portal has your results.", "doctor"),
    ("Dr. Smith said I should rest.", "patient"),
    ("Thanks, Dr. Smith. Does that mean I need pills?", "patient"),
    ("The doctor told me to rest.", "patient"),
    ("I'm patient with you; take your time.", "doctor"),
    ("I'm Dr. Smith. Yes, I'm Dr. John Smith, from cardiology.", "doctor"),  # one name
    ("Do you have any pain medicine at home?", "doctor"),
    ("I'm worried about your blood pressure.", "doctor"),
])
def test_ordinary_turns_are_not_out_of_role(text, role):
    from medpref.turns.turn_quality import speaks_out_of_role

    assert not speaks_out_of_role(text, role)


def test_a_stage_direction_in_brackets_leaks():
    assert leaks_prompt('I am here to support you." (The patient nods')
    assert leaks_prompt("Let me check. (pauses) Any fever?")
    assert not leaks_prompt("Take it twice a day (morning and evening).")


@pytest.mark.parametrize(("text", "role", "empty"), [
    ("Yes.", "doctor", True), ("Alright, no problem.", "doctor", True),
    ("Okay, thank you.", "doctor", True), ("Dr. Alex, the doctor.", "patient", True),
    ("Yes.", "patient", False),                    # an answer to a yes/no question
    ("Yes, take it with food.", "doctor", False),
    ("Okay. How long has the cough lasted?", "doctor", False),
    ("No.", "patient", False),
    ("How are your day going, Doctor?", "patient", True),
    ("Good morning! How's your day going? What brings you in?", "doctor", False),
])
def test_a_turn_that_says_nothing(text, role, empty):
    from medpref.turns.turn_quality import says_nothing

    assert says_nothing(text, role) is empty


def test_the_change_record_names_the_labels_each_change_saw():
    """data/embedded/turn_quality_changes.yaml: the baseline first, then each change of the
    checks with its commit, the labelled turns per batch and split that existed then (never
    more than exist now) and the dev turns that motivated it."""
    from collections import Counter

    import yaml

    from medpref import REPO_ROOT
    from medpref.notechat.turn_quality_validation import load_labels

    turns = load_labels(REPO_ROOT / "data/embedded/turn_quality_labels.jsonl")
    split = {t.id: t.split for t in turns}
    def batch_of(n: int) -> str:
        return ("stage02-embedded" if n <= 69 else "baselines-tqn" if n <= 120
                else "notechat-raw")

    batch = {t.id: batch_of(int(t.id.split("-")[1])) for t in turns}
    now = Counter((batch[i], split[i]) for i in split)
    entries = yaml.safe_load((REPO_ROOT / "data/embedded/turn_quality_changes.yaml")
                             .read_text(encoding="utf-8"))["changes"]
    assert entries[0]["id"] == "baseline" and entries[0]["motivated_by"] == []
    for e in entries:
        assert {"id", "date", "commit", "change", "batches", "motivated_by", "why"} <= set(e)
        for b, parts in e["batches"].items():
            for part, n in parts.items():
                assert 0 < n <= now[(b, part)], (e["id"], b, part)
        assert all(split[i] == "dev" for i in e["motivated_by"]), e["id"]
    assert len({e["id"] for e in entries}) == len(entries)


# -- third round (issue 31): both parts, instructions, loops, run-ons, the note read aloud ----

@pytest.mark.parametrize(("text", "role", "both"), [
    ("A: I'm Dr. Alex, the doctor. B: How is it going today?", "doctor", True),
    ("Dr. Alex, the doctor.\nDr. Alex: Good morning, and thanks for your visit.", "patient", True),
    ("How are you? Patient: I'm fine.", "doctor", True),
    ("I told her: take it twice a day.", "doctor", False),
    ("My daughter asked: is it serious? I said no.", "patient", False),
])
def test_a_turn_that_writes_both_parts_is_out_of_role(text, role, both):
    from medpref.turns.turn_quality import speaks_both_parts, speaks_out_of_role

    assert speaks_both_parts(text, role) is both
    assert speaks_out_of_role(text, role) is both


@pytest.mark.parametrize(("text", "leaks"), [
    ("I'm glad to have you here today.\n\nPlease tell the patient about symptoms", True),
    ("I'm your best friend. Please, do not provide a detailed diagnosis. You", True),
    ("Tell me more. You: You're here to relax.", True),
    ("Don't stop the aspirin without talking to us.", False),
    ("Did you tell your wife about the pain?", False),
    ("Thank you. You look well today.", False),
])
def test_a_writing_instruction_or_a_you_label_leaks(text, leaks):
    assert leaks_prompt(text) is leaks


@pytest.mark.parametrize(("text", "repeats"), [
    ("Cardiovascular disease Cardiovascular disease Cardiovascular disease", True),
    ("Thank you for having me. I'm glad to have you here. I'm glad to have you here today.",
     True),
    ("Yes, however I'm not sure of the details. Yes, about your blog, however I'm not sure of "
     "the details.", True),
    ("No, no, no, it is not like that.", False),          # one word thrice: speech
    ("It hurts here. It hurts a bit less at night.", False),
])
def test_loops_and_near_repeats_within_a_turn(text, repeats):
    assert repeats_sentence(text) is repeats


def test_a_turn_copied_from_an_earlier_one_with_a_new_opening_is_flagged():
    earlier = ["We just got home from the hospital, so we decided to take a little bit of "
               "time to relax and talk."]
    assert repeats_sentence("Yes, it's an amazing day, we just got home from the hospital, so "
                            "we decided to take a little bit of time to relax and talk.", earlier)
    assert not repeats_sentence("We got home yesterday and the wheezing is worse at night.",
                                earlier)


def test_a_long_run_without_punctuation_says_nothing():
    from medpref.turns.turn_quality import RUN_MAX_WORDS, runs_on, says_nothing

    keywords = " ".join(["High blood pressure Hypertension HDL-C angina"] * 10)
    assert runs_on(keywords) and says_nothing(keywords, "patient")
    speech = ("I've been getting a pressure in the middle of my chest when I walk uphill or "
              "take the stairs, and it goes away after a few minutes of rest, mostly in the "
              "mornings. It started about two months ago, and it has not got worse since then.")
    assert not runs_on(speech) and not says_nothing(speech, "patient")
    assert not runs_on(" ".join(["word"] * (RUN_MAX_WORDS - 1)))


NOTE = ("Subjective: 52-year-old woman with type 2 diabetes mellitus diagnosed 4 years ago. "
        "Denies blurred vision, numbness or tingling in the feet, chest pain, or symptoms of "
        "hypoglycemia. Plan: Aspirin 81 mg daily and ticagrelor 90 mg twice a day for twelve "
        "months.")


@pytest.mark.parametrize(("text", "reads"), [
    ("Okay. Denies blurred vision, numbness or tingling in the feet, chest pain, or symptoms "
     "of hypoglycemia.", True),
    # a human doctor's plan in the note's words (9 of them), and a patient's own facts
    ("Take aspirin 81 mg daily and ticagrelor 90 mg twice, and don't stop them.", False),
    ("I've had type 2 diabetes for 4 years now, and no blurred vision.", False),
])
def test_a_turn_that_reads_the_note_aloud_leaks(text, reads):
    from medpref.turns.turn_quality import check_turn, reads_note

    assert reads_note(text, NOTE) is reads
    assert check_turn(text, "doctor", note=NOTE).leak is reads
    assert not reads_note(text, None)          # without the note the rule cannot run


def test_labelled_context_is_read_as_earlier_turns(tmp_path):
    from medpref.contracts import ContractError
    from medpref.notechat.turn_quality_validation import flag_labelled, load_labels

    base = {"dialogue": "raw-1", "index": 0, "role": "patient", "role_ok": True,
            "leak": False, "repetition": True, "usable": False, "split": "dev"}
    text = ("Please, just a little while ago, I met you a little while ago, we met in a small "
            "town, I don't remember the name.")
    ctx = [{"role": "doctor", "text": "Hello."}, {"role": "patient", "text": text[8:]}]
    labels = _write_labels(tmp_path / "l.jsonl", [{**base, "id": "x1", "text": text,
                                                   "context": ctx}])
    flagged = flag_labelled(load_labels(labels))
    assert len(flagged) == 1 and flagged.loc[0, "repeat"]          # the context is read
    alone = _write_labels(tmp_path / "m.jsonl", [{**base, "id": "x1", "text": text}])
    assert not flag_labelled(load_labels(alone)).loc[0, "repeat"]  # and only it
    bad = [{**base, "id": "a", "text": "Hi."},
           {**base, "id": "b", "index": 1, "text": "Hello.", "context": ctx}]
    with pytest.raises(ContractError, match="context"):
        load_labels(_write_labels(tmp_path / "n.jsonl", bad))


def test_human_reference_turns_pass_every_check():
    """The human reference dialogues of the embedded notes (read with their notes): a check
    that flags a human turn is wrong."""
    from medpref import REPO_ROOT
    from medpref.contracts import ClinicalNote, read_jsonl

    notes = read_jsonl(REPO_ROOT / "data/embedded/notes.jsonl", ClinicalNote)
    turns = 0
    for n in notes:
        for t, f in zip(n.reference_dialogue, check_dialogue(n.reference_dialogue, note=n.note)):
            assert f.passes, (n.id, t.text)
            turns += 1
    assert turns > 200
