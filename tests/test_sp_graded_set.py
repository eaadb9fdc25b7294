"""The hand-graded SP checklist items (``data/embedded/sp_graded.jsonl``) as a data set.

``test_sp_cases.py`` checks that each item points at a real checklist item; this file
checks the set itself: its size and balance, its languages, the shape of the
transcripts, and that every hard case looks like its tag, above all the echoes (a doctor
turn that repeats the patient's words), so that a mislabelled item fails here.
"""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from medpref.contracts import SP_CATEGORIES, SPGradedItem
from medpref.data.sp_cases import EMBEDDED_SP_GRADED, embedded_sp_cases, embedded_sp_graded

LEGACY = 49  # g-0001 .. g-0049 predate the patient-first form and the new tags
PASS_TAGS = {"asked", "recommended", "named", "synonym", "echo_then_asks", "three_diseases"}
FAIL_TAGS = {"echo_negative", "patient_volunteered", "four_diseases", "not_mentioned",
             "past_question", "declined_test",
             # legacy tags
             "four_or_more_diseases", "near_miss", "negated", "not_asked", "not_recommended",
             "not_named"}
ECHO_TAGS = {"echo_negative", "echo_then_asks"}

EN_STOP = set("""
the and you your yours have has had been for with that this what are was were but not all
any can did does she her his him they them its about just some now yes from when then there
here will would could also very into than too how who why our out get got let don didn
isn aren wasn one more most well yet like
""".split())
ZH_STOP = {"医生", "孩子", "我们", "您的", "一下", "是不", "不是", "有没", "没有"}
HAN = re.compile(r"[\u4e00-\u9fff]+")
SENTENCE = re.compile(r"[.?!。？！]")
CANDIDATE_SEP = re.compile(r",|，|、|;|；| or |或者|或|还是")
NEGATION = re.compile(r"n't|\bnot\b|\bno need\b|不用|不需要|没必要|不必")


def content_units(text: str, lang: str) -> set[str]:
    """Words of three letters or more, less function words (en); Han bigrams (zh)."""
    if lang == "zh":
        grams = {run[i:i + 2] for run in HAN.findall(text) for i in range(len(run) - 1)}
        return grams - ZH_STOP
    return {w for w in re.findall(r"[a-z0-9]+", text.lower())
            if len(w) >= 3 and w not in EN_STOP}


def echo_overlap(item: SPGradedItem) -> int:
    """Most content units one doctor turn shares with any earlier patient turn."""
    best = 0
    for i, turn in enumerate(item.transcript):
        if turn.role != "doctor":
            continue
        mine = content_units(turn.text, item.lang)
        for earlier in item.transcript[:i]:
            if earlier.role == "patient":
                best = max(best, len(mine & content_units(earlier.text, item.lang)))
    return best


def most_candidates(text: str) -> int:
    """Largest number of comma/or-separated pieces in one sentence of ``text``."""
    return max(len([p for p in CANDIDATE_SEP.split(s) if p.strip()])
               for s in SENTENCE.split(text))


@pytest.fixture(scope="module")
def graded() -> list[SPGradedItem]:
    return embedded_sp_graded()


@pytest.fixture(scope="module")
def new_items(graded) -> list[SPGradedItem]:
    return graded[LEGACY:]


# ------------------------------------------------------------------ the file


def test_every_line_states_its_language():
    lines = EMBEDDED_SP_GRADED.read_text(encoding="utf-8").splitlines()
    langs = Counter(json.loads(line).get("lang") for line in lines)
    assert set(langs) == {"en", "zh"}, langs


def test_ids_are_unique_and_sequential(graded):
    assert [g.id for g in graded] == [f"g-{i:04d}" for i in range(1, len(graded) + 1)]


def test_size_languages_and_coverage(graded):
    assert len(graded) >= 200
    langs = Counter(g.lang for g in graded)
    assert langs["zh"] >= 40 and langs["en"] >= 150, langs
    pairs = {(g.lang, g.category) for g in graded}
    assert pairs == {(lang, c) for lang in ("en", "zh") for c in SP_CATEGORIES}


def test_language_label_matches_text_and_case(graded):
    """A ``zh`` item is written in Chinese about a Chinese case; an ``en`` one holds no Han."""
    case_lang = {c.id: c.lang for c in embedded_sp_cases()}
    for g in graded:
        assert g.lang == case_lang[g.case], g.id
        has_han = [bool(HAN.search(t.text)) for t in g.transcript]
        assert all(has_han) if g.lang == "zh" else not any(has_han), g.id


def test_pass_share_is_balanced(graded):
    share = sum(g.passed for g in graded) / len(graded)
    assert 0.35 <= share <= 0.65, share
    for lang in ("en", "zh"):
        part = [g.passed for g in graded if g.lang == lang]
        assert 0.3 <= sum(part) / len(part) <= 0.7, lang


def test_labels_agree_with_tags(graded):
    for g in graded:
        assert g.tag in PASS_TAGS | FAIL_TAGS, (g.id, g.tag)
        assert g.passed == (g.tag in PASS_TAGS), g.id
        assert g.why, g.id


def test_every_new_tag_is_used_in_both_languages(new_items):
    tags = {(g.lang, g.tag) for g in new_items}
    for tag in PASS_TAGS | (FAIL_TAGS & {t for _, t in tags}):
        assert ("en", tag) in tags and ("zh", tag) in tags, tag


# ------------------------------------------------------------------ transcripts


def test_transcripts_alternate(graded):
    for g in graded:
        roles = [t.role for t in g.transcript]
        assert all(a != b for a, b in zip(roles, roles[1:])), g.id


def test_new_transcripts_open_with_the_patient(new_items):
    for g in new_items:
        assert 2 <= len(g.transcript) <= 8, g.id
        assert g.transcript[0].role == "patient", g.id


# ------------------------------------------------------------------ echoes


def test_echo_check_tells_an_echo_from_a_question():
    def item(lang, patient, doctor):
        return SPGradedItem(id="g-x", case="sp-x", category="symptoms", item="x", passed=False,
                            lang=lang, transcript=[{"role": "patient", "text": patient},
                                                   {"role": "doctor", "text": doctor}])

    assert echo_overlap(item("en", "I've had chest pain since Monday.",
                             "So you've had chest pain since Monday.")) >= 2
    assert echo_overlap(item("en", "I've had chest pain since Monday.",
                             "Does anything make it worse, like walking uphill?")) < 2
    assert echo_overlap(item("zh", "我咳嗽一个星期了。", "您咳嗽一个星期了。")) >= 2
    assert echo_overlap(item("zh", "孩子发烧两天了。", "孩子吐过吗？")) < 2


def test_echo_items_are_many_and_failing(graded):
    echoes = [g for g in graded if g.tag == "echo_negative"]
    assert len(echoes) >= 50
    assert not any(g.passed for g in echoes)
    assert {g.category for g in echoes} == set(SP_CATEGORIES)
    assert Counter(g.lang for g in echoes)["zh"] >= 10


def test_echo_items_really_echo_the_patient(graded):
    for g in graded:
        if g.tag in ECHO_TAGS:
            assert echo_overlap(g) >= 2, g.id


def test_some_echoes_repeat_the_item_word_for_word(graded):
    """The hardest echoes: the patient says the checklist item itself."""
    verbatim = [g for g in graded if g.tag == "echo_negative"
                and any(t.role == "patient" and g.item.lower() in t.text.lower()
                        for t in g.transcript)]
    assert len(verbatim) >= 5


# ------------------------------------------------------------------ other hard cases


def test_disease_lists_are_counted_right(graded):
    for g in graded:
        doctor = [t.text for t in g.transcript if t.role == "doctor"]
        if g.tag == "four_diseases":
            assert g.category == "diseases", g.id
            assert max(most_candidates(t) for t in doctor) >= 4, g.id
        if g.tag == "three_diseases":
            assert g.category == "diseases", g.id
            assert max(most_candidates(t) for t in doctor) <= 3, g.id


def test_candidate_counter_on_worked_examples():
    assert most_candidates("It could be flu, a cold, COVID or sinusitis.") == 4
    assert most_candidates("Probably appendicitis. A stone or a cyst are less likely.") == 2
    assert most_candidates("可能是胃炎、溃疡、胆囊炎或者胰腺炎。") == 4


def test_declined_tests_say_no(graded):
    for g in graded:
        if g.tag == "declined_test":
            assert g.category == "tests", g.id
            assert any(NEGATION.search(t.text) for t in g.transcript if t.role == "doctor"), g.id


def test_volunteered_items_are_not_echoes(graded):
    """Volunteered: the patient offers it and the doctor neither asks nor repeats it."""
    for g in graded:
        if g.tag == "patient_volunteered" and g.transcript[0].role == "patient":
            assert echo_overlap(g) < 2, g.id
