"""Stages 01, 02, 04, 06, 07 and 08 against a real OpenAI-compatible server:
``transformers serve`` on 127.0.0.1 serving the embedded SmolLM2-135M, every chat role of
the stage on it. Skipped only when the server's extra dependencies (fastapi, uvicorn;
pinned in requirements.lock) are missing."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import run_stage01, serving, stage01_on_server, with_budgets
from medpref import REPO_ROOT
from medpref.llm.cache import ResponseCache

pytestmark = pytest.mark.slow
pytest.importorskip("fastapi", reason="transformers serve needs fastapi (requirements.lock)")
pytest.importorskip("uvicorn", reason="transformers serve needs uvicorn (requirements.lock)")

URL_ENV, KEY_ENV = "MEDPREF_SERVE_URL", "MEDPREF_SERVE_KEY"



@pytest.fixture(scope="module")
def served_model(embedded_llm_path, tmp_path_factory):
    """(base URL, model id) of a ``transformers serve`` process, stopped afterwards."""
    with serving(embedded_llm_path, tmp_path_factory) as served_embedded:
        yield served_embedded


def test_stage01_against_transformers_serve(tmp_path, monkeypatch, served_model):
    from medpref.stagekit import GuardParams

    url, model = served_model
    monkeypatch.setenv(URL_ENV, url)
    monkeypatch.delenv(KEY_ENV, raising=False)
    # the README's recipe for a server that answers one request at a time
    stage = stage01_on_server(tmp_path, monkeypatch, model, URL_ENV, KEY_ENV, n_items=2,
                              guard=GuardParams(min_yield=0.5, max_failure_rate=0.0),
                              max_new_tokens=48, rounds=False, max_concurrency=1,
                              timeout_s=600.0, max_retries=1)
    out = run_stage01(stage)
    stage.finish(out.metrics)
    lines = (tmp_path / "data" / "unlabeled.jsonl").read_text().splitlines()
    assert len(lines) == out.metrics["items_written"] >= 1
    for line in lines:
        item = json.loads(line)
        sampled, generated = item["candidates"]
        assert sampled["source"] == "sampled" and generated["source"] == "generated"
        assert len(generated["response"].split()) >= 2
        assert item["history"][-1]["role"] == "patient"
    ledger = json.loads((tmp_path / "reports" / "ledger.json").read_text())
    tally = ledger["roles"]["annotator"]
    assert tally["calls"] >= 2 and tally["failures"] == 0
    assert tally["tokens_in"] > 100 and tally["tokens_out"] > 0  # the server's own usage
    roles = json.loads((tmp_path / "reports" / "provenance.json").read_text())["roles"]
    assert roles["annotator"] == f"openai:{model}"


def test_stage06_with_doctor_patient_grader_and_gpd_judge_served(tmp_path, monkeypatch,
                                                                  served_model):
    """The SP test with every chat role it has on the server: the doctor under test, PLPF's
    LLM patient, the judge grader (generate mode: the server gives no log-probs) and the
    GPT-Distance judge. Proves their prompts, parsers and the fidelity bookkeeping on the
    served path."""
    from medpref.params import load_params
    from medpref.simulation import grading_stage, whole
    from medpref.simulation.config import DoctorConfig

    p = load_params().simulation
    section = p.model_copy(update={
        "case_ids": ["sp-0002"], "rounds": 2, "trained_policies": False, "rem_radar": False,
        "doctors": [DoctorConfig(name="served", role="served_doctor")],
        # the default loop controls stay on: the server's `loop_controls: false` leaves them
        # out of the requests (it answers 422 to them); the turn still ends at its question
        "calls": with_budgets(p, consult=32, patient=32, next_turn=24).calls,
        # the 135M patient invents facts: record that, do not stop the run on it here
        "patient": p.patient.model_copy(update={"kind": "llm", "max_unsupported_share": 1.0}),
        # the judge grades the transcript; its 229-item validation is a long run of its own
        "grader": p.grader.model_copy(update={"mode": "generate", "compare": [],
                                              "graded_items": None}),
        "next_turn": p.next_turn.model_copy(update={"n_dialogues": 1}),
        # no control doctors: they would cost served patient and judge calls, and a 135M
        # judge's verdicts on them would trip their gate (test_sp_controls.py)
        "controls": []})
    stage = served_stage("06_simulation", tmp_path, monkeypatch, served_model,
                         ["served_doctor", "patient", "judge"], section=section)
    out = whole.run(stage)
    stage.finish(out.metrics)

    (consult,) = out.consultations
    assert consult.error is None and len(consult.turns) >= 3
    assert [t.role for t in consult.turns[:3]] == ["patient", "doctor", "patient"]
    assert all(t.text.strip() for t in consult.turns if t.role == "doctor")
    grades = [g for g in out.grades if g.doctor == "served"]
    assert len(grades) == 9 + 5 + 1     # sp-0002's checklist: symptoms, tests, diseases
    # every item was judged by the served judge or abstained (an unusable answer), and says so
    assert {g.method for g in grades} <= {"judge", "abstain", "none"}
    assert any(g.method == "judge" for g in grades)
    fidelity = pd.read_csv(tmp_path / grading_stage.NAME / "patient_fidelity.csv")  # beside
                                                                 # the stage's reports folder
    assert int(fidelity["patient_sentences"].sum()) >= 1
    roles = ledger_roles(tmp_path)
    for role in ("served_doctor", "patient", "judge"):
        assert roles[role]["calls"] >= 1 and roles[role]["failures"] == 0, (role, roles[role])
    assert out.model_ids["served"] == f"openai:{served_model[1]}"


def served_stage(name: str, tmp_path, monkeypatch, served, roles, section=None):
    """``name`` with each of ``roles`` on the ``transformers serve`` process (one request at
    a time, the README's recipe), its section replaced by ``section``, folders and LLM
    cache under ``tmp_path``."""
    from medpref.llm.session import LLMSession
    from medpref.params import Params, RoleConfig, ServerConfig, load_params
    from medpref.stagekit import Stage

    url, model = served
    monkeypatch.setenv(URL_ENV, url)
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.setattr(Stage, "data_dir", property(lambda self: tmp_path / "data"))
    monkeypatch.setattr(Stage, "reports_dir", property(lambda self: tmp_path / "reports"))
    params = load_params()
    if section is not None:
        params = Params({**params._sections, name.split("_", 1)[1]: section}, params.raw,
                        params.path)
    llm = params.shared.llm
    llm.servers["test"] = ServerConfig(base_url_env=URL_ENV, api_key_env=KEY_ENV,
                                       max_concurrency=1, timeout_s=600.0, max_retries=1,
                                       loop_controls=False)   # it answers 422 to them
    for role in roles:
        llm.roles[role] = RoleConfig(backend="openai", model=model, server="test")
    stage = Stage(name=name, params=params)
    stage._llm = LLMSession(name, params.shared,
                            cache=ResponseCache(tmp_path / "cache" / f"{name}.sqlite"))
    return stage


def ledger_roles(tmp_path) -> dict:
    return json.loads((tmp_path / "reports" / "ledger.json").read_text())["roles"]


def requests(roles: dict, role: str) -> int:
    """What a role was asked (calls + cache hits); 0 for a role never asked."""
    tally = roles.get(role, {})
    return tally.get("calls", 0) + tally.get("cache_hits", 0)


def test_stage08_reader_and_pairwise_judge_served(tmp_path, monkeypatch, served_model):
    """MedicineQA: Distill (the native tool call an openai role gets by default, with the
    text fallback when the server answers in prose), Retrieve, Read and the two-order
    judge, all on the server."""
    from medpref.medqa import stage as s08
    from medpref.medqa.config import MedQAParams

    p = MedQAParams(n_distill_items=3, n_read_items=2, elo_shuffles=50, bootstrap=50,
                    calls=with_budgets(MedQAParams(), distill=24, distill_tools=24, read=32,
                                       read_closed_book=32).calls,
                    embeddings_cache=str(tmp_path / "emb.npz"),
                    models=[{"name": "distilled", "role": "policy", "retrieval": "distilled"},
                            {"name": "closed_book", "role": "policy", "retrieval": "none"}])
    stage = served_stage("08_medqa", tmp_path, monkeypatch, served_model,
                         ["policy", "judge"], section=p)
    out = s08.run(stage)
    stage.finish(out.metrics)
    roles = ledger_roles(tmp_path)
    assert roles["policy"]["calls"] >= 3 + 2 * 2 and roles["policy"]["failures"] == 0
    assert roles["judge"]["calls"] >= 2 and roles["judge"]["failures"] == 0
    # each read item, both orders, one pair of models: every verdict is a usable game or is
    # recorded as unparsable (the 135M judge rarely answers in the asked form)
    records = tmp_path / "reports" / "records"
    verdicts = (records / "verdicts.jsonl").read_text().splitlines()
    unparsable = (records / "unparsable_verdicts.jsonl").read_text().splitlines()
    assert len(verdicts) + len(unparsable) == 2 * 2 == out.metrics["judge_calls"]
    assert (tmp_path / "reports" / "table2_models.csv").exists()
    # every chat role on the server; the retriever's MiniLM stays local
    assert set(out.models.values()) == {f"openai:{served_model[1]}", "models/all-minilm-l6-v2"}


def test_stage07_imap_extraction_and_relations_served(tmp_path, monkeypatch, served_model):
    """imapScore with its judge on the server: sampled extraction (the default for an
    openai role) and generated relations (the server gives no log-probs)."""
    from medpref.imap import stage as s07
    from medpref.imap.config import ImapParams

    data = tmp_path / "qa.jsonl"        # one question, its three systems' answers
    rows = (REPO_ROOT / "data/embedded/qa_human_scores.jsonl").read_text().splitlines()
    data.write_text("\n".join(rows[:3]) + "\n")
    p = ImapParams(data=str(data), relation_mode="generate", link_min_similarity=None,
                   calls=with_budgets(ImapParams(), question=32, answer=32).calls)
    stage = served_stage("07_imapscore", tmp_path, monkeypatch, served_model, ["judge"],
                         section=p)
    out = s07.run(stage)
    stage.finish(out.metrics)
    judge = ledger_roles(tmp_path)["judge"]
    assert judge["calls"] >= 3 and judge["failures"] == 0


@pytest.fixture(scope="module")
def notechat_index(tmp_path_factory):
    """Stage 02's QuickUMLS index, built from the embedded lexicon (the notechat_index
    stage's work) into a temporary folder."""
    from medpref.notechat.lexicon_index import build_index

    dest = tmp_path_factory.mktemp("notechat") / "quickumls_index"
    build_index(REPO_ROOT / "data" / "embedded" / "lexicon", dest)
    return dest


def test_stage02_notechat_with_planner_doctor_patient_and_polisher_served(
        tmp_path, monkeypatch, served_model, notechat_index):
    """NoteChat on one embedded note with all four of its agents on the server: the planner
    (the draft, and the two single-prompt baseline rows, which use its role), the doctor
    and patient of two role-play rounds, and the polisher (the rethinker role). The answer
    prefixes ("Doctor:", "Patient:") are asked for in words (the server does not continue
    an assistant message). Checks their prompts, turn parsing, the trace and Table 3 on
    the served path; a turn the 135M model spoils is recorded as dropped, not lost."""
    from medpref.notechat import stage as s02
    from medpref.params import load_params

    p = with_budgets(load_params().notechat.model_copy(update={
        "index": str(notechat_index), "n_notes": 1, "max_rounds": 2}),
        planning=48, doctor_turn=32, patient_turn=24, polish=64, baseline=64)
    served = ["planner", "doctor", "patient", "rethinker"]
    stage = served_stage("02_notechat", tmp_path, monkeypatch, served_model, served, section=p)
    out = s02.run(stage)
    stage.finish(out.metrics)

    roles = ledger_roles(tmp_path)
    print("\nstage 02 served roles:", json.dumps(roles))
    trace = [json.loads(line) for line in out.paths["trace"].read_text().splitlines()]
    steps = pd.Series([t["step"] for t in trace]).value_counts().to_dict()
    # every call is in the trace with its raw answer, counted once on the ledger
    expected = {"planner": steps.get("planning", 0) + steps.get("single_prompt", 0),
                "doctor": steps.get("doctor", 0), "patient": steps.get("patient", 0),
                "rethinker": steps.get("polish", 0)}
    assert expected["planner"] == 1 + 2       # the draft, the two baseline rows
    for role in served:
        assert requests(roles, role) == expected[role] >= 1, (role, roles[role], steps)
        assert roles[role]["failures"] == 0 and roles[role]["tokens_out"] > 0, role
    assert all(t["error"] is None and t["raw"] for t in trace)
    # a spoiled turn is dropped and said so, never silently lost
    dropped = [t for t in trace if t["step"] in ("doctor", "patient") and t["text"] is None]
    events = [json.loads(line) for line in out.paths["malformed"].read_text().splitlines()]
    assert len(dropped) == sum(e.get("action") == "dropped" for e in events)
    (dialogue,) = [json.loads(line) for line in out.paths["dialogues"].read_text().splitlines()]
    assert dialogue["turns"] and dialogue["turns"][0]["role"] == "doctor"
    baselines = out.paths["baselines"].read_text().splitlines()
    assert len(baselines) == 2                # one dialogue per baseline row
    assert "NoteChat" in out.table3_markdown and out.paths["figure"].exists()
    provenance = json.loads((tmp_path / "reports" / "provenance.json").read_text())
    assert {provenance["roles"][r] for r in served} == {f"openai:{served_model[1]}"}


def _two_items() -> list:
    """Two unlabeled items in stage 01's shape: an asking (sampled) and an advising
    (generated) reply, each with one round of future."""
    from medpref.contracts import UnlabeledItem

    def item(iid, complaint, asks, advises):
        def cand(reply, source, patient):
            return {"response": reply, "source": source,
                    "future": [{"role": "patient", "text": patient},
                               {"role": "doctor", "text": "Thank you, that helps."}]}
        return UnlabeledItem.model_validate({
            "id": iid, "history": [{"role": "patient", "text": complaint}],
            "candidates": [cand(asks, "sampled", "No, nothing like that."),
                           cand(advises, "generated", "All right.")]})

    return [item("u-throat", "I have had a sore throat and a fever of 38.5 for three days.",
                 "Do you also have a cough or trouble swallowing, and have you taken "
                 "anything for the fever?", "It is probably a virus. Drink fluids and rest."),
            item("u-chest", "My chest feels tight when I climb stairs, for about two weeks.",
                 "Does the tightness spread to your arm or jaw, and does it ease when you "
                 "rest?", "Try taking the stairs more slowly.")]


def _annotation_section(tmp_path, **update):
    import pandas as pd

    from medpref import REPO_ROOT
    from medpref.contracts import write_jsonl
    from medpref.params import load_params

    write_jsonl(tmp_path / "unlabeled.jsonl", _two_items())
    # stage 03's Table 5 holds the fitted scorers' rows; the LLM scorers these tests serve
    # get a row of their own (what stage 04 reports beside its pairs)
    table = pd.read_csv(REPO_ROOT / "reports/03_rem/table5.csv")
    rows = [table.iloc[[0]].assign(scorer=name) for name in ("sampled", "expected")]
    pd.concat([table, *rows]).to_csv(tmp_path / "table5.csv", index=False)
    return load_params().annotation.model_copy(update={
        "input": str(tmp_path / "unlabeled.jsonl"), "max_items": 2,
        "rem_table5": str(tmp_path / "table5.csv"), **update})


def test_stage04_annotation_with_judge_agents_and_a_sampled_rem_served(tmp_path, monkeypatch,
                                                                      served_model):
    """Preference annotation of one item with every role it calls on the server: the
    judge (gpt4_rank, both orders for the reading it reports, and the agent's re-rank of
    a tie), the planner, ranker and rethinker of the agent strategy, and the REM. The REM
    is stage 03's ``sampled`` scorer (1 in-context example, read from text), the only one a
    server without log-probs can run (``expected`` and ``finetuned`` cannot: next test),
    cut to k = 1 and 24 tokens, and ``cai.trajectory: 1``: 2 states x 6 rules calls (the
    served 135M model wrote ~1-2 tokens/s on the shared 2-core machine). Token budgets
    are cut likewise. An answer the 135M model writes out of form is recorded as
    unparsable (raw answers, unscored states), not lost."""
    from medpref.annotation import stage as s04

    n = 1
    p = _annotation_section(tmp_path, rem_scorer="sampled", max_items=n)
    p = p.model_copy(update={
        "cai": p.cai.model_copy(update={"trajectory": 1}),
        "calls": with_budgets(p, judge=8, long_plan=32, short_plan=24, rank=8, need=4,
                              rethink=24).calls,
        # the 135M REM may leave a state unscored: recorded below, no reason to stop here
        "guard": p.guard.model_copy(update={"min_yield": 0.0, "max_failure_rate": 0.0})})
    served = ["judge", "planner", "ranker", "rethinker", "rem"]
    stage = served_stage("04_annotation", tmp_path, monkeypatch, served_model, served,
                         section=p)
    rem = stage.params.rem
    rem.scorers["sampled"] = rem.scorers["sampled"].model_copy(update={"k": 1, "n_examples": 1})
    stage.params._sections["rem"] = with_budgets(rem, score=24)
    out = s04.run(stage)
    stage.finish(out.metrics, sections=("rem",))

    roles = ledger_roles(tmp_path)
    print("\nstage 04 served roles:", json.dumps(roles))
    for role, tally in roles.items():
        assert role in served and tally["failures"] == 0, (role, tally)
        assert tally["calls"] >= 1 and tally["tokens_out"] > 0, (role, tally)
    # every judge/agent answer is kept raw; the unreadable ones are listed, not dropped
    raw = [json.loads(line) for line in (tmp_path / "data" / "raw_answers.jsonl")
           .read_text().splitlines()]
    by_step = pd.Series([r["step"] for r in raw]).value_counts().to_dict()
    planned = sum(r["step"] == "short_plan" and r["parsed"] is not None for r in raw)
    # the judge: both orders of both items; the agent's re-rank of a tie asks the question
    # gpt4_rank already asked (the same request), so it is a cache hit
    assert roles["judge"]["calls"] == by_step["judge"] == 2 * n
    assert roles["judge"]["cache_hits"] == by_step.get("rerank", 0)
    assert requests(roles, "planner") == n + by_step.get("short_plan", 0)
    assert by_step["long_plan"] == n
    assert requests(roles, "ranker") == by_step.get("rank", 0) == planned >= 1
    # the Rethinker speaks on the Ranker's ties: is a better reply needed, then writes it
    assert requests(roles, "rethinker") == by_step.get("need", 0) + by_step.get("rethink", 0)
    assert all(r["error"] is None and r["raw"] for r in raw)
    unparsable = (tmp_path / "reports" / "unparsable.jsonl").read_text().splitlines()
    assert len(unparsable) == sum(r["parsed"] is None for r in raw)
    # the REM: each distinct state x rule x k sampled once; an all-unreadable rule leaves
    # its state (and the item) unscored, and says how many answers it could not read
    states = [json.loads(line) for line in (tmp_path / "data" / "state_scores.jsonl")
              .read_text().splitlines()]
    assert len({s["state_key"] for s in states}) == len(states) == 2 * n
    k = stage.params.rem.scorers["sampled"].k
    assert roles["rem"]["calls"] == len(states) * 6 * k and roles["rem"]["cache_hits"] == 0
    for s in states:
        assert len(s["rule_scores"]) == 6
        assert s["unparsable"] >= k * sum(v is None for v in s["rule_scores"].values())
    unscored = {s["item_id"] for s in states if None in s["rule_scores"].values()}
    assert {d.item_id for d in out.results["cai_dep"].decisions
            if d.outcome == "unscored"} == unscored
    for name in ("gpt4_rank", "cai_avg", "cai_dep", "agent"):
        assert (tmp_path / "data" / "pairs" / f"{name}.jsonl").exists()
    assert (tmp_path / "reports" / "summary.csv").exists()
    provenance = json.loads((tmp_path / "reports" / "provenance.json").read_text())
    assert set(provenance["roles"]) == set(roles) >= {"judge", "planner", "ranker", "rem"}
    assert set(provenance["roles"].values()) == {f"openai:{served_model[1]}"}


def test_stage04_probability_rem_served_stops_before_writing_naming_the_sampled_one(
        tmp_path, monkeypatch, served_model):
    """``transformers serve`` ignores ``logprobs``/``top_logprobs`` and returns none, so a
    REM read from score-token probabilities (Table 5's ``expected``; ``finetuned`` also
    needs an adapter, which a served role refuses) cannot run there: the first option call
    stops the stage before it writes, with one line naming the sampled scorer."""
    from medpref.annotation import stage as s04
    from medpref.stagekit import StageFailed

    p = _annotation_section(tmp_path, rem_scorer="expected", strategies=["cai_dep"],
                            max_items=1)
    stage = served_stage("04_annotation", tmp_path, monkeypatch, served_model, ["rem"],
                         section=p)
    with pytest.raises(StageFailed, match=r"returned no log-probs for model .*"
                                          r"annotation\.rem_scorer: a rem\.scorers entry "
                                          r"with mode: sampled"):
        s04.run(stage)
    stage.close()
    assert not (tmp_path / "data").exists()
