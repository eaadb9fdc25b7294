"""The SP grader's rule changes, each pinned by the dev items that motivated it.

Every rule change after the baseline of ``data/embedded/sp_grader_changes.yaml`` has a
test here built from the dev hand-graded items its entry names (``motivated_by``), so a
later change that undoes it fails. Items are graded by the echo-aware grader as params set it,
without MiniLM (the lexical match only), so these tests need no model.
"""

from __future__ import annotations

import pytest
import yaml

from medpref import REPO_ROOT
from medpref.data.sp_cases import embedded_sp_graded
from medpref.echo import doctor_sentences
from medpref.params import load_params
from medpref.prompts import load_prompt
from medpref.simulation.graders import GraderContext, build_grader
from medpref.simulation.grading import GradingSetup
from medpref.simulation.validation import grade_hand_items

CHANGES = REPO_ROOT / "data" / "embedded" / "sp_grader_changes.yaml"


@pytest.fixture(scope="module")
def items():
    return {g.id: g for g in embedded_sp_graded()}


@pytest.fixture(scope="module")
def grader():
    g = load_params().simulation.grader
    setup = GradingSetup(judge=None, templates=[load_prompt(n) for n in g.prompts],
                         count_template=load_prompt(g.count_prompt), encode=None,
                         max_candidates=g.max_candidates)
    return build_grader("echo_aware", GraderContext(g, setup))


def verdicts(grader, items, ids):
    return {gr.case: gr.passed for gr in grade_hand_items([items[i] for i in ids], grader)}


def test_motivating_items_are_dev_items(items):
    for e in yaml.safe_load(CHANGES.read_text(encoding="utf-8"))["changes"]:
        assert all(items[i].split == "dev" for i in e["motivated_by"]), e["id"]


# -- change 1: a question with one new unit is the doctor's own, not an echo ------------------

def test_a_question_adding_one_unit_is_not_an_echo(items, grader):
    """'Any pain in your shoulder?' after 'Lower tummy pain…' and 'How high has the fever
    been?' after 'Fever and cough…' share half their units with the complaint and add one:
    they ask something new and earn their items (dev g-0274, g-0469)."""
    ids = ["g-0274", "g-0469"]
    for i in ids:
        own = [s for s in doctor_sentences(items[i].transcript, 0.5, 2)]
        assert [s.echo for s in own] == [False], i
    assert verdicts(grader, items, ids) == {i: True for i in ids}


def test_a_statement_echo_with_one_new_unit_stays_an_echo():
    from medpref.contracts import Turn

    turns = [Turn(role="patient", text="Fever and cough with yellow phlegm for four days"),
             Turn(role="doctor", text="So a high fever for four days.")]
    assert [s.echo for s in doctor_sentences(turns, 0.5, 2)] == [True]


# -- change 2: the forms a request for a test takes ------------------------------------------

REQUEST_IDS = ["g-0136", "g-0459", "g-0487", "g-0493", "g-0534"]


def test_requests_in_their_everyday_forms_are_recommendations(items):
    """'We need a transvaginal ultrasound now.', 'Let me look in her ears with an
    otoscope.', "I'd like blood tests, a blood count, liver tests and lipase.", 'And a
    short mood questionnaire.' and "Let's weigh him now…" request a test (dev items)."""
    from medpref.echo import speech_act

    for i in REQUEST_IDS:
        doctor = [t.text for t in items[i].transcript if t.role == "doctor"]
        assert [speech_act(d) for d in doctor] == ["recommendation"], i


def test_requests_earn_their_tests_where_the_words_match(items, grader):
    assert verdicts(grader, items, ["g-0487", "g-0534"]) == {"g-0487": True, "g-0534": True}


def test_a_reported_result_or_a_new_question_is_not_a_request():
    from medpref.echo import speech_act

    assert speech_act("And the X-ray was normal.") == "statement"
    assert speech_act("And CRP?") == "question"
    assert speech_act("We need more information from family members.") == "statement"


@pytest.mark.slow
def test_requests_earn_their_tests_with_minilm(items):
    """With MiniLM (as the stage grades): all five dev requests earn their test."""
    from medpref.embedding import load_encoder

    g = load_params().simulation.grader
    setup = GradingSetup(judge=None, templates=[load_prompt(n) for n in g.prompts],
                         count_template=load_prompt(g.count_prompt),
                         encode=load_encoder(REPO_ROOT / "models" / "all-minilm-l6-v2"),
                         max_candidates=g.max_candidates)
    minilm = build_grader("echo_aware", GraderContext(g, setup))
    assert verdicts(minilm, items, REQUEST_IDS) == {i: True for i in REQUEST_IDS}


# -- change 3: a disease in made-up history is not a diagnosis --------------------------------

def test_a_disease_in_stated_history_is_not_named(items, grader):
    """'…when he had asthma attacks while sleeping', 'He had asthma earlier today…',
    '…who has been diagnosed with asthma since he was 12…' state a past event (dev items)."""
    ids = ["g-0273", "g-0277", "g-0375"]
    assert verdicts(grader, items, ids) == {i: False for i in ids}


def test_history_cues_leave_a_diagnosis_named():
    from medpref.echo import names_disease

    item = "childhood asthma (allergic)"
    assert not names_disease("He had asthma attacks while sleeping.", item)
    assert not names_disease("He has been diagnosed with asthma since he was 12.", item)
    assert names_disease("This sounds very similar to asthma.", item)
    # a history cue further back does not reach the diagnosis
    assert names_disease("He had a cold last week, and this now sounds like asthma.", item)


# -- change 4: a disease is named as the diagnosis only in a sentence that offers one --------

def _doctor_sentences_naming(item_obj):
    from medpref.echo import names_disease
    from medpref.sentences import split_sentences

    return [s for t in item_obj.transcript if t.role == "doctor"
            for s in split_sentences(t.text) if names_disease(s, item_obj.item)]


def test_teaching_text_and_talk_in_passing_do_not_name_the_disease(items, grader):
    """Dev false credits: a run-on list after 'She may need surgery depending upon size
    uterine fibroids…', 'these include anaemia if not caused from lack o f iron…',
    '…could lead to more complicated conditions not just hernia…', '…indicates biliary
    atres syndrome … caused primarily by gallstones…', '…which may occur when an ectopic
    pregnancy occurs…': no sentence offers the disease as this patient's diagnosis."""
    ids = ["g-0244", "g-0278", "g-0291", "g-0364", "g-0445"]
    for i in ids:
        assert _doctor_sentences_naming(items[i]) == [], i
    assert verdicts(grader, items, ids) == {i: False for i in ids}


def test_every_dev_diagnosis_keeps_its_frame(items):
    """Each dev disease item graded a pass names the disease in a sentence with a
    diagnostic frame ('This could be due to…', 'This sounds very similar to Asthma', 'You're
    anaemic because…', 'She most likely has…', 'I think this is…')."""
    dev_passes = [g for g in items.values() if g.split == "dev" and g.category == "diseases"
                  and g.passed and g.lang == "en"]
    assert len(dev_passes) >= 15
    for g in dev_passes:
        assert _doctor_sentences_naming(g), g.id


# -- change 5: drinking alcohol is not thirst --------------------------------------------------

DRINK_IDS = ["g-0559", "g-0560", "g-0561"]   # alcohol questions (dev), graded fail
THIRST_ID = "g-0562"                          # "Roughly how much are you drinking in a day?"


def test_alcohol_questions_do_not_earn_the_thirst_item(items, grader):
    """'Do you smoke or drink?', 'How much alcohol do you drink in a week?' and 'Do you
    drink beer or wine?' share only "drink" with 'excessive thirst and drinking
    (polydipsia)'; the case's own thirst question still earns it (dev items)."""
    assert verdicts(grader, items, [*DRINK_IDS, THIRST_ID]) == {
        **{i: False for i in DRINK_IDS}, THIRST_ID: True}


def test_alcohol_questions_do_not_match_a_fluid_item_by_meaning_either(items):
    """MiniLM puts 'Do you smoke or drink?' near "drinking" (cosine above the match
    threshold): with an encoder that matches everything, the alcohol questions still
    earn nothing on the fluid item, and an alcohol item is still earned by them."""
    import numpy as np

    g = load_params().simulation.grader
    setup = GradingSetup(judge=None, templates=[load_prompt(n) for n in g.prompts],
                         count_template=load_prompt(g.count_prompt),
                         encode=lambda texts: np.ones((len(texts), 4)) / 2.0,
                         max_candidates=g.max_candidates)
    matching_all = build_grader("echo_aware", GraderContext(g, setup))
    assert verdicts(matching_all, items, [*DRINK_IDS, THIRST_ID]) == {
        **{i: False for i in DRINK_IDS}, THIRST_ID: True}
    alcohol = items["g-0559"].model_copy(update={"id": "alc", "item": "alcohol use"})
    assert verdicts(matching_all, {"alc": alcohol}, ["alc"]) == {"alc": True}


@pytest.mark.parametrize(("sentence", "alcohol"), [
    ("Do you smoke or drink?", True), ("Are you a drinker?", True), ("Do you drink?", True),
    ("How much alcohol do you drink?", True), ("Any beer or wine?", True),
    ("How much water do you drink a day?", False),
    ("Have you been drinking more because you feel thirsty?", False),
    ("How much alcohol and water do you drink?", False),   # names fluid too
])
def test_which_sentences_speak_of_alcohol(sentence, alcohol):
    """The committed item-senses file (simulation.grader.item_senses): which sentences
    speak of alcohol, and which items it guards."""
    from medpref.simulation.config import GraderParams
    from medpref.simulation.graders import load_item_senses

    (sense,) = load_item_senses(GraderParams().item_senses).senses
    assert sense.other(sentence) is alcohol
    assert sense.guards("excessive thirst and drinking (polydipsia)")
    assert not sense.guards("alcohol and caffeine use")


#: dev items of the run batch whose credited sentence asks about someone other than the
#: patient (change "not-someone-else"); g-0122 (v1) asks the patient through "anyone"
SOMEONE_ELSE_IDS = ["g-0571", "g-0625", "g-0626", "g-0699", "g-0726", "g-0758", "g-0802",
                    "g-0822", "g-0841"]


def test_a_question_about_someone_else_earns_nothing(items, monkeypatch):
    """With an encoder that matches everything, the motivating sentences earn their items
    only while the rule is off; a question that reaches the patient through "anyone"
    ("Has anyone said your skin looks yellow?") earns its item either way."""
    import numpy as np

    from medpref.simulation import graders

    g = load_params().simulation.grader
    setup = GradingSetup(judge=None, templates=[load_prompt(n) for n in g.prompts],
                         count_template=load_prompt(g.count_prompt),
                         encode=lambda texts: np.ones((len(texts), 4)) / 2.0,
                         max_candidates=g.max_candidates)
    matching_all = build_grader("echo_aware", GraderContext(g, setup))
    ids = [*SOMEONE_ELSE_IDS, "g-0122"]
    assert verdicts(matching_all, items, ids) == {**{i: False for i in SOMEONE_ELSE_IDS},
                                                  "g-0122": True}
    monkeypatch.setattr(graders, "about_someone_else", lambda sentence: False)
    off = verdicts(matching_all, items, ids)
    assert sum(off[i] for i in SOMEONE_ELSE_IDS) >= 7 and off["g-0122"]


@pytest.mark.parametrize(("sentence", "else_"), [
    ("Does anyone have diabetes when first taken at night?", True),
    ("Do other children have eczema compared to yours today?", True),
    ("Have I had any colds recently?", True),
    ("Does someone else have swollen veins around their pubic bone?", True),
    ("Does anyone in your family have diabetes?", False),
    ("Has anyone around him been ill?", False),
    ("Does anyone smoke at home?", False),
    ("Has anyone said your skin looks yellow?", False),
    ("Do you feel these thoughts are put there by someone else?", False),
    ("That's unusual - does anyone else have it?", False),      # not its opening
])
def test_which_questions_are_about_someone_else(sentence, else_):
    from medpref.echo import about_someone_else

    assert about_someone_else(sentence) is else_


def test_no_scripted_question_is_about_someone_else():
    from medpref.data.sp_cases import embedded_sp_cases
    from medpref.echo import about_someone_else
    from medpref.sentences import split_sentences

    lines = [s for c in embedded_sp_cases() for t in c.script
             for s in split_sentences(t["doctor"])]
    assert len(lines) > 300 and not [s for s in lines if about_someone_else(s)]


# -- change clause-and-meaning (sp_grader_changes.yaml) -------------------------------------

@pytest.mark.parametrize("sentence, asks", [
    ("That's depression without any other changes: does anyone notice an absence of "
     "pleasure?", "does anyone notice an absence of pleasure?"),
    ("Have there been fits since then - full spells followed by breathlessness all day "
     "long instead of just waking up to breathe out", "Have there been fits since then"),
    ("hay fever fits after winter holidays when people have allergies against grass spores "
     "which they inhale while sleeping inside their homes?", ""),
    ("You've had a fever?", "You've had a fever?"),
    ("Any fever, chills or night sweats?", "Any fever, chills or night sweats?"),
    ("您咳嗽多久了？", "您咳嗽多久了？"),
])
def test_a_question_asks_only_by_its_asking_clauses(sentence, asks):
    from medpref.simulation.graders import asking_part

    assert asking_part(sentence) == asks


def test_a_disease_is_counted_in_the_clause_that_names_it():
    from medpref.simulation.graders import naming_clause
    from medpref.simulation.grading import heuristic_disease_count

    s = ("That's depression without any other signs of mania or psychosis at first: low "
         "blood pressure (hypotension), little energy, loss of weight, poor sleep")
    clause = naming_clause(s, "major depressive disorder (moderate to severe episode)")
    assert clause.startswith("That's depression") and "hypotension" not in clause
    assert heuristic_disease_count(clause, "depression") < 4 <= heuristic_disease_count(s, "x")
    # a Chinese sentence ends at its own mark, with or without a space after it
    turn = ("根据您现有的症状和资料，我们初步诊断为慢性宫颈炎、滴虫性阴道炎。"
            "您还需要进一步做些检查，比如B超、血常规、白带常规。希望您能积极配合。")
    assert heuristic_disease_count(turn, "慢性宫颈炎") == 3


def test_the_grader_reads_the_clause_the_act_and_who_speaks():
    """Through the grader itself (MiniLM loaded only for the cosine)."""
    from medpref.contracts import Turn
    from medpref.embedding import load_encoder
    from medpref.params import repo_path
    from medpref.simulation.consult import Consultation
    from medpref.simulation.graders import EchoAwareGrader

    p = load_params().simulation
    model = repo_path(p.embedding_model)
    if not (model / "modules.json").exists():
        pytest.skip(f"no MiniLM at {model}")
    setup = GradingSetup(judge=None, templates=[], count_template=None,
                         encode=load_encoder(model), max_candidates=p.grader.max_candidates)
    grader = EchoAwareGrader(GraderContext(p.grader, setup))
    from medpref.contracts import SPCase

    case = SPCase.model_validate({
        "id": "t-1", "department": "internal_medicine", "lang": "en",
        "chief_complaint": "Tired and thirsty for two months",
        "patient_info": {"history": "I am thirsty."},
        "checklist": {"symptoms": ["appetite and weight loss", "family history of asthma"],
                      "tests": [], "diseases": ["type 2 diabetes mellitus"]}})

    def grade(doctor: str) -> dict[str, bool]:
        c = Consultation("t-1", "internal_medicine", "en", "d", "m",
                         [Turn(role="patient", text=case.chief_complaint),
                          Turn(role="doctor", text=doctor)])
        return {g.item: g.passed for g in grader.grade([c], {"t-1": case})}

    assert grade("Have there been any changes to your appetite since then")[
        "appetite and weight loss"]                      # a question without its mark
    assert not grade("This could be bronchitis because of asthma attacks during those "
                     "episodes: do they get any fever?")["family history of asthma"]
    assert grade("This could be diabetes or high blood pressure.")["type 2 diabetes mellitus"]
    assert not grade("That suggests diabetic ketoacidosis.")["type 2 diabetes mellitus"]
    assert not grade("That suggests diabetes,' says Dr. John Kidd.")["type 2 diabetes mellitus"]


# -- change zh-meaning: a Chinese symptom asked in other words --------------------------------

def test_a_chinese_symptom_asked_in_other_words_is_matched_by_meaning(items, grader):
    """'您抽烟吗？平时喜欢吃辣的…', '孩子的疫苗都按时打了吗？' and '会不会有酸水冒上来…' ask
    吸烟及饮食习惯, 疫苗接种史 and 反酸 in other characters: the Chinese encoder matches
    them (dev g-0201, g-0203, g-0204); without it the characters alone do not."""
    ids = ["g-0201", "g-0203", "g-0204"]
    assert verdicts(grader, items, ids) == {i: True for i in ids}
    g = load_params().simulation.grader.model_copy(update={"zh_encoder": None,
                                                           "zh_headings": None})
    setup = GradingSetup(judge=None, templates=[], count_template=load_prompt(g.count_prompt),
                         encode=None, max_candidates=g.max_candidates)
    chars_only = build_grader("echo_aware", GraderContext(g, setup))
    assert verdicts(chars_only, items, ids) == {i: False for i in ids}
    # the history headings (change zh-history-headings) ask 疫苗接种史 by 疫苗 as well
    headings = build_grader("echo_aware", GraderContext(
        g.model_copy(update={"zh_headings": "data/embedded/sp_zh_history_headings.yaml"}),
        setup))
    assert verdicts(headings, items, ids) == {"g-0201": False, "g-0203": True,
                                              "g-0204": False}


def test_a_chinese_test_is_not_matched_by_its_topic(grader):
    """A question on a test's topic does not ask for the test: '以前得过肝炎吗？' is near
    肝功能 for the encoder, and Chinese tests are matched by their characters only."""
    from medpref.contracts import SPCase, Turn
    from medpref.simulation.consult import Consultation
    from medpref.simulation.graders import zh_item_texts

    assert zh_item_texts("是否了解患者有无流涕、咳痰。") == ["流涕、咳痰", "流涕", "咳痰"]
    case = SPCase(id="zh-1", department="internal_medicine", lang="zh",
                  chief_complaint="乏力两周", patient_info={"现病史": "乏力两周，食欲差。"},
                  checklist={"symptoms": ["饮酒史"], "tests": ["肝功能"], "diseases": []})
    consult = Consultation("zh-1", "internal_medicine", "zh", "d", "m", [
        Turn(role="patient", text="我最近总觉得累，没胃口。"),
        Turn(role="doctor", text="以前得过肝炎吗？平时喝酒吗？")])
    got = {g.item: g.passed for g in grader.grade([consult], {"zh-1": case})}
    assert got == {"饮酒史": True, "肝功能": False}


def test_an_unknown_chinese_encoder_is_refused():
    from medpref.simulation.zh_encoder import zh_encoder

    with pytest.raises(ValueError, match="unknown encoder 'bge'.*use_multilingual"):
        zh_encoder("bge")
    assert zh_encoder(None) is None


# -- change family-history-word ---------------------------------------------------------------

def _one_consultation(grader, complaint: str, doctor: str, symptoms: list[str]) -> dict:
    from medpref.contracts import SPCase, Turn
    from medpref.simulation.consult import Consultation

    case = SPCase(id="f-1", department="paediatrics", lang="en", chief_complaint=complaint,
                  patient_info={"history": complaint},
                  checklist={"symptoms": symptoms, "tests": [], "diseases": []})
    c = Consultation("f-1", "paediatrics", "en", "d", "m", [
        Turn(role="patient", text=complaint), Turn(role="doctor", text=doctor)])
    return {g.item: g.passed for g in grader.grade([c], {"f-1": case})}


@pytest.mark.parametrize("doctor, asked", [
    ("Any history of asthma?", False),                  # the patient's own history
    ("Any asthma in the family?", True),
    ("Does asthma run in the family?", True),
    ("Anyone in the family with asthma, his parents or brothers?", True),
])
def test_a_family_history_item_is_asked_only_with_a_family_word(grader, doctor, asked):
    """'Any history of asthma?' shares two of the item's three units, enough for the
    lexical match, but asks about the patient; a family word makes it the item."""
    got = _one_consultation(grader, "Cough at night for six months", doctor,
                            ["family history of asthma"])
    assert got == {"family history of asthma": asked}


@pytest.fixture(scope="module")
def minilm_grader():
    from conftest import configured_grader_with_minilm

    return configured_grader_with_minilm()


def test_family_history_credits_for_the_patients_own_history_are_refused(items,
                                                                         minilm_grader):
    """The change's six dev items, each a false credit before it: 'Have he had any asthma
    attacks since then?', 'Have they ever had bronchitis since childhood…' and 'does he
    have asthma or any other breathing problems?' ask about the child, not the family."""
    ids = ["g-0939", "g-1007", "g-1671", "g-1857", "g-1862", "g-2102"]
    assert all(not items[i].passed for i in ids)
    assert all(items[i].item == "family history of asthma" for i in ids)
    assert verdicts(minilm_grader, items, ids) == {i: False for i in ids}


# -- change zh-history-headings ---------------------------------------------------------------

def _zh_grades(grader, doctor: str, symptoms: list[str]) -> dict[str, bool]:
    from medpref.contracts import SPCase, Turn
    from medpref.simulation.consult import Consultation

    case = SPCase(id="h-1", department="internal_medicine", lang="zh",
                  chief_complaint="反复咳嗽三年",
                  patient_info={"现病史": "反复咳嗽三年，冬天加重。"},
                  checklist={"symptoms": symptoms, "tests": [], "diseases": []})
    consult = Consultation("h-1", "internal_medicine", "zh", "d", "m", [
        Turn(role="patient", text="我咳嗽好几年了，一到冬天就厉害。"),
        Turn(role="doctor", text=doctor)])
    return {g.item: g.passed for g in grader.grade([consult], {"h-1": case})}


def _grader_without_headings():
    g = load_params().simulation.grader.model_copy(update={"zh_headings": None})
    setup = GradingSetup(judge=None, templates=[], count_template=None, encode=None,
                         max_candidates=g.max_candidates)
    return build_grader("echo_aware", GraderContext(g, setup))


def test_a_history_heading_is_asked_in_everyday_words(grader):
    """'家族史' is asked by a question about the relatives' health, though the two share no
    character; the list of relatives is one question, not four candidates; a question on
    another heading does not earn it, and with zh_headings null nothing changes."""
    items = ["是否询问家族史。", "是否询问婚育史。", "是否了解诊疗经过。"]
    asked = "您父母、兄弟姐妹、爱人、子女身体好吗？"
    assert _zh_grades(grader, asked, items) == {items[0]: True, items[1]: False,
                                                items[2]: False}
    assert _zh_grades(grader, "这期间去医院看过医生吗？", items) == {
        items[0]: False, items[1]: False, items[2]: True}
    off = _grader_without_headings()
    assert _zh_grades(off, asked, items) == dict.fromkeys(items, False)
    # a statement is not a question: telling the family history asks nothing
    assert not _zh_grades(grader, "你父母身体都很好。", items)[items[0]]


def test_a_bad_headings_file_names_the_file_and_field(tmp_path):
    from medpref.contracts import ContractError
    from medpref.simulation.graders import load_zh_headings

    path = tmp_path / "h.yaml"
    path.write_text("relatives: 父母\nheadings:\n  - {id: x, item: 家族史, asks: '家里('}\n",
                    encoding="utf-8")
    with pytest.raises(ContractError, match=r"h\.yaml.*headings\.0\.asks.*regular expression"):
        load_zh_headings(str(path))
    path.write_text("headings: []\n", encoding="utf-8")
    with pytest.raises(ContractError, match=r"h\.yaml.*'relatives'.*required"):
        load_zh_headings(str(path))
    path.write_text("relatives: 父母\nheadings: []\n", encoding="utf-8")
    with pytest.raises(ContractError, match=r"h\.yaml.*'headings'.*at least 1"):
        load_zh_headings(str(path))
    committed = load_zh_headings(load_params().simulation.grader.zh_headings)
    assert {"family", "past_history", "care_so_far"} <= {h.id for h in committed.headings}
