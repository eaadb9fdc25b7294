"""The patient speaks as a patient on every case source (issue 41 item 6).

The fixtures are written by us in the shapes the published rows take: an AgentClinic NEJM
actor brief (a preamble, bold field labels, bullets, an instruction, a finding inside the
brief, a ``physical_exams`` text of numbered results), a CSPT case in Chinese (a record
in the third person, a labelled section, outpatient results), and an asymptomatic MedQA
OSCE record. Every patient sentence the control doctors draw out must be a sentence of
the case after the declared rewrite (:func:`medpref.simulation.knowledge.case_sentences`)
or a declared fallback, and carry none of the faults the check names.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from medpref.contracts import SPCase, Turn
from medpref.data.agentclinic import nejm_case_record, osce_case_record
from medpref.sentences import split_sentences
from medpref.simulation import consult, controls, grading
from medpref.simulation.config import PatientParams
from medpref.simulation.knowledge import case_sentences, listed_findings, normalise_sentence
from medpref.simulation.patients import (
    ExtractivePatient,
    PatientContext,
    fallback_sentences,
    said_alone,
)
from medpref.simulation.voice import (
    first_person,
    has_informant,
    line_faults,
    patient_facts,
    reports_result,
    voice_counts,
    voice_faults,
)
from test_casesets import lexical_grader
from test_simulation import toy_encode

NEJM_ROW = {
    "question": "A 47-year-old man presented with a 2-month history of hoarseness and cough. "
                "What is the most likely diagnosis?",
    "patient_info": "For your role as a patient, here's what you need to know: - **Age and "
                    "Background**: You are a 47-year-old man who works as a baker. - "
                    "**Symptoms**: - You've had a hoarse voice for two months. - Your cough "
                    "keeps you awake at night. - During the examination, the doctor noted a "
                    "white coating on your vocal cords. Remember, you are not aware of your "
                    "diagnosis or of any test results.",
    "physical_exams": "Laboratory studies: 1. Throat swab culture: Negative for bacteria. "
                      "2. Laryngoscopy findings: White plaques on both vocal cords.",
    "answers": [{"text": "Laryngeal candidiasis", "correct": True},
                {"text": "Laryngeal cancer", "correct": False}],
}
OSCE_ROW = {"OSCE_Examination": {
    "Objective_for_Doctor": "Assess the patient attending for a screening result.",
    "Patient_Actor": {
        "Demographics": "61-year-old man",
        "History": "The patient presents for a follow-up visit after a routine screening "
                   "blood test. He reports no complaints and feels well.",
        "Symptoms": {},
        "Past_Medical_History": "Hypertension, treated with lisinopril.",
        "Social_History": "Retired teacher; walks his dog daily."},
    "Physical_Examination_Findings": {"Vital_Signs": {"Blood_Pressure": "138/84 mmHg"}},
    "Test_Results": {"Serum_Calcium": "11.4 mg/dL (elevated)",
                     "Parathyroid_Hormone": "Elevated"},
    "Correct_Diagnosis": "Primary hyperparathyroidism"}}
CSPT_CASE = SPCase(
    id="cspt-internal_medicine-99", department="internal_medicine", lang="zh",
    chief_complaint="反复咳嗽咳痰2年，加重1周。",
    patient_info={"主诉": "反复咳嗽咳痰2年，加重1周。",
                  "现病史": "病人2年前受凉后出现咳嗽，咳白色黏痰，冬季加重。1周前咳嗽加重。",
                  "个人史": "吸烟史：每天20支。",
                  "门诊资料": "血常规示白细胞升高。胸片提示双肺纹理增粗。"},
    script=[{"doctor": "您哪里不舒服？", "patient": "我老是咳嗽，有痰。"},
            {"doctor": "咳了多久了？", "patient": "两年了，这一周更厉害。"}],
    checklist={"symptoms": ["咳嗽的时间", "痰的颜色"], "tests": ["血常规", "胸片"],
               "diseases": ["慢性支气管炎"]})


def nejm_case() -> SPCase:
    return SPCase(id="nejm-1", **nejm_case_record(NEJM_ROW, Path("nejm.jsonl"), 1))


def osce_case() -> SPCase:
    return SPCase(id="medqa-1", **osce_case_record(OSCE_ROW, Path("medqa.jsonl"), 1))


def run_controls(cases, voice="patient", rounds=5):      # simulation.rounds (PLPF: 5)
    params = PatientParams(voice=voice)
    by_id = {c.id: c for c in cases}
    patient = ExtractivePatient(PatientContext(params, by_id, {}, toy_encode))
    setup = consult.SimulationSetup(patient=patient, doctor_template=None, rounds=rounds)
    out = []
    for name in ("control_script", "control_reciter", "control_lecture", "control_echo"):
        doctor = controls.build_control(name, controls.ControlContext(by_id, rounds))
        out += consult.simulate(cases, doctor, setup)
    return out, fallback_sentences(params)


def test_the_nejm_brief_becomes_the_patients_first_person_facts():
    facts = patient_facts(nejm_case())
    assert facts.history == ("I am a 47-year-old man who works as a baker.",
                             "I've had a hoarse voice for two months.",
                             "My cough keeps me awake at night.")
    # the finding inside the brief and the numbered results: findings, named by their test
    assert facts.findings == (
        "During the examination, the doctor noted a white coating on my vocal cords.",
        "The throat swab culture showed negative for bacteria.",
        "The laryngoscopy showed white plaques on both vocal cords.")


def test_the_verbatim_brief_is_what_the_check_catches():
    brief = NEJM_ROW["patient_info"]
    assert "second_person" in voice_faults(brief, "Any cough?")
    assert {"field_label", "markdown"} <= set(voice_faults("- **Symptoms**: - cough", "Hi?"))
    assert voice_faults("Past medical history: none.", "Any illnesses?") == ["field_label"]
    assert voice_faults("The patient reports a cough.", "Any cough?") == ["third_person"]
    assert voice_faults("The patient reports a cough.", "Any cough?", informant=True) == []
    assert voice_faults("Skin biopsy showed granulomas.", "Any pain?") == ["unrequested_result"]
    assert voice_faults("Skin biopsy showed granulomas.", "Can we do a skin biopsy?") == []
    assert voice_faults("血常规示白细胞升高。", "还有别的不舒服吗？") == ["unrequested_result"]
    assert voice_faults("我老是咳嗽，有痰。", "您哪里不舒服？") == []
    assert voice_faults("我叫***，今年24岁。", "您叫什么？") == []    # CSPT's name mask
    # a dose or a diagnosis is history, a measured value is a result
    assert not reports_result("High blood pressure for five years, treated with amlodipine "
                              "5 mg daily.")
    assert reports_result("Blood pressure 148/92 mmHg, pulse 84/min.")
    assert reports_result("Random plasma glucose 16.8 mmol/L.")


def test_first_person_rewrites_second_and_third_person():
    assert first_person("You've noticed your skin darkening, which worries you.") == \
        "I've noticed my skin darkening, which worries me."
    assert first_person("For two months he has been very thirsty and drinks a lot.") == \
        "For two months I have been very thirsty and drinks a lot."
    assert first_person("Patient denies chest pain.") == "I have not had chest pain."
    assert first_person("She keeps pulling at her ear.", informant=True) == \
        "She keeps pulling at her ear."
    assert first_person("病人2年前受凉后出现咳嗽。") == "我2年前受凉后出现咳嗽。"


@pytest.mark.parametrize("make", [nejm_case, osce_case, lambda: CSPT_CASE],
                         ids=["nejm", "medqa_asymptomatic", "cspt"])
def test_every_patient_sentence_is_case_text_or_a_fallback_and_speaks_as_a_patient(make):
    case = make()
    consults, no_fact = run_controls([case])
    known = case_sentences(case)
    said = 0
    for c in consults:
        lines = line_faults(c.turns, lambda t: t.strip() in no_fact, has_informant(case))
        assert voice_counts(lines)["voice_faulty"] == 0, [x for x in lines if x["faults"]]
        for t in c.turns[1:]:
            if t.role != "patient" or t.text.strip() in no_fact:
                continue
            for s in split_sentences(t.text):
                said += 1
                assert normalise_sentence(s) in known, (c.doctor, s)
    assert said >= 1          # the controls drew case text out of every fixture


def test_results_only_after_a_test_is_asked_for():
    case = nejm_case()
    patient = ExtractivePatient(PatientContext(PatientParams(), {case.id: case}, {}, toy_encode))
    said, trace = patient.answer(case.id, "en", "Did anyone look at your vocal cords?")
    assert not reports_result(said) and trace[0]["from"] != "findings"
    said, trace = patient.answer(case.id, "en", "Can we do a laryngoscopy of the vocal cords?")
    assert said == "The laryngoscopy showed white plaques on both vocal cords."
    assert trace[0]["from"] == "findings"


def test_the_verbatim_voice_keeps_the_old_patient():
    """``simulation.patient.voice: verbatim`` reads the brief as written: the check counts it."""
    consults, no_fact = run_controls([nejm_case()], voice="verbatim")
    lines = [x for c in consults
             for x in line_faults(c.turns, lambda t: t.strip() in no_fact, False)]
    assert voice_counts(lines)["voice_faulty"] > 0


def test_a_child_case_keeps_the_third_person_and_the_asymptomatic_case_opens_as_published():
    child = SPCase(id="c", department="pediatrics", chief_complaint="Fever",
                   patient_info={"Basic information": "Mia, 2-year-old girl; her mother "
                                                      "answers.",
                                 "Present history": "She has had a fever for two days."},
                   checklist={"symptoms": [], "tests": [], "diseases": ["otitis media"]})
    assert has_informant(child)
    assert patient_facts(child).history[-1] == "She has had a fever for two days."
    case = osce_case()
    assert case.checklist.symptoms == [] and not has_informant(case)
    assert "I am a 61-year-old man." in patient_facts(case).history


def test_the_line_check_skips_fallbacks_and_the_opening():
    turns = [Turn(role="patient", text="You are a 40-year-old man."),
             Turn(role="doctor", text="Hello."),
             Turn(role="patient", text="I'm not sure about that."),
             Turn(role="doctor", text="Any fever?"),
             Turn(role="patient", text="- **Fever**: you've had it.")]
    lines = line_faults(turns, lambda t: t == "I'm not sure about that.", False)
    assert [x["turn"] for x in lines] == [4]
    assert lines[0]["faults"] == ["second_person", "field_label", "markdown"]


def agentclinic_folder(file: str) -> Path | None:
    """A data folder holding ``agentclinic/<file>``: the shared data directory, else
    ``$MEDPREF_AGENTCLINIC_DATA`` (a folder made from a mirror of the AgentClinic
    repository, for the NEJM extended file the shared directory lacks)."""
    from medpref.data.agentclinic import AGENTCLINIC_FILES
    from medpref.data.readers import shared_data_dir

    for root in (shared_data_dir(), os.environ.get("MEDPREF_AGENTCLINIC_DATA")):
        if root and (Path(root) / "agentclinic" / AGENTCLINIC_FILES[file]).is_file():
            return Path(root)
    return None


#: findings sentences of the published files that still carry a label after the rewrite
#: (measured; a ratio and a timed series: "FEV1:FVC Ratio: 62%", "After 5 mins: 160/min")
FINDINGS_LEFT = {"medqa": 0, "medqa_extended": 1, "nejm": 0, "nejm_extended": 0}


@pytest.mark.parametrize("file", list(FINDINGS_LEFT))
def test_the_published_agentclinic_files_speak_as_a_patient(file):
    """Every history sentence of every published case (and each finding of a line that
    lists them, said alone), after the rewrite, is free of
    the second person, labels, markdown, the third person and results; the findings
    keep only the measured leftovers."""
    from medpref.data.agentclinic import agentclinic_cases

    root = agentclinic_folder(file)
    if root is None:
        pytest.skip(f"agentclinic_{file}.jsonl absent (shared data or "
                    "$MEDPREF_AGENTCLINIC_DATA)")
    cases = agentclinic_cases(root, file=file)
    history = [(c.id, s, f) for c in cases for s in said_alone(patient_facts(c).history)
               for f in voice_faults(s, "Tell me more.", has_informant(c))]
    assert history == []
    findings = [(c.id, s) for c in cases for s in patient_facts(c).findings
                if voice_faults(s, "Can we run the tests?", has_informant(c))]
    assert len(findings) == FINDINGS_LEFT[file], findings


@pytest.mark.skipif(not os.environ.get("MEDPREF_CSPT"),
                    reason="MEDPREF_CSPT not set (a CSPT copy: the SpTesting archives)")
def test_the_published_cspt_cases_speak_as_a_patient():
    """The 72 CSPT cases with the four controls (Chinese is matched by character bigrams,
    so no MiniLM): one line is left, a scripted answer in the patient's own words that
    mentions a lab finding to a question about past illnesses (internal medicine 18)."""
    from medpref.data.cspt import load_cspt

    cases, _ = load_cspt(os.environ["MEDPREF_CSPT"])
    consults, no_fact = run_controls(cases)
    by_id = {c.id: c for c in cases}
    faulty = [(c.doctor, c.case_id, x["faults"]) for c in consults
              for x in line_faults(c.turns, lambda t: t.strip() in no_fact,
                                   has_informant(by_id[c.case_id])) if x["faults"]]
    assert len(cases) == 72 and faulty == [
        ("control_script", "cspt-internal_medicine-18", ["unrequested_result"])]


def test_a_label_with_a_ratio_in_it_is_spoken_as_a_finding():
    """MedQA-extended's spirometry: a nested label holding a colon ("FEV1:FVC_Ratio") is
    stripped like any other and its ratio said in words, no field label left."""
    from medpref.simulation.voice import section_facts

    history, found = section_facts("Spirometry: FEV1:FVC Ratio: 62%", True, False)
    assert (history, found) == ([], ["The FEV1 to FVC ratio showed 62%"])
    assert not voice_faults(found[0], "I'd like to check spirometry.")
    # a time of day is a value, not a label
    assert section_facts("Onset: at 10:30 this morning", False, False) == (
        ["At 10:30 this morning"], [])


def test_instructions_and_stage_directions_are_found_and_not_said():
    from medpref.simulation.voice import section_facts, without_stage_directions

    assert voice_faults("The duration is not specified in this scenario.", "How long?") == [
        "instruction"]
    assert voice_faults("Imagine the pain is sharp.", "Where?") == ["instruction"]
    assert voice_faults("（手捂下腹部）这里疼。", "哪里不舒服？") == ["stage_direction"]
    assert voice_faults("(sighs) It hurts.", "Where?") == ["stage_direction"]
    # a drug's name or a grade in brackets is not a stage direction
    assert voice_faults("胃镜示食管黏膜破损（洛杉矶分级A级）。", "查过胃镜吗？") == []
    assert without_stage_directions("我肚子痛（被动体位）。") == "我肚子痛。"
    history, _ = section_facts("Mention that you have been coughing at night. The onset "
                               "is not specified in the scenario.", False, False)
    assert history == ["I have been coughing at night."]


# -- a line that lists findings: answered one finding a question ----------------------------

#: a MedQA OSCE record whose secondary symptoms AgentClinic writes as one list line
#: ("Numbness and tingling in the left hand, Slurred speech, Double vision"), beside a
#: history sentence whose commas are prose ("I have not had fever, headache, or ...")
LISTED_ROW = {"OSCE_Examination": {
    "Objective_for_Doctor": "Assess the patient with unsteady walking.",
    "Patient_Actor": {
        "Demographics": "35-year-old woman",
        "History": "The patient reports that her walking has become unsteady over a month.",
        "Symptoms": {"Primary_Symptom": "Unsteady walking",
                     "Secondary_Symptoms": ["Numbness and tingling in the left hand",
                                            "Slurred speech", "Double vision"]},
        "Past_Medical_History": "Crohn disease, treated with natalizumab.",
        "Review_of_Systems": "Denies fever, headache, or neck stiffness."},
    "Physical_Examination_Findings": {"Neurological_Examination": "Ataxic gait."},
    "Test_Results": {"MRI_Brain": {"Findings": "Multifocal white matter lesions."}},
    "Correct_Diagnosis": "Progressive multifocal leukoencephalopathy"}}
LISTED = "Numbness and tingling in the left hand, Slurred speech, Double vision"


def listed_case() -> SPCase:
    return SPCase(id="medqa-listed", **osce_case_record(LISTED_ROW, Path("medqa.jsonl"), 1))


def test_a_list_line_is_told_from_prose_with_commas():
    assert listed_findings(LISTED) == ["Numbness and tingling in the left hand",
                                       "Slurred speech", "Double vision"]
    assert listed_findings("Insulin, Mesalamine, Enalapril, Aspirin") == [
        "Insulin", "Mesalamine", "Enalapril", "Aspirin"]
    # an item may hold prose commas of its own
    assert listed_findings("Pain in both knees, Right leg is shortened, flexed, and "
                           "adducted") == ["Pain in both knees",
                                           "Right leg is shortened, flexed, and adducted"]
    for prose in ("I have not had fever, headache, or neck stiffness.",
                  "Crying, especially intense with abdominal palpation",
                  "When I stand up, I feel dizzy.", "Double vision"):
        assert listed_findings(prose) == [], prose


def test_a_listed_line_is_answered_finding_by_finding():
    case = listed_case()
    assert LISTED in patient_facts(case).history
    patient = ExtractivePatient(PatientContext(PatientParams(), {case.id: case}, {}, toy_encode))
    for finding in ("Numbness and tingling in the left hand", "Slurred speech",
                    "Double vision"):
        said, trace = patient.answer(case.id, "en", f"Any {finding.lower()}?")
        assert said == finding and trace[0]["from"] == "history"
        assert normalise_sentence(said) in case_sentences(case)   # the case's own words
    # two findings asked in one turn: each question its own finding, nothing more
    said, _ = patient.answer(case.id, "en", "Any slurred speech? Any double vision?")
    assert said == "Slurred speech. Double vision."


def test_a_question_about_the_whole_list_gets_the_line_and_prose_stays_whole():
    case = listed_case()
    patient = ExtractivePatient(PatientContext(PatientParams(), {case.id: case}, {}, toy_encode))
    # closer to the whole line than to any one finding: the line, as before
    said, _ = patient.answer(case.id, "en", "Any numbness and tingling in the left hand, "
                                            "slurred speech or double vision?")
    assert said == LISTED
    # a general question the case does not answer is answered as before
    said, trace = patient.answer(case.id, "en", "Do you have any other symptoms?")
    assert trace[0]["from"] == "dont_know"
    # a sentence whose commas are prose is said whole, never cut into a piece
    said, _ = patient.answer(case.id, "en", "Have you had fever or headache?")
    assert said == "I have not had fever, headache, or neck stiffness."


def test_the_scripted_interview_earns_each_listed_symptom():
    """The bug this guards: the patient gave the whole list to the question about its
    first finding, and the grader then took the questions about the others for echoes of
    the patient (no credit): the script earned 1 of the 3 secondary symptoms."""
    case = listed_case()
    consults, _ = run_controls([case])
    script = next(c for c in consults if c.doctor == "control_script")
    patient_turns = [t.text for t in script.turns[1:] if t.role == "patient"]
    assert LISTED not in patient_turns
    grades = grading.leave_out_unmeasurable(
        lexical_grader().grade([script], {case.id: case}), {case.id: case})
    symptoms = {g.item: g.passed for g in grades if g.category == "symptoms"}
    # the primary symptom is the opening complaint: asking it back is an echo
    assert symptoms == {"Unsteady walking": False,
                        "Numbness and tingling in the left hand": True,
                        "Slurred speech": True, "Double vision": True}
