"""The SP test measures what the doctor did: echoes earn nothing, failed judges abstain,
the extractive patient answers only from its case, an inventing patient fails the run."""

from __future__ import annotations

import pandas as pd
import pytest

from medpref.contracts import SPCase, Turn
from medpref.echo import list_pieces, listed_candidates, lists_too_many, speech_act
from medpref.llm.client import LLMClient
from medpref.llm.ledger import Ledger
from medpref.llm.scripted import ScriptedBackend
from medpref.llm.types import CallSpec, Completion, GenerationParams
from medpref.prompts import load_prompt
from medpref.sentences import split_sentences
from medpref.simulation import consult, grading, tables
from medpref.simulation.config import GraderParams, PatientParams, SimulationParams
from medpref.simulation.graders import (
    GRADERS,
    GraderContext,
    build_grader,
    check_names,
    without_echoes,
)
from medpref.simulation.knowledge import build_knowledge_bases
from medpref.simulation.patient import patient_fidelity
from medpref.simulation.patients import (
    DONT_KNOW,
    ExtractivePatient,
    PatientContext,
)
from test_simulation import case, client, keyword_judge, scripted_sim_stage, toy_encode

JUDGE_CALL = CallSpec("judge", "", 8, grading.ANSWER_PREFIX)  # the grader's budget


def grading_setup(judge=None):
    return grading.GradingSetup(
        judge=judge, templates=[load_prompt("sp_grade_turns_first"),
                                load_prompt("sp_grade_item_first")],
        count_template=load_prompt("sp_count_diseases"), encode=toy_encode,
        pass_threshold=0.5, max_candidates=4, embedding_threshold=0.6)


def echo_aware():
    return build_grader("echo_aware", GraderContext(GraderParams(), grading_setup()))


def grade(grader, turns, c, doctor="doc"):
    consult_ = consult.Consultation(c.id, c.department, c.lang, doctor, "m", turns)
    return {g.item: g for g in grader.grade([consult_], {c.id: c})}


def cough_case(**kw):
    c = case("sp-v", **kw)
    return c.model_copy(update={"checklist": c.checklist.model_copy(update={
        "symptoms": ["cough for two weeks", "fever", "phlegm"]})})


# -- the grader ------------------------------------------------------------------------------

def test_an_echo_of_the_complaint_passes_no_item():
    c = cough_case()
    turns = [Turn(role="patient", text="I have had a cough for two weeks."),
             Turn(role="doctor", text="So you have had a cough for two weeks."),
             Turn(role="patient", text="Yes."),
             Turn(role="doctor", text="I'm glad to have you as a patient.")]
    g = grade(echo_aware(), turns, c)
    assert not any(x.passed for x in g.values())
    assert g["cough for two weeks"].echo_excluded == ["So you have had a cough for two weeks."]
    # the old whole-turn embedding grade credits the copy: the reason for this grader
    old = grade(build_grader("embedding", GraderContext(GraderParams(), grading_setup())),
                turns, c)
    assert old["cough for two weeks"].passed


def test_an_item_asked_in_the_doctors_own_words_passes_with_its_evidence():
    c = cough_case()
    turns = [Turn(role="patient", text="I have had a cough for two weeks."),
             Turn(role="doctor", text="You have a cough. Do you have a fever?"),
             Turn(role="patient", text="Yes."),
             Turn(role="doctor", text="I'd like to get a chest X-ray. This looks like pneumonia.")]
    g = grade(echo_aware(), turns, c)
    assert g["fever"].passed and g["fever"].evidence == "Do you have a fever?"
    assert g["fever"].evidence_turn == 1
    assert g["chest X-ray"].passed and g["chest X-ray"].evidence_turn == 3
    assert g["pneumonia"].passed and g["pneumonia"].candidates == [1]
    assert not g["phlegm"].passed and not g["cough for two weeks"].passed


def test_a_statement_does_not_ask_and_a_declined_test_is_not_recommended():
    c = cough_case()
    turns = [Turn(role="patient", text="I have had a cough for two weeks."),
             Turn(role="doctor", text="Fever is common with this. You don't need a chest X-ray."),
             Turn(role="patient", text="OK."),
             Turn(role="doctor", text="It could be pneumonia, bronchitis, asthma or lung cancer.")]
    g = grade(echo_aware(), turns, c)
    assert not g["fever"].passed and not g["chest X-ray"].passed
    assert not g["pneumonia"].passed and g["pneumonia"].candidates == [4]


def test_a_chinese_echo_passes_no_item_and_an_own_question_does():
    c = SPCase(id="zh-1", department="internal_medicine", lang="zh", chief_complaint="咳嗽两周",
               patient_info={"现病史": "咳嗽两周，夜间加重。"},
               checklist={"symptoms": ["咳嗽", "发热"], "tests": [], "diseases": []})
    turns = [Turn(role="patient", text="我咳嗽两周了。"),
             Turn(role="doctor", text="您咳嗽两周了。"),
             Turn(role="patient", text="是的。"),
             Turn(role="doctor", text="有没有发热？")]
    g = grade(echo_aware(), turns, c)
    assert not g["咳嗽"].passed and g["咳嗽"].echo_excluded == ["您咳嗽两周了。"]
    assert g["发热"].passed and g["发热"].evidence == "有没有发热？"


def test_a_failed_judge_call_abstains_and_leaves_the_score():
    backend = ScriptedBackend(lambda r: "")
    backend.generate = lambda reqs, cb=None: [Completion(text="", error="timeout") for _ in reqs]
    judge = grading.Judge(LLMClient("judge", backend, GenerationParams(), ledger=Ledger("t")),
                          JUDGE_CALL, mode="generate")
    grader = build_grader("generate", GraderContext(GraderParams(mode="generate"),
                                                    grading_setup(), lambda: judge))
    c = cough_case()
    turns = [Turn(role="patient", text="I have had a cough for two weeks."),
             Turn(role="doctor", text="Do you have a fever?")]
    g = grade(grader, turns, c)
    assert all(x.passed is None and x.method == "abstain" for x in g.values())
    assert grading.case_scores(list(g.values()), ["sp-v"])[0]["symptoms"] is None


def test_the_judge_reads_the_transcript_without_the_doctors_echoes():
    judge_client = client(keyword_judge, "judge")
    judge = grading.Judge(judge_client, JUDGE_CALL, mode="generate")
    grader = build_grader("generate", GraderContext(GraderParams(mode="generate"),
                                                    grading_setup(), lambda: judge))
    c = cough_case()
    turns = [Turn(role="patient", text="I have a fever and a cough."),
             Turn(role="doctor", text="A fever and a cough.")]
    g = grade(grader, turns, c)
    assert not g["fever"].passed        # the keyword judge saw no "fever" in a doctor line
    seen = "\n".join(m["content"] for r in judge_client.backend.requests for m in r.messages)
    assert "Doctor: A fever and a cough." not in seen
    assert without_echoes(turns, 0.5, 2)[1].text == "(repeats the patient)"


def test_every_registered_grader_builds_and_an_unknown_mode_is_refused():
    judge = grading.Judge(client(keyword_judge, "judge"), JUDGE_CALL, mode="generate")
    for name in GRADERS:
        build_grader(name, GraderContext(GraderParams(), grading_setup(), lambda: judge))
    with pytest.raises(ValueError, match="no grader 'nope'"):
        check_names(GraderParams(mode="nope"))


# -- the patient -----------------------------------------------------------------------------

def extractive(c, **kw):
    params = PatientParams(**kw)
    return ExtractivePatient(PatientContext(params, {c.id: c}, {}, toy_encode))


def test_the_extractive_patient_answers_a_scripted_question_with_its_scripted_answer():
    c = case("sp-x")
    patient = extractive(c)
    text, trace = patient.answer("sp-x", "en", "Do you have a fever?")
    assert text == "Yes, up to 38.5 degrees since Monday." and trace[0]["from"] == "script"
    text, _ = patient.answer("sp-x", "en", "What is your favourite film?")
    assert text == DONT_KNOW["en"]
    text, trace = patient.answer("sp-x", "en", "So, what brings you here today?")
    assert text == c.chief_complaint and trace[0]["from"] == "complaint"


def test_a_turn_that_asks_nothing_gets_a_neutral_fallback_not_a_request_for_a_diagnosis():
    """The patient does not steer: "What do you think I have?" would invite any doctor
    that asked nothing to name a diagnosis (issue 31). The fallback is counted."""
    c = case("sp-x")
    patient = extractive(c)
    text, trace = patient.answer("sp-x", "en", "The result of the flu is a fever. Fever.")
    assert text == "I'm not sure what else to tell you." and trace[0]["from"] == "nothing_asked"
    assert "?" not in text and "diagnos" not in text and "have" not in text
    zh, _ = patient.answer("sp-x", "zh", "发烧是流感的结果。")
    assert zh == PatientParams().nothing_asked["zh"] and "？" not in zh
    own = extractive(c, nothing_asked={"en": "Hmm."})
    assert own.answer("sp-x", "en", "Fever.")[0] == "Hmm."
    assert own.answer("sp-x", "zh", "发烧。")[0] == "Hmm."      # no zh sentence: the English one
    with pytest.raises(ValueError, match="nothing_asked"):
        PatientParams(nothing_asked={"zh": "嗯。"})
    # what each reply was, for the per-doctor fallback share
    consults = [consult.Consultation("sp-x", "im", "en", "d", "m", [
        Turn(role="patient", text="cough"), Turn(role="doctor", text=t)])
        for t in ("I see.", "What is your favourite film?", "Do you have a fever?",
                  "Do you have a fever? What is your favourite film?")]
    steps = [r.step["fallback"] for r in patient.reply(consults)]
    assert steps == ["nothing_asked", "dont_know", None, None]


def test_the_chinese_patient_answers_a_reworded_question_and_declines_an_unrelated_one():
    import json

    from medpref import REPO_ROOT
    rows = (REPO_ROOT / "data/embedded/sp_cases.jsonl").read_text(encoding="utf-8").splitlines()
    c = SPCase(**next(r for r in map(json.loads, rows) if r["id"] == "sp-0016"))
    patient = extractive(c)
    answers = {s["doctor"]: s["patient"] for s in c.script}
    # reworded scripted questions get the scripted answer (bigram Dice, frame removed)
    text, trace = patient.answer(c.id, "zh", "你有没有反酸的情况？")
    assert text == answers["有没有反酸？"] and trace[0]["from"] == "script"
    text, _ = patient.answer(c.id, "zh", "你的父母有胃病吗？")
    assert text == answers["家里人有胃病吗？"]
    # a short question found inside a history sentence gets that sentence (containment)
    text, trace = patient.answer(c.id, "zh", "有没有高血压？")
    assert "高血压" in text and trace[0]["from"] == "history"
    # nothing of the case asked: the patient does not know
    text, trace = patient.answer(c.id, "zh", "您今天天气好吗？")
    assert text == DONT_KNOW["zh"] and trace[0]["from"] == "dont_know"


def test_the_llm_patient_speaks_as_the_cases_family_informant():
    from medpref.simulation.knowledge import build_knowledge_bases
    from medpref.simulation.patients import build_patient

    seen = []

    def responder(req):
        seen.append(" ".join(m["content"] for m in req.messages))
        return "Patient: She has had a fever since Monday."

    consults = []
    for informant in ("患者母亲", None):
        c = case("sp-i").model_copy(update={"informant": informant})
        kbs = build_knowledge_bases([c], toy_encode, 128)
        patient = build_patient("llm", PatientContext(
            PatientParams(kind="llm"), {c.id: c}, kbs, toy_encode, load_prompt("sp_patient"),
            lambda: client(responder, "patient"), SimulationParams().call("patient")))
        turns = [Turn(role="patient", text=c.chief_complaint),
                 Turn(role="doctor", text="Does she have a fever?")]
        consults.append(consult.Consultation(c.id, c.department, c.lang, "doc", "m", turns))
        (reply,) = patient.reply(consults[-1:])
        assert reply.text == "She has had a fever since Monday."
    mother, patient_self = seen
    assert "as the patient's mother" in mother and "Your answer as the patient's mother" in mother
    assert "as the patient," in patient_self and "mother" not in patient_self


def test_findings_come_only_after_a_test_is_asked_for():
    c = case("sp-x")
    patient = extractive(c)
    text, trace = patient.answer("sp-x", "en", "What did the chest shadow look like?")
    assert "patchy shadow" not in text
    text, trace = patient.answer("sp-x", "en", "Let's get a chest X-ray.")
    # the finding in the patient's words (medpref.simulation.voice): no field label
    assert text == "The chest x-ray showed patchy shadow in the right lower lobe."
    assert trace[0]["from"] == "findings"


def test_the_fidelity_guard_fails_a_run_whose_patient_invents_facts(tmp_path, monkeypatch):
    from medpref.contracts import write_jsonl
    from medpref.params import parse_params
    from medpref.simulation import whole
    from medpref.stagekit import StageFailed

    write_jsonl(tmp_path / "cases.jsonl", [case("sp-a")])
    params = parse_params({"simulation": {
        "cases": str(tmp_path / "cases.jsonl"), "rounds": 2, "trained_policies": False,
        "rem_radar": False, "next_turn": {"enabled": False},
        "grader": {"graded_items": None}, "controls": [],
        "patient": {"kind": "llm", "guard_min_sentences": 2}}})
    clients = {"policy": client(lambda r: "Do you have a fever?", "policy"),
               "patient": client(lambda r: "My brother plays football in Madrid.", "patient"),
               "judge": client(keyword_judge, "judge")}

    new_stage = scripted_sim_stage(tmp_path, monkeypatch, clients)
    with pytest.raises(StageFailed, match=r"all doctors: 2 of 2 patient sentences \(100%\) not in"):
        whole.run(new_stage(params))
    assert not (tmp_path / "reports" / "06_simulation").exists()  # nothing half-written
    # the same run with the extractive patient passes the guard
    params.simulation.patient = PatientParams()
    out = whole.run(new_stage(params))
    assert out.behaviour.loc[0, "patient_unsupported_share"] == 0.0


# -- the doctor ------------------------------------------------------------------------------

def test_stop_after_question_keeps_a_turn_up_to_its_first_question():
    raw = "Doctor: Hello. How long has it been? Any fever? Patient: two weeks"
    assert consult.parse_doctor_answer(raw) == "Hello. How long has it been? Any fever?"
    assert consult.parse_doctor_answer(raw, stop_after_question=True) == \
        "Hello. How long has it been?"


def test_loop_controls_reach_the_cache_key_only_when_on():
    off = GenerationParams(max_new_tokens=8)
    assert off.cache_fields() == {"max_new_tokens": 8, "stop": []}     # older keys unchanged
    on = off.with_overrides(repetition_penalty=1.3, no_repeat_ngram_size=3)
    assert on.cache_fields() == {"max_new_tokens": 8, "stop": [], "repetition_penalty": 1.3,
                                 "no_repeat_ngram_size": 3}
    assert on.loop_controls() == {"repetition_penalty": 1.3, "no_repeat_ngram_size": 3}


def test_doctor_behaviour_counts_questions_repetition_and_echoes():
    from medpref.simulation.behaviour import behaviour_row, repetition_share

    assert repetition_share("I am glad. I am glad. I am glad.") == pytest.approx(1 - 3 / 7)
    assert repetition_share("Do you have a fever?") == 0.0
    c = consult.Consultation("sp-a", "im", "en", "doc", "m", [
        Turn(role="patient", text="I have had a cough for two weeks."),
        Turn(role="doctor", text="A cough for two weeks."),
        Turn(role="patient", text="Yes."),
        Turn(role="doctor", text="Do you have a fever?")])
    from medpref.params import parse_params

    row = behaviour_row(c, parse_params({"simulation": {}}).simulation)
    assert row["doctor_turns"] == 2 and row["question_turns"] == 1
    assert row["echo_sentences"] == 1 and row["doctor_sentences"] == 2


def test_paired_table_says_no_detectable_difference_for_identical_doctors():
    rows = []
    for i in range(8):
        for doctor, sym in [("base", 0.1 * (i % 3)), ("sft", 0.1 * (i % 3)),
                            ("dpo", 0.1 * (i % 3) + 0.5)]:
            rows.append({"doctor": doctor, "case": f"c{i}", "department": "im",
                         "symptoms": sym, "tests": None, "diseases": 1.0})
    paired = tables.table2_paired(pd.DataFrame(rows), n_boot=500)
    sym = paired[(paired["metric"] == "Sym.") & (paired["vs"] == "base")].set_index("doctor")
    assert sym.loc["sft", "verdict"] == "no detectable difference"
    assert sym.loc["dpo", "verdict"] == "higher" and sym.loc["dpo", "diff"] == pytest.approx(50)
    assert sym.loc["dpo", "cases"] == 8 and sym.loc["dpo", "p_value"] < 0.05
    assert "Test" not in set(paired["metric"])            # no case has a test item


def disease_case(disease):
    c = cough_case()
    return c.model_copy(update={"checklist": c.checklist.model_copy(update={
        "diseases": [disease]})})


@pytest.mark.parametrize("doctor_says, disease, passes", [
    # named, with a qualifier the item has and the doctor left out
    ("Yellowing phlegm may indicate pneumonia.", "community-acquired pneumonia (right lower lobe)",
     True),
    ("This could be polycystic ovary syndrome (PCOS), or endometriosis.",
     "polycystic ovary syndrome", True),
    # the same organ, not the disease (the cosine alone passed these in the committed run)
    ("She started to pull away from both ears because of her eardrums.",
     "acute otitis media (right)", False),
    ("Endometrial cancer treatment depends on the type.", "uterine fibroids (leiomyoma)", False),
    # only a modifier in common
    ("The pain is in the right lower part of the chest.",
     "community-acquired pneumonia (right lower lobe)", False),
    # only the site or the class word in common (credited in the committed run at
    # a2f4a76, whose grader still counted these as the disease's name)
    ("Take some medicine designed against uterine contractions.",
     "uterine fibroids (leiomyoma)", False),
    ("The ovary looks normal on the scan.", "polycystic ovary syndrome", False),
    # plain words the hand graders credit: "iron" and "pregnancy" stay part of the name
    ("You're anaemic because your iron stores are very low.", "iron deficiency anaemia",
     True),
    ("The pregnancy is growing in your left fallopian tube, outside the womb.",
     "ectopic pregnancy (left tubal)", True),
    ("It may be linked to anxiety disorders.",
     "major depressive disorder (moderate to severe episode)", False),
    ("Depression caused by trauma is common.",
     "major depressive disorder (moderate to severe episode)", True),
    # denied, ruled out
    ("He coughs at night but no other signs of asthma were present.",
     "childhood asthma (allergic)", False),
    ("We ruled out appendicitis.", "acute appendicitis", False),
    # a qualifier of the item is not its name; a curly apostrophe still negates
    ("She doesn\u2019t seem allergic, just very sensitive skin.", "childhood asthma (allergic)",
     False),
    ("It doesn\u2019t look like asthma.", "childhood asthma (allergic)", False),
    ("He has asthma.", "childhood asthma (allergic)", True),
    # "not just" affirms
    ("This could lead to more than one problem, not just hernia.",
     "right indirect inguinal hernia", True),
    # a run-on list with no separators is still a list of candidates
    ("A possible diagnosis includes pancreatitis acute bronchitis gastroenteritis dehydration "
     "anemia hyperthyroidism malnutrition.", "acute rotavirus gastroenteritis with moderate "
     "dehydration", False),
])
def test_a_disease_passes_only_when_named_not_denied_and_not_in_a_long_list(doctor_says,
                                                                              disease, passes):
    c = disease_case(disease)
    turns = [Turn(role="patient", text="I have had a cough for two weeks."),
             Turn(role="doctor", text=doctor_says)]
    grader = build_grader("echo_aware", GraderContext(
        GraderParams(match_threshold=-1.0), grading_setup()))   # every sentence "matches"
    g = grade(grader, turns, c)[disease]
    assert g.passed is passes, (doctor_says, g)


def test_disease_words_count_the_shapes_of_diseases_not_diagnosis():
    from medpref.echo import disease_words, names_disease
    assert disease_words("pancreatitis bronchitis gastroenteritis anemia anaemia "
                         "hyperthyroidism") == 6
    assert disease_words("The diagnosis and prognosis are good; the mechanism is clear.") == 0
    assert disease_words("iron deficiency, a syndrome, a tumour and lymphomas") == 4
    assert names_disease("考虑是肺炎。", "肺炎")   # Chinese: the shared unit suffices
    # ... but not inside a history question: asking whether the patient has had it (issue 41)
    assert not names_disease("有没有得过肺炎？", "肺炎")


def four_symptom_case() -> SPCase:
    """Four single-word symptoms, a test and a disease: a recital lists more than three."""
    c = case("sp-l")
    return c.model_copy(update={"checklist": c.checklist.model_copy(update={
        "symptoms": ["fever", "phlegm", "wheeze", "rash"], "tests": ["chest X-ray"],
        "diseases": ["pneumonia"]})})


def ask(grader, c, *doctor_turns):
    """Grades when the doctor says ``doctor_turns`` in order (the patient: "Yes.")."""
    turns = [Turn(role="patient", text=c.chief_complaint)]
    for t in doctor_turns:
        turns += [Turn(role="doctor", text=t), Turn(role="patient", text="Yes.")]
    consult_ = consult.Consultation(c.id, c.department, c.lang, "doc", "m", turns)
    return {g.item: g for g in grader.grade([consult_], {c.id: c})}


# -- the listing rule (Eq. 6 extended), on hand-made sentences --------------------------------

def test_a_four_item_list_fails_and_a_three_item_question_passes():
    four = "Do you have fever, cough, chest pain or headache?"
    three = "Do you have fever, cough or chest pain?"
    assert list_pieces(four) == 4 and list_pieces(three) == 3
    assert lists_too_many(four, 0, "question", 4)
    assert not lists_too_many(three, 0, "question", 4)
    assert not lists_too_many(three, 3, "question", 4)       # three checklist items matched
    assert lists_too_many(three, 4, "question", 4)           # ... four: a list of the checklist
    assert not lists_too_many(four, 0, "question", 5)        # the cap is a param


def test_a_run_on_list_without_commas_is_caught_by_its_matched_items():
    run_on = "Any fever phlegm wheeze rash?"
    assert list_pieces(run_on) == 1
    assert not lists_too_many(run_on, 3, "question", 4)
    assert lists_too_many(run_on, 4, "question", 4)


def test_a_lead_in_without_content_is_no_piece_and_an_order_counts_its_items_only():
    diagnosis = "From what you've told me, the most likely diagnosis is acute appendicitis."
    assert list_pieces(diagnosis) == 1
    order = "I'd like blood tests, a blood count, liver tests and lipase."
    assert list_pieces(order) == 4
    assert listed_candidates(order, 3, "recommendation") == 3      # three checklist tests
    assert not lists_too_many(order, 3, "recommendation", 4)
    assert lists_too_many(order, 4, "recommendation", 4)           # four items: still a list
    assert lists_too_many(order, 0, "question", 4)                 # asked as a list: pieces


def test_every_single_topic_question_of_the_embedded_scripts_passes_the_listing_rule():
    """Counting pieces alone: no scripted question of the 17 cases lists four things."""
    from medpref.contracts import read_jsonl
    from medpref.params import REPO_ROOT

    cases = read_jsonl(REPO_ROOT / "data" / "embedded" / "sp_cases.jsonl", SPCase)
    questions = [s for c in cases for pair in c.script
                 for s in split_sentences(pair["doctor"]) if speech_act(s) == "question"]
    assert len(questions) > 300
    listing = [q for q in questions if lists_too_many(q, 0, "question", 4)]
    assert listing == []


def test_the_grader_credits_nothing_of_a_recital_and_each_item_asked_on_its_own():
    c, grader = four_symptom_case(), echo_aware()
    recital = ask(grader, c, "Do you have fever, phlegm, wheeze, rash or chest X-ray?")
    assert not any(g.passed for g in recital.values())
    assert recital["fever"].listing_excluded == [
        "Do you have fever, phlegm, wheeze, rash or chest X-ray?"]
    run_on = ask(grader, c, "Any fever phlegm wheeze rash?")
    assert not any(g.passed for g in run_on.values())
    three = ask(grader, c, "Any fever, phlegm or wheeze?")
    assert [i for i, g in three.items() if g.passed] == ["fever", "phlegm", "wheeze"]
    apart = ask(grader, c, "Any fever? Any phlegm? Any wheeze? Any rash?")
    assert all(apart[i].passed for i in ["fever", "phlegm", "wheeze", "rash"])
    # a single-topic question that MiniLM puts near many items is no list: only items
    # named by their words count (every sentence "matches" every item by cosine here)
    loose = build_grader("echo_aware", GraderContext(GraderParams(match_threshold=-1.0),
                                                     grading_setup()))
    one = ask(loose, c, "Has he ever had wheezing treated before?")
    assert one["wheeze"].passed and one["wheeze"].listing_excluded == []
    # the per-turn disease rule still holds beside it
    named = ask(grader, c, "This is pneumonia.")
    assert named["pneumonia"].passed and named["pneumonia"].candidates == [1]




def test_the_patient_knows_its_opening_words_from_any_source():
    """AgentClinic NEJM: the adapter derives "Gross hematuria" from the question; it is in
    no section, yet the patient says it when asked what brings it in (issue 31: the run
    failed at its fidelity guard on that one sentence)."""
    c = SPCase(id="nejm-1", department="general", chief_complaint="Gross hematuria",
               patient_info={"History": "A 67-year-old man has had blood in his urine for "
                                        "three days."},
               checklist={"symptoms": ["blood in urine"], "tests": [], "diseases": ["x"]})
    kb = build_knowledge_bases([c], toy_encode, 128)[c.id]
    assert "gross hematuria" in kb.verbatim
    assert any(ch.startswith("Chief complaint: Gross hematuria") for ch in kb.chunks)
    patient = ExtractivePatient(PatientContext(PatientParams(), {c.id: c}, {}, toy_encode))
    said, _ = patient.answer(c.id, "en", "What brings you in today?")
    assert said == "Gross hematuria"
    turns = [Turn(role="patient", text=c.chief_complaint),
             Turn(role="doctor", text="What brings you in today?"), Turn(role="patient", text=said)]
    blind = patient_fidelity(turns, kb, lambda t: toy_encode(t) * 0.0, support=0.45,
                             relevance=0.25)              # an encoder that matches nothing
    assert blind.sentences == 1 and blind.unsupported == 0


def test_the_patient_answers_one_line_of_a_section_that_lists_a_finding_a_line():
    """AgentClinic's sections have no full stops, one finding a line: the patient gives the
    line that answers, not the whole section (which volunteered every other finding)."""
    from medpref.simulation.knowledge import case_sentences, section_sentences

    results = ("Blood Tests: Acetylcholine Receptor Antibodies: Present (elevated)\n"
               "Electromyography: Findings: Decreased muscle response\n"
               "Imaging: Chest CT: Normal, no thymoma")
    assert section_sentences(results) == results.splitlines()
    assert section_sentences("One. Two") == ["One.", "Two"]
    c = SPCase(id="ac-1", department="general", chief_complaint="Double vision",
               patient_info={"History": "Double vision for a month.", "Test Results": results},
               checklist={"symptoms": ["Double vision"], "tests": ["Electromyography"],
                          "diseases": ["Myasthenia gravis"]})
    patient = ExtractivePatient(PatientContext(PatientParams(), {c.id: c}, {}, toy_encode))
    said, trace = patient.answer(c.id, "en", "Can we check the electromyography findings?")
    # the line in the patient's words (medpref.simulation.voice): the test named, no labels
    assert said == "The electromyography showed decreased muscle response"
    assert trace[0]["from"] == "findings"
    assert "the electromyography showed decreased muscle response" in case_sentences(c)
    # two lines in one answer stay two sentences, each the case's own
    from medpref.sentences import split_sentences
    from medpref.simulation.knowledge import normalise_sentence

    both, _ = patient.answer(c.id, "en", "Can we check the electromyography findings? "
                                         "Can we check the chest CT imaging?")
    assert split_sentences(both) == ["The electromyography showed decreased muscle response.",
                                     "The chest CT showed normal, no thymoma."]
    assert all(normalise_sentence(s) in case_sentences(c) for s in split_sentences(both))
