"""Stage 06 (SP test): retrieval, the patient loop, Eq. 6, GPD, parsers — scripted models."""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pandas as pd
import pytest

from medpref.contracts import SPCase, Turn
from medpref.llm.client import LLMClient
from medpref.llm.ledger import Ledger
from medpref.llm.scripted import ScriptedBackend
from medpref.llm.types import CallSpec, GenerationParams
from medpref.prompts import load_prompt
from medpref.simulation import consult, grading, nextturn, tables
from medpref.simulation.config import SimulationParams
from medpref.simulation.knowledge import (
    build_chunks,
    build_knowledge_bases,
    chunk_text,
    count_tokens,
    retrieval_query,
)
from medpref.simulation.patient import parse_patient_answer, patient_fidelity

END = "(End of Conversation)"

JUDGE_CALL = CallSpec("judge", "", 8, grading.ANSWER_PREFIX)  # the grader's budget


def toy_encode(texts):
    """Hashed bag of words (and Han characters), L2-normalised."""
    vecs = np.zeros((len(texts), 512), dtype=np.float32)
    for i, t in enumerate(texts):
        for w in re.findall(r"[a-z]+|[\u4e00-\u9fff]", t.lower()):
            vecs[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % 512] += 1
    return vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-9)


def case(cid="sp-t1", dept="internal_medicine", tests=("chest X-ray",), lang="en"):
    return SPCase(
        id=cid, department=dept, lang=lang, chief_complaint="I have had a cough for two weeks.",
        patient_info={"Present history": "Dry cough for two weeks, worse at night.",
                      "Past history": "No asthma. Smokes ten cigarettes a day.",
                      "Tests": "Chest X-ray: patchy shadow in the right lower lobe."},
        script=[{"doctor": "Do you have a fever?",
                 "patient": "Yes, up to 38.5 degrees since Monday."},
                {"doctor": "Do you cough up phlegm?",
                 "patient": "A little yellow phlegm in the morning."},
                {"doctor": "Do you have pets at home?", "patient": "We have an old cat."}],
        checklist={"symptoms": ["fever", "phlegm"], "tests": list(tests),
                   "diseases": ["pneumonia"]})


def scripted_sim_stage(tmp_path, monkeypatch, clients):
    """Stage 06 whose roles are the scripted ``clients``, whose folders live under
    ``tmp_path`` (``reports/06_simulation``; the grading writes ``reports/06_sp_grading``)
    and whose MiniLM is :func:`toy_encode`: call it with the params."""
    from medpref import embedding
    from medpref.stagekit import Stage

    class TmpStage(Stage):
        data_dir = property(lambda self: tmp_path / "data")
        reports_dir = property(lambda self: tmp_path / "reports" / "06_simulation")

        def role(self, name, **overrides):
            return clients[name]

    monkeypatch.setattr(embedding, "load_encoder", lambda *a, **k: toy_encode)
    return lambda params: TmpStage(name="06_simulation", params=params)


def client(responder, role="x", option_responder=None):
    backend = ScriptedBackend(responder, name=role, option_responder=option_responder)
    return LLMClient(role, backend, GenerationParams(max_new_tokens=32), ledger=Ledger("t"))


# -- knowledge base and retrieval -----------------------------------------------------------

def test_chunks_respect_the_token_cap_and_count_han_characters_one_each():
    assert count_tokens("胸痛三天") == 4 and count_tokens("chest pain, 3 days") == 4
    long = "Present history: " + " ".join(f"Sentence number {i} is here." for i in range(60))
    chunks = chunk_text(long, 32)
    assert len(chunks) > 1 and all(count_tokens(c) <= 32 for c in chunks)
    assert all(c.startswith("Present history: ") for c in chunks)
    zh = "现病史: " + "患者三天前无明显诱因出现胸痛。" * 20
    zchunks = chunk_text(zh, 40)
    assert all(count_tokens(c) <= 40 for c in zchunks) and len(zchunks) >= 7


def test_retrieval_returns_the_chunk_that_answers_a_scripted_question():
    kb = build_knowledge_bases([case()], toy_encode, 128)["sp-t1"]
    turns = [Turn(role="patient", text="I have a cough."),
             Turn(role="doctor", text="Do you have pets at home, a cat or a dog?")]
    top = kb.top(toy_encode([retrieval_query(turns)])[0], 4)
    assert "old cat" in kb.chunks[top[0]]
    # the chief complaint (the patient's opening words), three info sections, three Q-A pairs
    assert len(build_chunks(case(), 128)) == 7


def test_query_uses_the_last_two_rounds_only():
    turns = [Turn(role="patient", text="opening"), Turn(role="doctor", text="d1"),
             Turn(role="patient", text="p1"), Turn(role="doctor", text="d2"),
             Turn(role="patient", text="p2"), Turn(role="doctor", text="d3")]
    q = retrieval_query(turns, 2)
    assert q.splitlines() == ["Doctor: d2", "Patient: p2", "Doctor: d3"]
    assert "d1" not in q and "opening" not in q
    assert retrieval_query(turns[:2], 2) == "Patient: opening\nDoctor: d1"
    with pytest.raises(ValueError):
        retrieval_query(turns[:3])


@pytest.mark.slow
def test_minilm_retrieval_finds_the_answer_chunk():
    from medpref import REPO_ROOT
    from medpref.embedding import load_encoder

    encode = load_encoder(REPO_ROOT / "models" / "all-minilm-l6-v2")
    kb = build_knowledge_bases([case()], encode, 128)["sp-t1"]
    q = retrieval_query([Turn(role="patient", text="I have a cough."),
                         Turn(role="doctor", text="Have you had a temperature?")])
    assert "38.5" in kb.chunks[kb.top(encode([q])[0], 4)[0]]


# -- parsers --------------------------------------------------------------------------------

def test_patient_answer_parser():
    a = parse_patient_answer("Patient: Yes, since Monday. It is bad. I also vomit.\nDoctor: ok",
                             END, 2)
    assert a.text == "Yes, since Monday. It is bad." and not a.ended
    b = parse_patient_answer("Thank you, doctor. (End of Conversation)", END, 2)
    assert b.ended and b.text == "Thank you, doctor."
    c = parse_patient_answer("谢谢医生。（End of Conversation）", END, 2)
    assert c.ended and c.text == "谢谢医生。"
    assert parse_patient_answer("Doctor: what else?", END, 2).empty
    d = parse_patient_answer("Pain since yesterday.\n\nPain since yesterday.\n\nYour answer as "
                             "the patient:\nmore", END, 2)
    assert d.text == "Pain since yesterday."
    assert parse_patient_answer("", END, 2).empty


def test_doctor_answer_parser_and_judge_parsers_with_unparsable_answers():
    assert consult.parse_doctor_answer("Doctor: Any fever?\nPatient: yes") == "Any fever?"
    assert grading.parse_yes_no(" Yes, the doctor asked.") is True
    assert grading.parse_yes_no("Answer: no") is False
    assert grading.parse_yes_no("否") is False and grading.parse_yes_no("是的") is True
    assert grading.parse_yes_no("The doctor might have") is None
    assert grading.parse_yes_no(None) is None
    assert grading.parse_count("There are 3 diseases") == 3
    assert grading.parse_count("two") == 2 and grading.parse_count("several") is None
    assert grading.parse_implication(" B. Partially") == "partially"
    assert grading.parse_implication("Not at all") == "not"
    assert grading.parse_implication("I think so") is None


def test_heuristic_disease_count():
    turn = "It could be pneumonia, bronchitis, asthma or lung cancer. Please get an X-ray."
    assert grading.heuristic_disease_count(turn, "pneumonia") == 4
    assert grading.heuristic_disease_count("This is pneumonia.", "pneumonia") == 1


# -- the consultation loop ------------------------------------------------------------------

def make_setup(patient, rounds=5):
    from medpref.simulation.config import PatientParams
    from medpref.simulation.patients import PatientContext, build_patient

    cases = [case("sp-a"), case("sp-b"), case("sp-c")]
    kbs = build_knowledge_bases(cases, toy_encode, 128)
    params = PatientParams(kind="llm", top_k=4, query_rounds=2, end_marker=END,
                           max_sentences=2)
    llm_patient = build_patient("llm", PatientContext(
        params, {c.id: c for c in cases}, kbs, toy_encode, load_prompt("sp_patient"),
        lambda: patient, SimulationParams().call("patient", max_new_tokens=32)))
    return cases, consult.SimulationSetup(
        patient=llm_patient, doctor_template=load_prompt("policy_doctor"), rounds=rounds)


def test_lockstep_simulation_respects_the_round_cap_and_the_end_marker():
    def patient_says(req):
        text = req.messages[-1]["content"]
        if "Doctor: Goodbye" in text:
            return "Thanks, bye. (End of Conversation)"
        return "Patient: I had a fever. Also something. And more. Doctor: fine"

    def doctor_says(req):
        n_assistant = sum(m["role"] == "assistant" for m in req.messages)
        first_user = req.messages[1]["content"]
        if "sp-b" in first_user and n_assistant == 1:
            return "Goodbye"
        return f"Question {n_assistant + 1}: any fever?"

    patient = client(patient_says, "patient")
    cases, setup = make_setup(patient, rounds=5)
    # the case id in the opening tells the scripted doctor which case it is in
    cases = [c.model_copy(update={"chief_complaint": f"{c.id}: cough"}) for c in cases]
    doctor_backend = ScriptedBackend(doctor_says, name="doc")
    doctor = LLMClient("doctor", doctor_backend, GenerationParams(max_new_tokens=32),
                       ledger=Ledger("t"))
    sizes = []
    orig = doctor_backend.generate
    doctor_backend.generate = lambda reqs, cb=None: (sizes.append(len(reqs)), orig(reqs, cb))[1]
    out = consult.simulate(cases, consult.ModelDoctor(
        "doc", doctor, CallSpec("doctor", "policy_doctor", 32), setup), setup)
    by_id = {c.case_id: c for c in out}
    assert by_id["sp-a"].rounds == 5 and by_id["sp-a"].ended_by == "rounds"
    assert by_id["sp-b"].rounds == 2 and by_id["sp-b"].ended_by == "end_marker"
    assert by_id["sp-b"].turns[-1].text == "Thanks, bye."
    assert sizes == [3, 3, 2, 2, 2]       # lock-step: one batch per round over open cases
    assert by_id["sp-a"].turns[2].text == "I had a fever. Also something."   # two sentences
    step = by_id["sp-a"].steps[1]
    assert step["speaker"] == "patient" and len(step["chunks"]) == 4
    assert step["query"].startswith("Patient: sp-a: cough")         # round 1: opening + D1
    q3 = by_id["sp-a"].steps[5]["query"]                               # round 3: D2, P2, D3
    assert q3.splitlines()[0] == "Doctor: Question 2: any fever?" and "sp-a: cough" not in q3
    assert q3.splitlines()[-1] == "Doctor: Question 3: any fever?"
    prompt = patient.backend.requests[-1].messages[-1]["content"]      # what the patient saw
    assert "Doctor: Question 5: any fever?" in prompt and "[4] " in prompt


def test_doctor_messages_alternate_roles():
    msgs = consult.doctor_messages(load_prompt("policy_doctor"), [
        Turn(role="patient", text="a"), Turn(role="patient", text="b"),
        Turn(role="doctor", text="c")])
    assert [m["role"] for m in msgs] == ["system", "user", "assistant"]
    assert msgs[1]["content"] == "a\nb"


def test_patient_fidelity_counts_volunteered_and_unsupported_sentences():
    kb = build_knowledge_bases([case()], toy_encode, 128)["sp-t1"]
    turns = [Turn(role="patient", text="cough"),
             Turn(role="doctor", text="Do you have a fever?"),
             Turn(role="patient", text="Yes, up to 38.5 degrees since Monday. "
                                       "My brother plays football in Madrid.")]
    fid = patient_fidelity(turns, kb, toy_encode, support=0.45, relevance=0.25)
    assert fid.sentences == 2 and fid.unsupported == 1 and fid.volunteered == 0
    turns[1] = Turn(role="doctor", text="Is the fever high?")
    turns[2] = Turn(role="patient", text="We have an old cat.")
    fid = patient_fidelity(turns, kb, toy_encode, support=0.45, relevance=0.25)
    assert fid.volunteered == 1 and fid.unsupported == 0


def test_a_short_scripted_answer_is_the_cases_own_text_whatever_its_embedding():
    """The extractive patient's "No." is a scripted answer: supported, though a bare "No."
    is close to nothing in an embedding (the committed run once stopped on it)."""
    c = case()
    c.script.append({"doctor": "Any chest pain?", "patient": "No."})
    kb = build_knowledge_bases([c], toy_encode, 128)["sp-t1"]
    assert "no" in kb.verbatim and "a little yellow phlegm in the morning" in kb.verbatim
    turns = [Turn(role="patient", text="cough"), Turn(role="doctor", text="Any chest pain?"),
             Turn(role="patient", text="No.")]
    strict = patient_fidelity(turns, kb, lambda texts: toy_encode(texts) * 0.0, support=0.45,
                              relevance=0.25)   # an encoder that matches nothing
    assert strict.sentences == 1 and strict.unsupported == 0
    turns[2] = Turn(role="patient", text="No, never.")    # not the case's sentence
    assert patient_fidelity(turns, kb, lambda texts: toy_encode(texts) * 0.0, support=0.45,
                            relevance=0.25).unsupported == 1


def test_the_fidelity_guard_pools_small_doctors_and_checks_large_ones():
    from medpref.simulation.behaviour import check_fidelity
    from medpref.stagekit import StageFailed

    def row(doctor, sentences, unsupported):
        return {"doctor": doctor, "sentences": sentences, "unsupported": unsupported,
                "unsupported_at": ["made up"] * unsupported}

    check_fidelity([row("big", 40, 2), row("tiny", 1, 1)], 0.1, min_sentences=10)
    with pytest.raises(StageFailed, match="big: 6 of 40"):
        check_fidelity([row("big", 40, 6), row("tiny", 1, 0)], 0.1, min_sentences=10)
    with pytest.raises(StageFailed, match="all doctors: 3 of 12"):
        check_fidelity([row("a", 6, 2), row("b", 6, 1)], 0.1, min_sentences=10)
    # the pooled check has the same minimum: 17 NEJM cases whose only patient sentence
    # over 85 turns was 1 unsupported one no longer stop the run on 1 of 1 (issue 31)
    check_fidelity([row("base", 1, 1)], 0.1, min_sentences=10)
    check_fidelity([row("a", 5, 2), row("b", 4, 1)], 0.1, min_sentences=10)


# -- Eq. 6 -----------------------------------------------------------------------------------

def keyword_judge(req):
    """Says yes when the item's words appear in a doctor line of the transcript."""
    text = "\n".join(m["content"] for m in req.messages)
    if "How many different candidate diseases" in text:
        turn = text.split("Doctor's reply: ")[1].split("\n")[0]
        return str(len(re.findall(r"pneumonia|bronchitis|asthma|lung cancer", turn)))
    if "Predicted reply:" in text:
        return "C"
    item = re.search(r"Checklist item \([^)]*\): (.+)", text).group(1).strip()
    doctor_lines = [ln for ln in text.splitlines() if ln.startswith("Doctor:")]
    if item == "phlegm":
        return "Perhaps."                       # unparsable: the item abstains
    return "yes" if any(item.lower() in ln.lower() for ln in doctor_lines) else "no"


def grading_setup(judge_client, encode=toy_encode):
    return grading.GradingSetup(
        judge=grading.Judge(judge_client, JUDGE_CALL, mode="generate"),
        templates=[load_prompt("sp_grade_turns_first"), load_prompt("sp_grade_item_first")],
        count_template=load_prompt("sp_count_diseases"), encode=encode,
        pass_threshold=0.5, max_candidates=4, embedding_threshold=0.6)


def test_eq6_on_a_hand_example_with_an_empty_category_and_a_four_disease_answer():
    c1, c2 = case("sp-1", tests=()), case("sp-2")   # sp-1 has no tests: left out of Test
    t1 = [Turn(role="patient", text="cough"), Turn(role="doctor", text="Do you have a fever?"),
          Turn(role="patient", text="yes"), Turn(role="doctor", text="This is pneumonia.")]
    t2 = [Turn(role="patient", text="cough"),
          Turn(role="doctor", text="It could be pneumonia, bronchitis, asthma or lung cancer."),
          Turn(role="patient", text="ok"), Turn(role="doctor", text="Get a chest X-ray.")]
    consults = [consult.Consultation("sp-1", "internal_medicine", "en", "doc", "m", t1),
                consult.Consultation("sp-2", "surgery", "en", "doc", "m", t2)]
    grades = grading.grade_consultations(consults, {"sp-1": c1, "sp-2": c2},
                                         grading_setup(client(keyword_judge, "judge")))
    g = {(x.case, x.item): x for x in grades}
    assert g[("sp-1", "fever")].passed and not g[("sp-2", "fever")].passed
    assert g[("sp-1", "phlegm")].method == "abstain" and g[("sp-1", "phlegm")].passed is None
    assert g[("sp-1", "pneumonia")].passed and g[("sp-1", "pneumonia")].candidates == [1]
    assert g[("sp-2", "pneumonia")].turns_named == [0]
    assert g[("sp-2", "pneumonia")].candidates == [4] and not g[("sp-2", "pneumonia")].passed
    assert g[("sp-2", "chest X-ray")].passed
    scores = grading.case_scores(grades, ["sp-1", "sp-2"])
    # phlegm abstained: left out of c and m (sp-1: fever 1/1; sp-2: fever 0/1)
    assert scores[0] == {"case": "sp-1", "symptoms": 1.0, "tests": None, "diseases": 1.0}
    assert scores[1] == {"case": "sp-2", "symptoms": 0.0, "tests": 1.0, "diseases": 0.0}
    s = grading.eq6(scores)
    assert s["symptoms"]["score"] == pytest.approx(50.0)
    assert s["tests"] == {"score": 100.0, "n": 1, "empty": 1}
    assert s["diseases"]["score"] == pytest.approx(50.0)
    t2_table = tables.table2([{"doctor": "doc", "department": c.department,
                               **{k: sc[k] for k in grading.CATEGORIES}}
                              for c, sc in zip(consults, scores)])
    row = t2_table.iloc[0]
    assert row["ALL Sym."] == 50.0 and row["ALL Test"] == 100.0 and row["ALL Dis."] == 50.0
    assert row["internal_medicine empty"] == "Test 1" and np.isnan(row["internal_medicine Test"])


def test_disease_rule_and_kappa():
    assert grading.disease_passes([0, 1], [5, 3], 4)
    assert not grading.disease_passes([0], [4], 4)
    assert not grading.disease_passes([], [], 4)
    # 8 items: agree on 6; p_o = .75, p_e = .5 → κ = .5
    a = [True, True, True, True, False, False, False, False]
    b = [True, True, True, False, False, False, False, True]
    from medpref.metrics.intervals import cohen_kappa

    assert cohen_kappa(a, b) == pytest.approx(0.5)


def test_options_mode_judge_reads_p_yes_and_drops_low_mass():
    def options(prompt, opts, prefix):
        text = prompt[-1]["content"]
        if "fever" in text:
            return {" yes": 0.5, " Yes": 0.4, " no": 0.1, " No": 0.0}
        return {" yes": 0.2, " Yes": 0.0, " no": 0.7, " No": 0.1}

    backend = ScriptedBackend(lambda r: "", option_responder=options)
    judge = grading.Judge(LLMClient("judge", backend, GenerationParams(), ledger=Ledger("t")),
                          JUDGE_CALL)
    res = judge.yes_probability([[{"role": "user", "content": "fever"}],
                                 [{"role": "user", "content": "other"}]])
    assert [r[0] for r in res] == [pytest.approx(0.9), pytest.approx(0.2)]


# -- next turn and GPD ----------------------------------------------------------------------

def test_gpt_distance_on_a_hand_set():
    labels = ["fully", "partially", "not", "not", None, "fully"]
    g = nextturn.gpt_distance(labels)
    assert g["gpd"] == pytest.approx((2 * 2 + 1) / 5)
    assert (g["fully"], g["partially"], g["not"], g["unusable"]) == (2, 1, 2, 1)
    assert np.isnan(nextturn.gpt_distance([None])["gpd"])


def test_next_turn_items_cut_before_answering_doctor_turns():
    from medpref.contracts import Dialogue

    d = Dialogue(id="d1", turns=[Turn(role="doctor", text="hi"), Turn(role="patient", text="p"),
                                 Turn(role="doctor", text="d"), Turn(role="patient", text="p2"),
                                 Turn(role="doctor", text="d2")])
    items = nextturn.next_turn_items([d], 5, 0, 8)
    assert [it.id for it in items] == ["d1@2", "d1@4"]
    assert items[0].reference == "d" and items[0].history[-1].text == "p"


def test_next_turn_question_share_intervals_and_paired_verdicts():
    def rows(doctor, preds, labels):
        return [{"doctor": doctor, "item": f"d{i}@2", "prediction": p, "implication": lab,
                 "rougeL_f1": 0.2, "bleu4": 0.1}
                for i, (p, lab) in enumerate(zip(preds, labels))]

    asks = ["Any fever?"] * 12
    tells = ["Take rest."] * 12
    sft = rows("sft", tells, ["not"] * 12)
    better = rows("better", asks, ["fully"] * 12)
    same = rows("same", tells, ["not"] * 12)
    s = nextturn.summarise("better", better, n_boot=500)
    assert s["question_share"] == 1.0 and s["gpd"] == 0.0 and s["gpd_lo"] == s["gpd_hi"] == 0.0
    assert nextturn.summarise("sft", sft, n_boot=500)["question_share"] == 0.0
    paired = nextturn.paired_table(sft + better + same, "sft", n_boot=500)
    got = paired.set_index(["doctor", "metric"])
    assert got.loc[("better", "gpd"), "diff"] == -2.0
    assert got.loc[("better", "gpd"), "verdict"] == "lower"
    assert got.loc[("better", "question"), "diff"] == 100.0
    assert got.loc[("same", "gpd"), "verdict"] == "no detectable difference"
    assert set(paired["items"]) == {12}
    # without the reference doctor there is nothing to pair
    assert nextturn.paired_table(better, "sft").empty


#: the cells stage 05 recorded for the grid policies (names play no part)
GRID = {"grid_avg_1": ("avg", 1), "grid_dep_1": ("dep", 1), "grid_dep_2": ("dep", 2),
        "grid_dep_3": ("dep", 3)}


def test_table3_grid_places_policies_by_their_recorded_cells():
    t2 = pd.DataFrame([{"doctor": "base", "ALL Sym.": 1.0, "ALL Test": 2.0, "ALL Dis.": 3.0},
                       {"doctor": "grid_avg_1",
                        "ALL Sym.": 10.0, "ALL Test": 20.0, "ALL Dis.": 30.0},
                       {"doctor": "grid_dep_3",
                        "ALL Sym.": 11.0, "ALL Test": 21.0, "ALL Dis.": 31.0}])
    grid = tables.table3_grid(t2, GRID)
    avg_sym = grid[(grid.weighting == "avg") & (grid.metric == "Sym.")].iloc[0]
    assert avg_sym["k=1"] == 10.0 and np.isnan(avg_sym["k=3"])
    assert set(grid.weighting) == {"avg", "dep"}


def per_case_of(doctor, symptoms, tests, diseases):
    return [{"doctor": doctor, "case": f"c{i}", "symptoms": s, "tests": t, "diseases": d}
            for i, (s, t, d) in enumerate(zip(symptoms, tests, diseases))]


def test_table3_companion_pairs_each_cell_with_avg_and_says_no_detectable_difference():
    nan = float("nan")
    per_case = pd.DataFrame(
        per_case_of("grid_avg_1", [0] * 6, [1, 0, 1, 0, 1, 0], [1] * 6)
        + per_case_of("grid_dep_1", [1, 1, 1, 1, 0.5, 1], [0, 1, 0, 1, 0, 1],
                      [0, 0, 0, 0, 0, nan])
        + per_case_of("grid_dep_2", [1] * 6, [1] * 6, [1] * 6)
        + per_case_of("sft", [1] * 6, [1] * 6, [1] * 6))
    ci = tables.table3_intervals(per_case, GRID, n_boot=500)
    assert list(ci.columns) == tables.GRID_CI_COLUMNS
    assert set(ci["policy"]) == {"grid_avg_1", "grid_dep_1", "grid_dep_2"}
    got = ci.set_index(["policy", "metric"])
    avg = got.loc[("grid_avg_1", "Sym.")]
    assert avg["verdict"] == "reference" and avg["score"] == avg["ci_lo"] == avg["ci_hi"] == 0.0
    # a difference whose interval excludes 0 and whose paired test agrees: higher (symptoms)
    sym = got.loc[("grid_dep_1", "Sym.")]
    assert sym["vs"] == "avg k=1" and sym["diff"] == pytest.approx(550 / 6)
    assert sym["diff_lo"] > 0 and sym["verdict"] == "higher"
    dis = got.loc[("grid_dep_1", "Dis.")]
    assert dis["paired_n"] == 5 and dis["n"] == 5 and dis["diff"] == -100.0
    # 5 pairs all one way: the interval is [-100, -100], but the sign-flip p is 2 / 2^5
    assert dis["diff_hi"] < 0 and dis["p_value"] == pytest.approx(0.0625, abs=0.01)
    assert dis["verdict"] == "no detectable difference"
    # equal means, opposite cases: the interval holds 0, no ranking; the mde by hand
    test = got.loc[("grid_dep_1", "Test")]
    assert test["diff"] == 0.0 and test["diff_lo"] < 0 < test["diff_hi"]
    assert test["verdict"] == "no detectable difference" and test["p_value"] == 1.0
    sd = 100 * np.sqrt(6 / 5)     # the six differences are ±100
    assert test["mde"] == pytest.approx((1.959964 + 0.841621) * sd / np.sqrt(6), rel=1e-5)
    # a cell without its avg cell of the same length is not compared
    assert got.loc[("grid_dep_2", "Sym."), "verdict"] == "no avg k=2 cell"
    assert np.isnan(got.loc[("grid_dep_2", "Sym."), "diff"])
    # no grid policy: an empty table with the columns
    empty = tables.table3_intervals(per_case[per_case.doctor == "sft"], GRID)
    assert empty.empty and list(empty.columns) == tables.GRID_CI_COLUMNS


def test_table6_companion_pairs_each_column_with_gpt4_by_case_and_by_item():
    per_case = pd.DataFrame(per_case_of("gpt4_rank", [0.5, 0, 1, 0], [0] * 4, [0] * 4)
                            + per_case_of("agent", [0.5, 0, 1, 0], [0] * 4, [0] * 4))

    def items(doctor, labels):
        return [{"doctor": doctor, "item": f"d{i}@2", "prediction": "Any fever?",
                 "implication": lab} for i, lab in enumerate(labels)]

    nt = items("gpt4_rank", ["not"] * 8) + items("agent", [None] + ["fully"] * 7)
    wanted = {"GPT4": "gpt4_rank", "Rethinker": "agent_norerank", "Rethinker+GPT4": "agent"}
    ci = tables.table6_intervals(per_case, nt, wanted, n_boot=500)
    assert list(ci.columns) == tables.TABLE6_CI_COLUMNS
    assert "Rethinker" not in set(ci["column"])       # no such policy trained
    got = ci.set_index(["metric", "column"])
    assert got.loc[("CSPT Sym.", "GPT4"), "verdict"] == "reference"
    assert got.loc[("CSPT Sym.", "GPT4"), "score"] == pytest.approx(37.5)
    same = got.loc[("CSPT Sym.", "Rethinker+GPT4")]
    assert same["diff"] == 0.0 and same["verdict"] == "no detectable difference"
    assert same["policy"] == "agent" and same["paired_n"] == 4
    gpd = got.loc[("Next-turn GPD", "Rethinker+GPT4")]     # the unusable verdict is dropped
    assert gpd["n"] == 7 and gpd["paired_n"] == 7 and gpd["diff"] == -2.0
    assert gpd["verdict"] == "lower" and gpd["score"] == 0.0
    # without the GPT-4 ranking policy nothing is paired
    alone = tables.table6_intervals(per_case[per_case.doctor == "agent"],
                                    [r for r in nt if r["doctor"] == "agent"], wanted, n_boot=50)
    assert set(alone["verdict"]) == {"no GPT4 policy"}


def test_next_turn_scores_chinese_by_character_and_judges_implication():
    from medpref.contracts import Dialogue

    d = Dialogue(id="z1", lang="zh", turns=[Turn(role="patient", text="我头痛三天了。"),
                                            Turn(role="doctor", text="有没有发烧？")])
    items = nextturn.next_turn_items([d], 1, 0, 8)
    doctor = client(lambda r: "医生：有没有发烧和呕吐？", "doc")
    judge = grading.Judge(client(lambda r: "B. partially", "judge"), JUDGE_CALL, mode="generate")
    res = nextturn.evaluate_next_turn(items, doctor, "doc", load_prompt("policy_doctor"), judge,
                                      load_prompt("sp_gpt_distance"),
                                      CallSpec("doc", "policy_doctor", 32))
    row = res.items[0]
    assert row["prediction"] == "有没有发烧和呕吐？"
    assert row["rougeL_r"] == pytest.approx(1.0)            # every reference character kept
    assert row["rougeL_p"] == pytest.approx(5 / 8)          # 5 of the 8 predicted characters
    assert row["len_pred"] == 8 and row["len_ref"] == 5
    assert row["implication"] == "partially" and res.summary["gpd"] == pytest.approx(1.0)


def test_case_subset_spans_departments_and_doctors_add_trained_policies():
    from medpref.simulation.common import select_cases
    from medpref.simulation.config import DoctorConfig, GridCell
    from medpref.simulation.doctors import all_doctors, grid_cell

    cases = [case("a1", "im"), case("a2", "im"), case("b1", "surgery"), case("c1", "peds")]
    assert [c.id for c in select_cases(cases, 3, None)] == ["a1", "b1", "c1"]
    assert [c.id for c in select_cases(cases, None, ["a2"])] == ["a2"]
    trained = [DoctorConfig(name="sft", adapter="x/sft"), DoctorConfig(name="base", adapter="y")]
    docs = all_doctors([DoctorConfig(name="base")], trained)
    assert [(d.name, d.adapter) for d in docs] == [("base", None), ("sft", "x/sft")]
    # a policy's Table 3 cell is what stage 05 recorded, whatever its name
    cell = GridCell(weighting="dep", trajectory=3)
    assert grid_cell(DoctorConfig(name="any_name", cell=cell)) == ("dep", 3)
    assert grid_cell(DoctorConfig(name="grid_dep_3")) is None


def test_grader_validation_agreement_table():
    from medpref.contracts import SPGradedItem
    from medpref.simulation.validation import validate_grader

    def item(i, cat, it, doctor_text, passed):
        return SPGradedItem(id=f"g{i}", case="c", category=cat, item=it, passed=passed,
                            transcript=[Turn(role="patient", text="I feel unwell."),
                                        Turn(role="doctor", text=doctor_text)])

    items = [item(1, "symptoms", "fever", "Do you have a fever?", True),
             item(2, "symptoms", "fever", "How old are you?", False),
             item(3, "tests", "chest X-ray", "Please get a chest X-ray.", True),
             item(4, "diseases", "pneumonia",
                  "It is pneumonia, bronchitis, asthma or lung cancer.", False),
             item(5, "symptoms", "cough", "Any pets at home?", True)]   # grader says no
    from medpref.simulation.config import GraderParams
    from medpref.simulation.graders import GraderContext, build_grader

    setup = grading_setup(client(keyword_judge, "judge"))
    grader = build_grader("generate", GraderContext(GraderParams(mode="generate"), setup,
                                                    lambda: setup.judge))
    table = validate_grader(items, grader, n_boot=200)
    assert set(table["split"]) == {"dev", "test", "all"}
    assert set(table["batch"]) == {"all", "v1"}          # items without a batch are v1
    table = table[(table["split"] == "all") & (table["batch"] == "all")].set_index("category")
    assert table.loc["all", "items"] == 5 and table.loc["all", "accuracy"] == pytest.approx(0.8)
    assert table.loc["diseases", "accuracy"] == 1.0
    # gold T F T F T vs predicted T F T F F: p_o = .8, p_e = .6·.4 + .4·.6 = .48
    assert table.loc["all", "kappa"] == pytest.approx((0.8 - 0.48) / 0.52)


def test_stage_runs_end_to_end_with_scripted_models(tmp_path, monkeypatch):
    import json

    from medpref.contracts import write_jsonl
    from medpref.params import parse_params
    from medpref.simulation import whole
    from medpref.stagekit import StageFailed

    cases = [case("sp-a", "internal_medicine"), case("sp-b", "surgery", tests=())]
    write_jsonl(tmp_path / "cases.jsonl", cases)
    params = parse_params({"simulation": {
        "cases": str(tmp_path / "cases.jsonl"), "n_cases": None, "rounds": 2,
        "trained_policies": False, "rem_radar": False, "grader": {"mode": "generate",
                                                                 "graded_items": None},
        "next_turn": {"n_dialogues": 2}, "controls": [],
        "doctors": [{"name": "base", "role": "policy"}, {"name": "silent", "role": "mute"}]}})

    def doctor(req):
        n = sum(m["role"] == "assistant" for m in req.messages)
        return ["Do you have a fever?", "This is pneumonia. Get a chest X-ray."][min(n, 1)]

    clients = {"policy": client(doctor, "policy"), "mute": client(lambda r: "", "mute"),
               "patient": client(lambda r: "Yes, since Monday.", "patient"),
               "judge": client(keyword_judge, "judge")}

    new_stage = scripted_sim_stage(tmp_path, monkeypatch, clients)
    # with the controls on, this keyword judge credits the reciter's list of the whole
    # checklist: the gate says the instrument cannot tell listing from asking
    params.simulation.controls = ["control_reciter", "control_lecture"]
    with pytest.raises(StageFailed, match=r"control_reciter Sym\. 100\.0 \(must be ≤ 10\.0"):
        whole.run(new_stage(params))
    assert not (tmp_path / "reports" / "06_sp_grading" / "table2.md").exists()
    params.simulation.controls = []
    out = whole.run(new_stage(params))
    t2 = out.table2.set_index("doctor")
    # each case: fever asked; phlegm's judge answer is unparsable, so it abstains
    assert t2.loc["base", "ALL Sym."] == 100.0
    assert t2.loc["base", "ALL Test"] == 100.0 and t2.loc["base", "ALL Dis."] == 100.0
    assert t2.loc["base", "surgery empty"] == "Test 1"
    assert t2.loc["silent", "ALL Sym."] == 0.0
    assert set(out.next_turn["doctor"]) == {"base", "silent"}
    row = out.per_case.set_index(["doctor", "case"]).loc[("base", "sp-a")]
    assert row["rounds"] == 2 and row["sentences"] == 2 and row["ended_by"] == "rounds"
    assert row["abstained_items"] == 1
    # the extractive patient answered from its case: the scripted answer, then the
    # X-ray finding once the doctor asked for the X-ray
    patient_turns = [t.text for t in out.consultations[0].turns[2::2]]
    assert patient_turns == ["Yes, up to 38.5 degrees since Monday.",
                             "The chest x-ray showed patchy shadow in the right lower lobe."]
    # ... in the patient's voice, the X-ray finding asked for: no line is faulty
    fid = out.fidelity.set_index("doctor").loc["base"]
    assert fid["voice_lines"] == 4 and fid["voice_faulty"] == 0     # two cases, two lines each
    lines = (tmp_path / "reports" / "06_simulation" / "records" / "consultations.jsonl"
             ).read_text().splitlines()
    assert len(lines) == 4 and json.loads(lines[0])["rounds"] == 2
    assert (tmp_path / "reports" / "06_sp_grading" / "table2.md").exists()
    assert out.metrics["sp/base"]["Sym."] == 100.0
    assert (tmp_path / "reports" / "06_sp_grading" / "transcripts.html").exists()
    assert {"question_share", "repetition_share"} <= set(out.behaviour.columns)
    # every table and the page rebuild, byte for byte, from the records just written
    from medpref.simulation.grading_outputs import OUTPUTS as GRADING
    from medpref.simulation.outputs import OUTPUTS

    assert OUTPUTS.differences(tmp_path / "reports" / "06_simulation", params,
                               tmp_path / "rebuilt") == []
    assert GRADING.differences(tmp_path / "reports" / "06_sp_grading", params,
                               tmp_path / "rebuilt_graded") == []
    # a doctor whose every call fails produces nothing: the guard stops the stage
    failing = ScriptedBackend(lambda r: "")
    failing.generate = lambda reqs, cb=None: [
        (cb and cb(i, c)) or c for i, c in enumerate(
            __import__("medpref.llm.types", fromlist=["Completion"]).Completion(
                text="", error="boom") for _ in reqs)]
    clients["policy"] = LLMClient("policy", failing, GenerationParams(), ledger=Ledger("t"))
    clients["mute"] = clients["policy"]
    with pytest.raises(StageFailed):
        whole.run(new_stage(params))


def test_embedding_only_grading_applies_the_four_disease_rule():
    c = case("sp-e")
    turns = [Turn(role="patient", text="cough"),
             Turn(role="doctor", text="pneumonia, bronchitis, asthma or lung cancer"),
             Turn(role="patient", text="ok"), Turn(role="doctor", text="do you have fever")]
    setup = grading_setup(None)
    setup.judge, setup.embedding_threshold = None, 0.3
    grades = grading.grade_consultations(
        [consult.Consultation("sp-e", "im", "en", "doc", "m", turns)], {"sp-e": c}, setup)
    g = {x.item: x for x in grades}
    assert g["fever"].passed and g["fever"].method == "embedding"
    assert g["pneumonia"].turns_named == [0] and g["pneumonia"].candidates == [4]
    assert not g["pneumonia"].passed and not g["chest X-ray"].passed


def test_a_comparison_whose_differences_never_vary_shows_no_mde():
    """Three cases all scored 0 by both policies: the formula's MDE is 0, which would read
    as "any difference would have been seen"; the tables show it as not estimable."""
    import math

    from medpref.metrics.intervals import paired_difference, shown_mde

    flat = paired_difference([0.0, 0.0, 0.0], [0.0, 0.0, 0.0])
    assert flat.mde == 0 and math.isnan(shown_mde(flat))
    varied = paired_difference([1.0, 0.0, 2.0], [0.0, 0.0, 0.0])
    assert shown_mde(varied) == varied.mde > 0
