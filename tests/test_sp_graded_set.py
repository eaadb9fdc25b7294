"""The hand-graded SP checklist items (``data/embedded/sp_graded.jsonl``) as a data set.

``test_sp_cases.py`` checks that each item points at a real checklist item; this file
checks the set itself. The first batch (``v1``, 229 short items): its size and balance,
its languages, the shape of the transcripts, and that every hard case looks like its tag,
above all the echoes (a doctor turn that repeats the patient's words), so that a
mislabelled item fails here. Later batches (built from the committed run's transcripts
and the cases' own scripts, graded by ``docs/sp_grading_rubric.md``): each is split by
case, its excerpts are the run's and the scripts' words, and its tags are the rubric's.
"""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from medpref import REPO_ROOT
from medpref.contracts import SP_CATEGORIES, SPGradedItem
from medpref.data.sp_cases import EMBEDDED_SP_GRADED, embedded_sp_cases, embedded_sp_graded
from medpref.simulation.validation import batch_of, case_split, split_of

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
def every_item() -> list[SPGradedItem]:
    return embedded_sp_graded()


@pytest.fixture(scope="module")
def graded(every_item) -> list[SPGradedItem]:
    """The first batch, whose tags name the verdict and whose shapes are checked below."""
    return [g for g in every_item if batch_of(g) == "v1"]


@pytest.fixture(scope="module")
def new_items(graded) -> list[SPGradedItem]:
    return graded[LEGACY:]


# ------------------------------------------------------------------ the file


def test_every_line_states_its_language():
    lines = EMBEDDED_SP_GRADED.read_text(encoding="utf-8").splitlines()
    langs = Counter(json.loads(line).get("lang") for line in lines)
    assert set(langs) == {"en", "zh"}, langs


def test_ids_are_unique_and_sequential(every_item):
    assert [g.id for g in every_item] == [f"g-{i:04d}" for i in range(1, len(every_item) + 1)]


def test_size_languages_and_coverage(graded):
    assert len(graded) == 229
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


# ------------------------------------------------------------------ batches and splits

BATCH = "2026-11-27"
DRINK_BATCH = "2026-11-27-drink"  # alcohol questions vs. thirst (issue 31)
RUN_BATCH = "run-06c7d04"     # the committed run's credits and near misses, blind (issue 41)
CASE_SPLIT_SEED = 31          # the seed the 2026-11-27 batch was split with (issue 31)
RUBRIC = REPO_ROOT / "docs" / "sp_grading_rubric.md"
#: the run the 2026-11-27 batch's run items were cut from (commit 63877ca's stage-06
#: transcripts page, kept because later runs replace reports/06_simulation)
SOURCE_PAGE = REPO_ROOT / "tests" / "fixtures" / "sp_graded_source_transcripts_63877ca.html.gz"
# sentence kinds whose verdict the rubric fixes; the others (a lecture, a run-on list, a
# real question, a first-turn guess ...) are graded either way
ALWAYS_FAIL = {"advice_not_question", "broken_off", "gibberish", "made_up_history",
               "negation", "open_question", "organ_not_test", "other_test", "result_made_up",
               "shares_word", "symptom_stated", "symptom_word", "teaching_complication",
               "test_described", "vague_test", "wrong_diagnosis"}
ALWAYS_PASS = {"test_requested", "names_diagnosis", "lists_items_question"}


@pytest.fixture(scope="module")
def batch(every_item) -> list[SPGradedItem]:
    return [g for g in every_item if g.batch == BATCH]


def test_every_item_records_its_batch_and_split(every_item):
    assert all(g.batch and g.split in ("dev", "test") for g in every_item)
    sizes = Counter(g.batch for g in every_item)
    assert sizes == {"v1": 229, DRINK_BATCH: 4, RUN_BATCH: 414, "run-c4d3594": 408,
                     "run-72d0bfb": 425, "run-d8a243f": 412,
                     BATCH: len(every_item) - 233 - 414 - 408 - 425 - 412}


def test_the_drink_batch_is_dev_items_of_the_thirst_item(every_item):
    """The 2026-11-27-drink batch: questions about alcohol that the grader credited as
    the symptom polydipsia, and one real thirst question that must stay credited, all dev
    items (they motivate a rule change, so they cannot measure it)."""
    drink = [g for g in every_item if g.batch == DRINK_BATCH]
    assert {g.split for g in drink} == {"dev"}
    assert {g.item for g in drink} == {"excessive thirst and drinking (polydipsia)"}
    assert sorted(g.passed for g in drink) == [False, False, False, True]


def test_the_first_batch_keeps_the_split_it_always_had(graded):
    """v1's split is written as the tag-alternating rule gave it, so nothing it reported
    moves: dropping the field and recomputing gives the same halves."""
    unsplit = [g.model_copy(update={"split": None}) for g in graded]
    assert split_of(unsplit) == {g.id: g.split for g in graded}
    assert Counter(g.split for g in graded) == {"dev": 119, "test": 110}


def test_the_new_batch_is_split_by_case_before_grading(batch):
    """All items of a case are in one half, the half the seeded case split gives, and each
    half holds every category and both languages."""
    halves = case_split(embedded_sp_cases(), seed=CASE_SPLIT_SEED)
    assert all(g.split == halves[g.case] for g in batch)
    for part in ("dev", "test"):
        mine = [g for g in batch if g.split == part]
        assert {g.category for g in mine} == set(SP_CATEGORIES), part
        assert {g.lang for g in mine} == {"en", "zh"}, part
        assert len({g.case for g in mine}) >= 8, part


def test_case_split_is_seeded_and_spreads_departments():
    cases = embedded_sp_cases()
    a, b = case_split(cases, seed=CASE_SPLIT_SEED), case_split(cases, seed=CASE_SPLIT_SEED)
    assert a == b and set(a) == {c.id for c in cases}
    assert case_split(cases, seed=CASE_SPLIT_SEED + 1) != a
    for dept in {c.department for c in cases}:
        ids = [c.id for c in cases if c.department == dept and c.lang == "en"]
        assert {a[i] for i in ids} == {"dev", "test"}, dept
    assert {a[c.id] for c in cases if c.lang == "zh"} == {"dev", "test"}


def test_the_new_batch_is_large_and_mostly_the_runs_sentences(batch):
    source = Counter(g.source for g in batch)
    assert source["run"] >= 150 and source["script"] >= 50
    assert {g.case for g in batch} == {c.id for c in embedded_sp_cases()}
    for cat in SP_CATEGORIES:
        verdicts = Counter(g.passed for g in batch if g.category == cat)
        assert verdicts[True] >= 10 and verdicts[False] >= 10, cat
    run = [g for g in batch if g.source == "run"]
    words = [len(t.text.split()) for g in run for t in g.transcript
             if t.role == "doctor" and g.lang == "en"]
    assert sum(words) / len(words) >= 30      # run-on turns, not short templates


def test_run_excerpts_are_the_committed_transcripts_word_for_word(batch, tmp_path):
    """Each run item holds the complaint, then each graded doctor turn with the patient
    turn before it, as the transcripts page of the run it was cut from has them (blind:
    turns only)."""
    import gzip

    from medpref.simulation.handgrading import excerpt, transcripts_from_html

    page_file = tmp_path / "transcripts.html"
    page_file.write_bytes(gzip.decompress(SOURCE_PAGE.read_bytes()))
    page = {(t.case, t.doctor): t for t in transcripts_from_html(page_file)}
    checked = 0
    for g in batch:
        if g.source != "run" or (g.case, g.doctor) not in page:
            continue
        want = excerpt(page[(g.case, g.doctor)].turns, g.turns)
        assert [(t.role, t.text) for t in g.transcript] == [(t.role, t.text) for t in want], g.id
        checked += 1
    assert checked >= 150


def test_script_excerpts_are_the_cases_own_lines(batch):
    cases = {c.id: c for c in embedded_sp_cases()}
    for g in batch:
        if g.source != "script":
            continue
        case = cases[g.case]
        want = [("patient", case.chief_complaint)]
        for i in g.turns:
            want += [("doctor", case.script[i]["doctor"]), ("patient", case.script[i]["patient"])]
        assert [(t.role, t.text) for t in g.transcript] == want, g.id


def test_tags_are_the_rubrics_and_fixed_kinds_agree_with_their_verdict(batch):
    rubric = RUBRIC.read_text(encoding="utf-8")
    for g in batch:
        assert f"`{g.tag}`" in rubric, (g.id, g.tag)
        assert g.why.strip(), g.id
        if g.tag in ALWAYS_FAIL:
            assert not g.passed, g.id
        if g.tag in ALWAYS_PASS:
            assert g.passed, g.id
        if g.tag == "guessed_first":
            assert g.turns == [1] and g.category == "diseases", g.id
    kinds = Counter(g.tag for g in batch)
    for tag in ("lecture_names_in_passing", "run_on_list", "made_up_history", "negation",
                "teaching_complication", "real_question", "organ_not_test",
                "names_diagnosis", "guessed_first"):
        assert kinds[tag] >= 1, tag
    both = {t for t in kinds if {g.passed for g in batch if g.tag == t} == {True, False}}
    assert {"lecture_names_in_passing", "run_on_list", "real_question"} <= both


def test_the_issues_sentences_are_graded(batch):
    """The sentences issue 31 quotes are items, with the verdict the rubric gives."""
    def verdict(words, category):
        found = [g.passed for g in batch if g.category == category and any(
            words in t.text for t in g.transcript if t.role == "doctor")]
        assert found, words
        return set(found)

    assert verdict("he had asthma attacks while sleeping", "diseases") == {False}
    assert verdict("your anxiety level hasn't decreased", "diseases") == {False}
    assert verdict("due to endometriosis or other conditions such as fibroids",
                   "diseases") == {True}
    assert verdict("we need an ultrasound done by specialist", "tests") == {True}
    assert verdict("Have your kidneys been working badly lately?", "tests") == {False}
    assert verdict("Have I had any colds recently?", "symptoms") == {False}


# ------------------------------------------------------------------ the run batch (issue 41)

@pytest.fixture(scope="module")
def run_batch(every_item) -> list[SPGradedItem]:
    return [g for g in every_item if g.batch == RUN_BATCH]


def test_the_run_batch_is_split_by_case_with_the_same_seed(run_batch):
    """A case sits in the same half in every later batch, so a rule built on dev items
    never saw a test case's sentences."""
    halves = case_split(embedded_sp_cases(), seed=CASE_SPLIT_SEED)
    assert all(g.split == halves[g.case] for g in run_batch)
    for part in ("dev", "test"):
        mine = [g for g in run_batch if g.split == part]
        assert {g.category for g in mine} == set(SP_CATEGORIES), part
        assert len(mine) >= 180, part


#: the commit whose stage-06 records batch run-06c7d04 was drawn from (later runs replace
#: reports/06_simulation; git keeps them)
RUN_BATCH_RECORDS = "a6d9a8b"


def run_records(name: str) -> list[dict]:
    """A stage-06 record file as ``RUN_BATCH_RECORDS`` committed it."""
    import subprocess

    shown = subprocess.run(["git", "show", f"{RUN_BATCH_RECORDS}:reports/06_simulation/"
                            f"records/{name}"], cwd=REPO_ROOT, capture_output=True, text=True)
    assert shown.returncode == 0, (f"records/{name} at {RUN_BATCH_RECORDS}: "
                                   f"{shown.stderr.strip()} (needs the repository's history)")
    return [json.loads(line) for line in shown.stdout.splitlines() if line]


def test_the_run_batch_holds_the_committed_runs_turns_and_every_credit(run_batch):
    """Each item's doctor turn is the run's turn word for word, after the case's complaint
    and the patient turn before it; every credit a model doctor earned in that run's grades
    is one item (scripts/grader_pairs.py), so the run is validated on all its credits."""
    consults = {(r["case"], r["doctor"]): r for r in run_records("consultations.jsonl")}
    cases = {c.id: c for c in embedded_sp_cases()}
    for g in run_batch:
        turns = consults[(g.case, g.doctor)]["turns"]
        assert consults[(g.case, g.doctor)]["kind"] == "model", g.id
        assert g.transcript[0].text == cases[g.case].chief_complaint, g.id
        assert g.transcript[-1].text == turns[g.turns[0]]["text"], g.id
        assert g.transcript[-2].text == turns[g.turns[0] - 1]["text"], g.id
        assert g.why.strip(), g.id
    kinds = {(r["case"], r["doctor"]): r["kind"] for r in consults.values()}
    credits = {(r["case"], r["doctor"], r["item"]) for r in run_records("grades.jsonl")
               if r["passed"] and kinds[(r["case"], r["doctor"])] == "model"}
    tagged = {(g.case, g.doctor, g.item) for g in run_batch if g.tag == "run_credited"}
    assert tagged == credits and len(credits) == 80
    assert Counter(g.tag for g in run_batch)["run_uncredited"] >= len(credits)


# ------------------------------------------------------------------ the change record

CHANGES = REPO_ROOT / "data" / "embedded" / "sp_grader_changes.yaml"


def test_the_change_record_names_the_items_each_change_saw(every_item):
    """One entry per rule change, the baseline first; each names its commit, what changed,
    why, the dev items that motivated it, and how many items of each batch and split
    existed then (never more than exist now)."""
    import yaml

    entries = yaml.safe_load(CHANGES.read_text(encoding="utf-8"))["changes"]
    assert entries[0]["id"] == "baseline" and entries[0]["motivated_by"] == []
    now = Counter((batch_of(g), g.split) for g in every_item)
    split = {g.id: g.split for g in every_item}
    for e in entries:
        assert {"id", "date", "commit", "change", "batches", "motivated_by", "why"} <= set(e)
        assert re.fullmatch(r"[0-9a-f]{7,40}", str(e["commit"])), e["id"]
        for b, parts in e["batches"].items():
            for part, n in parts.items():
                assert 0 < n <= now[(b, part)], (e["id"], b, part)
        assert all(split[i] == "dev" for i in e["motivated_by"]), e["id"]
    assert len({e["id"] for e in entries}) == len(entries)
