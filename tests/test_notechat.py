"""Stage 02 (NoteChat): concepts, checklist, turn repair, polish, metrics, SFT shape, stage.

Model-free except the one ``slow`` test: the agents are scripted backends. The QuickUMLS
index is built once per session from the embedded lexicon into a temporary folder.
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from medpref import REPO_ROOT
from medpref.contracts import ClinicalNote, ContractError, Dialogue, Turn, read_jsonl
from medpref.llm.client import LLMClient
from medpref.llm.scripted import ScriptedBackend
from medpref.llm.types import GenerationParams
from medpref.notechat import metrics
from medpref.notechat.calls import CallLog
from medpref.notechat.concepts import ConceptExtractor, Mention
from medpref.notechat.config import NoteChatParams
from medpref.notechat.lexicon_index import build_index, check_lexicon
from medpref.notechat.planning import Checklist, checklist_from_draft, note_keywords
from medpref.notechat.polish import judge_window, load_rubric, polish_dialogues, windows
from medpref.notechat.roleplay import RolePlay, run_roleplay
from medpref.notechat.sections import Segment, combine_parts, load_soap_headings, note_segments
from medpref.params import ParamsError, load_params, parse_params
from medpref.prompts import load_prompt
from medpref.training.sft_data import dialogues_to_sft_examples, split_target
from medpref.turns.text import parse_dialogue, parse_turn

LEXICON = REPO_ROOT / "data" / "embedded" / "lexicon"
NOTES = REPO_ROOT / "data" / "embedded" / "notes.jsonl"
# CUIs of the embedded lexicon (data/embedded/lexicon/MRCONSO.RRF)
CHEST_PAIN, DYSPNEA, FEVER, ASPIRIN = "C9000001", "C9000005", "C9000015", "C9000565"


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="session")
def index_dir(tmp_path_factory):
    dest = tmp_path_factory.mktemp("notechat") / "quickumls_index"
    info = build_index(LEXICON, dest)
    assert info["concepts"] == 763 and info["strings"] == 1695  # the lexicon README's counts
    return dest


@pytest.fixture(scope="session")
def extractor(index_dir):
    p = NoteChatParams()
    return ConceptExtractor.from_index(index_dir, REPO_ROOT / p.stopwords, p.quickumls)


def _section(text: str, start: str, end: str) -> str:
    return text.split(start, 1)[1].split(end, 1)[0].strip()


def agent_responder(req) -> str:
    """A scripted NoteChat: each agent recognised by its prompt."""
    user = req.messages[-1]["content"]
    if "Bring up next:" in user:
        keywords = _section(user, "Bring up next:", "\n")
        return f" Tell me about {keywords}."
    if "Answer the doctor's last turn" in user:
        asked = _section(user, "Conversation so far:", "Answer the doctor").splitlines()[-1]
        return f" Well, {asked.split('about', 1)[-1].strip(' .')} has bothered me, doctor."
    if "Rules:" in user:
        part = _section(user, "Conversation part to improve:", "Rewrite this part")
        return " " + part.split(":", 1)[1]  # the answer starts after the 'Doctor:' prefix
    if "Keywords:" in user:
        keywords = _section(user, "Keywords:", "\n").split(", ")
        return " " + " ".join(f"Do you have {k}? Patient: Yes. Doctor:" for k in
                              reversed(keywords)) + " Thank you."
    return " What brings you in today? Patient: Chest pain, doctor. Doctor: Okay, hmm."


def make_clients(responder=agent_responder, names=("planner", "doctor", "patient", "polisher",
                                                   "single_prompt", "single_prompt_strong")):
    backend = ScriptedBackend(responder)
    return {n: LLMClient(n, backend, GenerationParams()) for n in names}, backend


def _templates():
    from medpref.notechat.dialogues import load_templates

    return load_templates(NoteChatParams())


# ------------------------------------------------------------------ concepts


def test_concept_extraction_finds_lexicon_concepts_and_marks_negation(extractor):
    mentions = extractor.mentions(
        "He has chest pain and shortness of breath but denies fever. Started aspirin.")
    by_cui = {m.cui: m for m in mentions}
    assert set(by_cui) == {CHEST_PAIN, DYSPNEA, FEVER, ASPIRIN}
    assert by_cui[FEVER].negated and by_cui[FEVER].text == "fever"
    assert not by_cui[CHEST_PAIN].negated and not by_cui[ASPIRIN].negated
    # a lay synonym of the lexicon maps to the same concept
    assert extractor.cuis("I had pain in the chest") == {CHEST_PAIN}
    assert extractor.cuis("I went for a walk in the park") == set()


def test_index_build_refuses_a_broken_lexicon(tmp_path):
    (tmp_path / "MRCONSO.RRF").write_text("C1|ENG|P|L1|PF|S1|Y|A1||M1||X|PT|M1|pain|0|N||\n")
    with pytest.raises(FileNotFoundError, match="MRSTY.RRF"):
        check_lexicon(tmp_path)
    (tmp_path / "MRSTY.RRF").write_text("C2|T184|A|Sign or Symptom|AT1||\n")
    with pytest.raises(ValueError, match=r"MRCONSO.RRF:1: CUI C1 has no row in MRSTY"):
        check_lexicon(tmp_path)
    with pytest.raises(FileNotFoundError, match="not a QuickUMLS index"):
        ConceptExtractor.from_index(tmp_path, REPO_ROOT / NoteChatParams().stopwords)


# ------------------------------------------------------------------ checklist


def _m(cui, text="x", negated=False):
    return Mention(cui, text, 0, 1, negated)


def test_checklist_follows_draft_order_and_shrinks_as_concepts_are_covered():
    note = note_keywords([_m("A", "cough"), _m("B", "fever", True), _m("C", "asthma"),
                          _m("A", "cough again")])
    assert [k.cui for k in note] == ["A", "B", "C"] and note[1].display() == "fever (absent)"
    # draft mentions C first, then A, a concept not in the note (Z), never B
    checklist = checklist_from_draft([_m("C"), _m("Z"), _m("A"), _m("C")], note)
    assert [k.cui for k in checklist.initial] == ["C", "A", "B"]
    assert [k.cui for k in checklist_from_draft([_m("C")], note, keep_missing=False).initial] \
        == ["C"]
    assert checklist.coverage == 0.0 and checklist.next_keywords(2) == checklist.initial[:2]
    assert [k.cui for k in checklist.remove_covered({"A", "Z"})] == ["A"]
    assert [k.cui for k in checklist.remaining] == ["C", "B"]
    assert checklist.coverage == pytest.approx(1 / 3)
    checklist.remove_covered({"C", "B"})
    assert checklist.done and checklist.coverage == 1.0
    assert Checklist([]).coverage == 1.0


def test_roleplay_removes_covered_concepts_each_round(extractor):
    text = "Chest pain for a week. Shortness of breath. Denies fever. Plan: aspirin."
    kws = note_keywords(extractor.mentions(text))
    assert [k.cui for k in kws] == [CHEST_PAIN, DYSPNEA, FEVER, ASPIRIN]
    play = RolePlay(Segment("n-1", None, text), Checklist(kws))
    clients, backend = make_clients()
    # the scripted patient is formulaic: only exact repeats count as echoes here
    p = NoteChatParams(max_rounds=5, keywords_per_turn=1, temperature=0.0, max_copied_share=1.0)
    log = CallLog()
    run_roleplay([play], clients["doctor"], clients["patient"], _templates(), p, 13,
                 extractor, log)
    # one concept per round: coverage climbs by a quarter and stops when the list is empty
    assert play.coverage == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert play.rounds == 4 and play.checklist.done
    assert [t.role for t in play.turns] == ["doctor", "patient"] * 4
    assert play.turns[0].text == "Tell me about chest pain."
    assert play.turns[4].text == "Tell me about fever (absent)."
    # one batched call per role per round
    assert [r.messages[-1]["content"].count("Bring up next") for r in backend.requests[:1]] == [1]
    assert len(backend.requests) == 8


# ------------------------------------------------------------------ malformed turns


def test_roleplay_turns_stop_at_the_other_speakers_tag(extractor):
    """Each agent's generation ends where it starts the other speaker's line (the
    backend stops there instead of writing that line to the token limit)."""
    text = "Chest pain for a week. Plan: aspirin."
    play = RolePlay(Segment("n-1", None, text), Checklist(note_keywords(extractor.mentions(text))))
    clients, backend = make_clients()
    p = NoteChatParams(max_rounds=1, temperature=0.0, max_copied_share=1.0)
    run_roleplay([play], clients["doctor"], clients["patient"], _templates(), p, 13,
                 extractor, CallLog())
    doctor, patient = backend.requests[:2]
    assert (doctor.prefix, patient.prefix) == ("Doctor:", "Patient:")
    assert "Patient:" in doctor.params.stop and "Doctor:" not in doctor.params.stop
    assert "Doctor:" in patient.params.stop and "Patient:" not in patient.params.stop


@pytest.mark.parametrize("raw,role,text,issue", [
    ("", "doctor", None, "empty answer"),
    ("   \n ", "patient", None, "empty answer"),
    ("Patient: It hurts when I walk.", "doctor", None, "wrong speaker"),
    ("Doctor: Any fever?", "patient", None, "wrong speaker"),
    ("How long has it hurt? Patient: Two weeks. Doctor: I see.", "doctor",
     "How long has it hurt?", "cut the other role's turn"),
    ("Patient: hi\nDoctor: What brings you in?", "doctor", "What brings you in?",
     "skipped the other role's line"),
    ("My pressure was 150/90 mmHg. I feel dizzy.", "patient", "I feel dizzy.",
     "test result"),
    ("I feel dizzy. I feel dizzy. I feel dizzy.", "patient", "I feel dizzy.", "repeated"),
    ("Any chest pain?\nNote: the doctor should ask about smoking.", "doctor",
     "Any chest pain?", "scaffolding"),
    ("**Okay.**", "patient", "Okay.", None),
    ("Any cough?\n\nDr. Smith: And fever?\nThe patient responds: No.", "doctor",
     "Any cough? And fever?", "cut the other role's turn"),
    ("...", "doctor", None, "no words"),
])
def test_parse_turn_repairs_or_drops_malformed_answers(raw, role, text, issue):
    parsed = parse_turn(raw, role, max_words=60)
    assert parsed.text == text
    if issue is None:
        assert parsed.issues == []
    else:
        assert any(issue in i for i in parsed.issues), parsed.issues


def test_parse_turn_cuts_long_turns_and_drops_long_repeats():
    long = " ".join(["word"] * 30) + ". " + " ".join(["more"] * 40)
    parsed = parse_turn(long, "doctor", max_words=50)
    assert parsed.text == " ".join(["word"] * 30) + "." and "cut to 50 words" in parsed.issues
    earlier = ["It started about two weeks ago."]
    assert parse_turn("It started about two weeks ago.", "patient", previous=earlier).dropped
    assert parse_turn("Yes.", "patient", previous=["Yes."]).text == "Yes."  # short: natural
    # an echo: 4 of the 5 word pairs of the new turn come from the earlier one (80%)
    echo = parse_turn("It started about two weeks, doctor.", "patient", previous=earlier,
                      max_copied=0.6)
    assert echo.dropped and echo.issues == ["repeats an earlier turn (80% of its word pairs)"]
    assert not parse_turn("It started about two weeks, doctor.", "patient",
                          previous=earlier).dropped  # default 1.0: exact repeats only


def test_parse_dialogue_golden():
    raw = (" Hello, what brings you in?\nPatient: My chest hurts.\nPatient: Since Monday."
           "\nDoctor: Your ECG was normal.\nPatient: My LDL was 162 mg/dL.\nDoctor: We will")
    parsed = parse_dialogue(raw, "doctor", truncated=True)
    assert [(t.role, t.text) for t in parsed.turns] == [
        ("doctor", "Hello, what brings you in?"),
        ("patient", "My chest hurts. Since Monday."),
        ("doctor", "Your ECG was normal.")]
    assert "dropped the last turn, cut by the token limit" in parsed.issues
    assert any("patient segment" in i for i in parsed.issues)  # the LDL line had nothing left
    assert parse_dialogue("", "doctor").turns == []
    assert parse_dialogue("Note: nothing here", "doctor").turns == []


def test_malformed_roleplay_answers_are_recorded_and_never_crash(extractor):
    answers = {"doctor": iter(["", "Patient: I am the patient.", "Any cough? Patient: no",
                               "Tell me about chest pain."] + ["Any fever?"] * 20),
               "patient": iter(["Doctor: I am the doctor.", "", "No cough. Doctor: ok"]
                               + ["Chest pain, yes, for a week."] * 20)}

    def responder(req):
        role = "doctor" if "Bring up next" in req.messages[-1]["content"] else "patient"
        return next(answers[role])

    text = "Chest pain. Denies fever."
    play = RolePlay(Segment("n-1", None, text), Checklist(note_keywords(extractor.mentions(text))))
    clients, _ = make_clients(responder)
    p = NoteChatParams(max_rounds=3, turn_attempts=2, temperature=0.0)
    run_roleplay([play], clients["doctor"], clients["patient"], _templates(), p, 1,
                 extractor, CallLog())
    actions = [(e["round"], e["role"], e["action"]) for e in play.events]
    assert actions[:2] == [(1, "doctor", "dropped"), (1, "doctor", "dropped")]
    assert (2, "doctor", "repaired") in actions and (2, "patient", "dropped") in actions
    assert all(e["raw"] is not None and e["issues"] for e in play.events)
    roles = [t.role for t in play.turns]
    assert all(a != b for a, b in zip(roles, roles[1:])), "turns must alternate"
    # the patient's round-2 answer was dropped twice, so the round-3 question joins the
    # doctor's turn instead of following it
    assert [t.text for t in play.turns[:2]] == ["Any cough? Tell me about chest pain.",
                                                "No cough."]


# ------------------------------------------------------------------ polish


def test_polish_rubric_has_the_ten_rules():
    rubric = load_rubric(REPO_ROOT / NoteChatParams().rubric)
    assert [r["id"] for r in rubric.rules] == list(range(1, 11))
    assert rubric.render().startswith("1. ")


def test_polish_windows_and_acceptance():
    assert windows(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert windows(10, 4, offset=2) == [(0, 2), (2, 6), (6, 10)]
    assert windows(3, 4) == [(0, 3)] and windows(7, 0) == [(0, 7)] and windows(0, 4) == []
    d, pt = Turn(role="doctor", text="a"), Turn(role="patient", text="b")
    assert judge_window([d, pt], [d, pt], {"A"}, {"A", "B"}, 0.75) is None
    assert judge_window([d, pt], [pt, d], set(), set(), 0.75) == \
        "speakers at the window's ends changed"
    assert judge_window([d, pt, d, pt], [d, pt], set(), set(), 0.75) == "2 turns for 4"
    assert judge_window([d, pt], [d, pt], {"A"}, set(), 0.75) == "lost 1 concept(s) of the window"


def test_polish_keeps_good_rewrites_and_rejects_bad_ones(extractor):
    def responder(req):
        part = _section(req.messages[-1]["content"], "Conversation part to improve:",
                        "Rewrite this part")
        if "aspirin" in part:
            return " Take it daily. Patient: Hmm, okay."  # loses the window's concept
        return " " + part.split(":", 1)[1].replace("Do you", "So, do you")
    dialogue = [Turn(role="doctor", text="Do you have a cough?"),
                Turn(role="patient", text="Yes."),
                Turn(role="doctor", text="Take aspirin daily."),
                Turn(role="patient", text="Okay.")]
    clients, _ = make_clients(responder)
    p = NoteChatParams(polish_iterations=1, polish_window_turns=2, temperature=0.0)
    out, events = polish_dialogues([dialogue], ["note"], ["n-1"], clients["polisher"],
                                   load_prompt("notechat_polish"),
                                   load_rubric(REPO_ROOT / p.rubric), p, 1, extractor, CallLog())
    assert [t.text for t in out[0]] == ["So, do you have a cough?", "Yes.",
                                        "Take aspirin daily.", "Okay."]
    assert [e["action"] for e in events] == ["accepted", "kept original"]
    assert "lost 1 concept(s) of the window" in events[1]["issues"]


# ------------------------------------------------------------------ long notes


def test_long_notes_are_split_by_soap_part_and_recombined():
    headings = load_soap_headings(REPO_ROOT / NoteChatParams().soap_headings)
    note = ClinicalNote(id="n-9", note=" ".join(["word"] * 50), sections={
        "CHIEF COMPLAINT": "cough", "HISTORY OF PRESENT ILLNESS": "two weeks",
        "PHYSICAL EXAM": "clear lungs", "RESULTS": "normal x-ray",
        "ASSESSMENT AND PLAN": "bronchitis; rest", "INSTRUCTIONS": "return if worse"})
    segs = note_segments(note, headings, long_note_words=10)
    assert [s.part for s in segs] == ["Subjective", "Objective", "Assessment", "Plan"]
    assert segs[0].text == "CHIEF COMPLAINT: cough\nHISTORY OF PRESENT ILLNESS: two weeks"
    assert segs[1].key == "n-9#Objective"
    assert [s.part for s in note_segments(note, headings, long_note_words=100)] == [None]
    d = lambda t: Turn(role="doctor", text=t)  # noqa: E731
    pt = lambda t: Turn(role="patient", text=t)  # noqa: E731
    turns, notes = combine_parts([[d("Hello. What brings you in?"), pt("A cough.")],
                                  [d("Good morning! Your lungs are clear."), pt("A cough.")],
                                  [d("Hi"), pt("Okay.")]])
    assert [(t.role, t.text) for t in turns] == [
        ("doctor", "Hello. What brings you in?"), ("patient", "A cough."),
        ("doctor", "Your lungs are clear."), ("patient", "Okay.")]
    assert "part 2: removed a greeting" in notes and "part 2: dropped a repeated turn" in notes


# ------------------------------------------------------------------ metrics (hand values)


def test_rouge_against_hand_values():
    r = metrics.rouge_f1("the cat sat", "the cat ran")
    assert r["rouge1"] == pytest.approx(200 / 3)  # P = R = 2/3
    assert r["rouge2"] == pytest.approx(50.0)     # 'the cat' of 2 bigrams each side
    assert metrics.rouge_f1("", "x")["rouge1"] == 0.0


def test_concept_prf_against_hand_values():
    s = metrics.concept_prf({"A", "B", "C"}, {"B", "C", "D", "E"})
    assert s["concept_p"] == pytest.approx(200 / 3) and s["concept_r"] == pytest.approx(50.0)
    assert s["concept_f1"] == pytest.approx(100 * 2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))  # 57.14
    assert metrics.concept_prf(set(), {"A"}) == {"concept_p": 0.0, "concept_r": 0.0,
                                                 "concept_f1": 0.0}


def test_self_bleu_is_across_the_corpus_of_a_systems_dialogues():
    d = lambda *texts: [Turn(role="doctor" if i % 2 == 0 else "patient", text=t)  # noqa: E731
                        for i, t in enumerate(texts)]
    # each dialogue on its own has no repeated utterance, but across the corpus the
    # doctor says "a b c d" in both: every utterance is found whole in another one
    corpus = [d("a b c d", "w x y z"), d("a b c d", "w x y z")]
    div = metrics.corpus_diversity(corpus)
    assert div == {"sbleu_all": pytest.approx(1.0), "sbleu_doctor": pytest.approx(1.0),
                   "sbleu_patient": pytest.approx(1.0)}
    # 'a b c d' vs 'a b x y' (13a tokens): p1 = 2/4, p2 = 1/3, p3 = 0/2 -> exp smoothing
    # 1/(2·2), p4 = 0/1 -> 1/(4·1); equal lengths: no brevity penalty; same both ways
    hand = (0.5 * (1 / 3) * 0.25 * 0.25) ** 0.25
    div = metrics.corpus_diversity([d("a b c d"), d("a b x y")])
    assert div["sbleu_doctor"] == pytest.approx(hand)                 # 0.3195
    assert div["sbleu_patient"] is None


def test_coverage_frame_carries_finished_notes_forward():
    from medpref.notechat.evaluate import coverage_frame

    frame = coverage_frame({"a": [0.0, 0.5, 1.0], "b": [0.0, 0.25]})
    assert frame[frame.note_id == "b"]["coverage"].tolist() == [0.0, 25.0, 25.0]
    assert frame.groupby("round")["coverage"].mean().tolist() == [0.0, 37.5, 62.5]


def test_dialogue_stats_against_hand_values():
    turns = [Turn(role="doctor", text="Any chest pain today?"),
             Turn(role="patient", text="Yes, a little."),
             Turn(role="doctor", text="Start aspirin.")]
    s = metrics.dialogue_stats(turns, [1, 0, 1])
    assert (s["utterances"], s["words"], s["medical"]) == (3, 9, 2)
    assert s["doctor_words_per_utt"] == 3.0 and s["patient_words_per_utt"] == 3.0
    assert s["doctor_term_density"] == pytest.approx(100 * 2 / 6)
    assert s["patient_term_density"] == 0.0
    # Chinese: one word per character ("胸口痛吗" = 4 words)
    zh = metrics.dialogue_stats([Turn(role="doctor", text="胸口痛吗？")], [1])
    assert zh["words"] == 4 and zh["doctor_term_density"] == 25.0


# ------------------------------------------------------------------ params


def test_params_section_validates_and_rejects_unknown_keys():
    params = load_params()
    assert isinstance(params.notechat, NoteChatParams)
    with pytest.raises(ParamsError, match="unknown key 'notechat.max_round'"):
        parse_params({"notechat": {"max_round": 3}})
    with pytest.raises(ParamsError, match="unknown role config keys"):
        parse_params({"notechat": {"baselines": [{"name": "x", "overrides": {"modle": "m"}}]}})
    with pytest.raises(ParamsError, match="distinct"):
        parse_params({"notechat": {"baselines": [{"name": "NoteChat"}]}})


# ------------------------------------------------------------------ SFT data


def test_sft_examples_from_dialogues_hand_example():
    d = Dialogue(id="d-1", turns=[Turn(role="doctor", text="Hi, what brings you in?"),
                                  Turn(role="patient", text="A cough."),
                                  Turn(role="patient", text="For a week."),
                                  Turn(role="doctor", text="Any fever?"),
                                  Turn(role="patient", text="No."),
                                  Turn(role="doctor", text="Rest and fluids.")])
    examples = dialogues_to_sft_examples([d], "You are a doctor.")
    assert len(examples) == 2  # the opening doctor line answers nobody: context only
    assert examples[0] == {"messages": [
        {"role": "system", "content": "You are a doctor."},
        {"role": "assistant", "content": "Hi, what brings you in?"},
        {"role": "user", "content": "A cough. For a week."},
        {"role": "assistant", "content": "Any fever?"}]}
    assert examples[1]["messages"][-1] == {"role": "assistant", "content": "Rest and fluids."}
    context, answer = split_target(examples[1])
    assert answer == "Rest and fluids." and context == examples[1]["messages"][:-1]
    with pytest.raises(ValueError, match="target"):
        split_target({"messages": context})
    assert dialogues_to_sft_examples([d.model_dump()], "")[0]["messages"][0]["role"] == "assistant"
    with pytest.raises(ContractError, match="turns"):
        dialogues_to_sft_examples([{"id": "x", "turns": []}], "s")


# ------------------------------------------------------------------ the stage


def _budgets(**budgets: int) -> dict:
    """NoteChat's committed calls with some budgets changed."""
    calls = NoteChatParams().calls
    return {**calls, **{n: calls[n].model_copy(update={"max_new_tokens": t})
                        for n, t in budgets.items()}}


def _stage_params(tmp_path, index_dir, **update):
    return NoteChatParams(index=str(index_dir), **update)


def _paths(tmp_path):
    from medpref.notechat import stage

    return stage.output_paths(tmp_path / "out", tmp_path / "reports")


def _check_stage_outputs(tmp_path, p, run, stats):
    from medpref.notechat import stage

    dialogues = read_jsonl(_paths(tmp_path)["dialogues"], Dialogue)  # the contract shape
    assert len(dialogues) == stats["notechat_dialogues"] == len(run.notes)
    assert all(d.source == "notechat" and d.meta["note_id"] for d in dialogues)
    examples = dialogues_to_sft_examples(dialogues, "You are a careful doctor.")
    answering = sum(1 for d in dialogues for i, t in enumerate(d.turns)
                    if t.role == "doctor" and any(u.role == "patient" for u in d.turns[:i]))
    assert len(examples) == answering  # one example per doctor turn that answers someone
    for ex in examples:
        roles = [m["role"] for m in ex["messages"]]
        assert roles[0] == "system" and roles[-1] == "assistant" and "user" in roles
        assert all(a != b for a, b in zip(roles[1:], roles[2:]))
    table3 = (tmp_path / "reports" / "table3.md").read_text()
    for head in ("ROUGE1", "Concept-F1", "src->hypo R-L", "patient-sbleu", "NoteChat", "Human"):
        assert head in table3
    # the table says what its rows are: the "strong" row is the same model, another seed
    assert "`single_prompt_strong` is `scripted:scripted`, the same model as " \
        "`single_prompt` under another sampling seed" in table3
    for name in ("table2.csv", "per_dialogue.csv", "calls.csv", "coverage_by_round.png",
                 "malformed.jsonl", "turn_quality.md", "turn_quality_per_dialogue.md"):
        assert (tmp_path / "reports" / name).exists(), name
    # turn quality beside Table 3: per system and per dialogue, every turn counted
    assert "Turn quality" in table3 and "passing %" in table3
    quality = pd.read_csv(tmp_path / "reports" / "turn_quality.csv")
    assert list(quality.columns) == ["system", "dialogues", "turns", "role %", "leak %",
                                     "repeat %", "empty %", "passing %"]
    assert set(quality["system"]) == {"single_prompt", "single_prompt_strong", "NoteChat",
                                      "Human"}
    per_dialogue = pd.read_csv(tmp_path / "reports" / "turn_quality_per_dialogue.csv")
    assert list(per_dialogue.columns) == ["system", "note_id", "turns", "role", "leak",
                                          "repeat", "empty", "passing"]
    nc_turns = per_dialogue.loc[per_dialogue["system"] == "NoteChat", "turns"].sum()
    assert nc_turns == sum(len(r.turns) for r in run.notechat)
    assert (per_dialogue["passing"] <= per_dialogue["turns"]).all()
    calls = stage.calls_table(run)
    assert set(calls["method"]) == {"notechat", "single_prompt", "single_prompt_strong"}
    assert {"model_calls", "cache_hits", "model_s", "wall_s"} <= set(calls.columns)
    assert stats["requests"]["notechat"] == len([t for t in run.log.trace
                                                 if t["method"] == "notechat"])
    assert "wall_s" not in stats and 0 <= stats["notechat_sbleu_all"] <= 1
    # the run wrote its records, and every table is the one its records rebuild
    from types import SimpleNamespace

    from medpref.notechat.outputs import OUTPUTS

    reports, params = tmp_path / "reports", SimpleNamespace(notechat=p)
    records = OUTPUTS.load_records(reports)
    assert {(r["system"], r["note_id"]) for r in records["dialogues"]} == {
        (s, n.id) for s in ("single_prompt", "single_prompt_strong", "NoteChat")
        for n in run.notes}                              # the human references stay out
    assert len(records["scores"]) == 4 * len(run.notes)
    assert OUTPUTS.differences(reports, params, tmp_path / "rebuilt") == []


def test_stage_on_embedded_notes_with_a_scripted_backend(tmp_path, index_dir, extractor):
    from medpref.notechat import stage

    p = _stage_params(tmp_path, index_dir, n_notes=2, max_rounds=4)
    clients, backend = make_clients()
    run, per_dialogue, stats = stage.run_stage(p, clients, 13, extractor, _paths(tmp_path))
    _check_stage_outputs(tmp_path, p, run, stats)
    assert len(dialogues_to_sft_examples(read_jsonl(_paths(tmp_path)["dialogues"], Dialogue),
                                         "s")) >= 4
    # lock-step: planning is one batch of 2, each round one batch per role
    tally = run.log.tallies
    assert (tally[("notechat", "planning")].batches, tally[("notechat", "planning")].requests) \
        == (1, 2)
    rounds = max(pl.rounds for r in run.notechat for pl in r.plays)
    assert rounds <= tally[("notechat", "doctor")].batches <= rounds * p.turn_attempts
    assert stats["notes"] == 2 and len(backend.requests) == sum(t.requests for t in tally.values())
    nc = per_dialogue[per_dialogue["system"] == "NoteChat"]
    assert (nc["note_concept_recall"] > 0).all()
    assert all(0 < r.checklist_coverage <= 1 for r in run.notechat)
    curve = run.notechat[0].coverage_curve()
    assert curve == sorted(curve) and len(curve) <= p.max_rounds + 1
    human = per_dialogue[per_dialogue["system"] == "Human"]
    assert (human["rouge1"].round(6) == 100.0).all() and (human["concept_f1"] == 100.0).all()


@pytest.mark.shared_data
@pytest.mark.parametrize("source,split", [("mts_dialog", "validation"), ("aci_bench", "train")])
def test_stage_on_two_real_notes_with_a_scripted_backend(tmp_path, index_dir, extractor,
                                                         source, split):
    from medpref.data.adapters import shared_data_dir
    from medpref.notechat import stage

    if shared_data_dir() is None:
        pytest.skip("shared data directory absent")
    p = _stage_params(tmp_path, index_dir, source=source, source_split=split, n_notes=2,
                      source_limit=20, sample="random", max_rounds=3, polish_iterations=1,
                      long_note_words=100)
    clients, _ = make_clients()
    run, per_dialogue, stats = stage.run_stage(p, clients, 13, extractor, _paths(tmp_path))
    assert [n.source for n in run.notes] == [source.replace("_", "-")] * 2
    _check_stage_outputs(tmp_path, p, run, stats)
    assert not per_dialogue["rouge1"].isna().any()
    if source == "aci_bench":  # long notes: generated per SOAP part, then combined
        assert any(len(r.plays) > 1 for r in run.notechat)


@pytest.mark.slow
def test_stage_with_the_embedded_llm_on_one_note(tmp_path, index_dir, extractor,
                                                 embedded_llm_path):
    from medpref.llm import LLMSession
    from medpref.llm.cache import ResponseCache
    from medpref.notechat import stage

    params = load_params()
    p = _stage_params(tmp_path, index_dir, n_notes=1, max_rounds=1, polish_iterations=1,
                      calls=_budgets(planning=24, doctor_turn=16, patient_turn=16, polish=24),
                      baselines=[], turn_attempts=1)  # baselines: covered by scripted tests
    session = LLMSession("02_test", params.shared,
                         cache=ResponseCache(tmp_path / "cache" / "02.sqlite"))
    run, per_dialogue, stats = stage.run_stage(p, stage.make_clients(session, p), 13, extractor,
                                               _paths(tmp_path))
    session.close()
    assert stats["notes"] == 1 and set(per_dialogue["system"]) == {"NoteChat", "Human"}
    assert all(not math.isnan(v) for v in per_dialogue["src_rouge1"])
    assert session.ledger.totals()["total"]["calls"] >= 3  # planning, doctor, patient, ...
    assert (tmp_path / "reports" / "table3.md").exists()


def test_run_in_the_stage_shape_with_scripted_models(tmp_path, monkeypatch, index_dir):
    from medpref.notechat import stage as notechat_stage
    from scripted_stage import scripted_stage

    p = _stage_params(tmp_path, index_dir, n_notes=2, max_rounds=2, polish_iterations=1)
    stage = scripted_stage("02_notechat", tmp_path, monkeypatch, agent_responder, section=p)
    out = notechat_stage.run(stage)
    assert out.metrics["notes"] == 2 and "wall_s" not in out.metrics
    assert (tmp_path / "data/02_notechat/dialogues.jsonl").exists()
    assert "Combine step" in out.table3_markdown and "rule-based" in out.table3_markdown
    assert set(out.turn_quality["system"]) >= {"NoteChat", "Human"}
    stage.finish(out.metrics)
    saved = json.loads((tmp_path / "reports/02_notechat/metrics.json").read_text())
    assert saved == json.loads(json.dumps(out.metrics))
    assert "generate" in json.loads((tmp_path / "reports/02_notechat/timings.json")
                                    .read_text())["steps_s"]


def _write_aci_split(root, split, encounter):
    import csv

    from medpref.data.adapters import ACI_DIR, ACI_SPLITS

    (root / ACI_DIR).mkdir(parents=True, exist_ok=True)
    with open(root / ACI_DIR / ACI_SPLITS[split], "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["dataset", "encounter_id", "dialogue", "note"])
        writer.writerow(["aci", encounter, "[doctor] hi .\n[patient] my knee hurts .",
                         "CHIEF COMPLAINT\n\nKnee pain.\n\nPLAN\n\nRest."])


def test_notes_source_root_beside_the_environment_variable(tmp_path, monkeypatch):
    from medpref.notechat.stage import load_notes

    _write_aci_split(tmp_path / "mine", "test3", "D2N168")
    _write_aci_split(tmp_path / "env", "test3", "D2N200")
    monkeypatch.setenv("MEDPREF_SHARED_DATA", str(tmp_path / "env"))
    p = NoteChatParams(source="aci_bench", source_split="test3", n_notes=1)
    assert [n.id for n in load_notes(p, 0)] == ["aci-test3-D2N200"]   # the env var
    p = NoteChatParams(source="aci_bench", source_split="test3", n_notes=1,
                       source_root=str(tmp_path / "mine"))
    assert [n.id for n in load_notes(p, 0)] == ["aci-test3-D2N168"]   # the param wins


def test_source_split_must_name_a_split_of_the_source():
    assert NoteChatParams(source="aci_bench", source_split="valid").source_split == "valid"
    NoteChatParams(source="embedded", source_split="anything")       # not read
    with pytest.raises(ValueError, match=r"source_split 'validation' is not a split of aci_bench"):
        NoteChatParams(source="aci_bench", source_split="validation")
    with pytest.raises(ValueError, match=r"'valid' is not a split of mts_dialog.*'validation'"):
        NoteChatParams(source="mts_dialog", source_split="valid")
