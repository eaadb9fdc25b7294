"""Stage 06 end to end with scripted models and a toy encoder (fast), plus params checks."""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import pytest

from medpref.llm.client import LLMClient
from medpref.llm.scripted import ScriptedBackend
from medpref.llm.types import GenerationParams
from medpref.medqa import stage as s06
from medpref.medqa import tables as t08
from medpref.medqa.config import MedQAParams
from medpref.medqa.judging import order_agreement
from medpref.medqa.ratings import ratings_for, stored_judgements
from medpref.params import ParamsError, parse_params


def toy_encode(texts):
    """Hashed bag of words, L2-normalised: shared words make vectors similar."""
    vecs = np.zeros((len(texts), 256), dtype=np.float32)
    for i, t in enumerate(texts):
        for w in re.findall(r"[a-z]+", t.lower()):
            vecs[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % 256] += 1
    return vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-9)


def content(req):
    return "\n".join(m["content"] for m in req.messages)


def policy_responder():
    """Distill: a good call (the gold-bearing history line) on even calls, prose on odd;
    Read: quote the first evidence line, or admit ignorance when there is none."""
    n = {"distill": 0}

    def respond(req):
        text = content(req)
        if "search query" in text:
            n["distill"] += 1
            if n["distill"] % 2:
                hist = text.split("Conversation: ")[-1].split(" Question:")[0]
                return f'search_engine(query="{hist.splitlines()[0][:120].replace(chr(34), "")}")'
            return "The correct answer is no."
        if "Evidence from the medicine database:" in text:
            return "Based on the evidence: " + text.split("[1] ")[1].split("\n")[0][:60]
        return "I am not sure."

    return respond


def fair_judge(req):
    text = content(req)
    a1 = text.split("Answer 1: ")[1].split("\n")[0]
    a2 = text.split("Answer 2: ")[1].split("\n")[0]
    good1, good2 = a1.startswith("Based on"), a2.startswith("Based on")
    return "tie" if good1 == good2 else "1" if good1 else "2"


def client(role, responder):
    return LLMClient(role, ScriptedBackend(responder), GenerationParams())


@pytest.fixture()
def params(tmp_path):
    return MedQAParams(n_distill_items=8, n_read_items=4, elo_shuffles=50, bootstrap=50,
                       embeddings_cache=str(tmp_path / "emb.npz"))


def test_stage_end_to_end_with_scripted_models(params):
    p = params
    tree, items = s06.load_inputs(p)
    assert len(items) == 8
    item_vecs = toy_encode([it.text for it in tree.items])
    clients = {"policy": client("policy", policy_responder()), "judge": client("judge", fair_judge)}

    distilled = s06.run_distill(p, clients, items)
    rows = distilled["policy"]
    assert [r.well_formed for r in rows] == [True, False] * 4
    assert all(r.fallback == "last_question" and r.query_used == it.question
               for r, it in zip(rows, items) if not r.well_formed)
    summary = s06.distill_summary(distilled)
    assert summary.loc[0, "ins_follow_rate"] == 0.5 and summary.loc[0, "fallbacks"] == 4
    assert t08.malformed_reasons(distilled)["count"].sum() == 4

    sources = s06.query_sources(p, items, distilled)
    assert set(sources) == {"history", "last_question", "distilled:policy"}
    results = s06.retrieve_all(sources, items, toy_encode, item_vecs, tree, keep=10)
    table3 = t08.retrieval_table(results, {it.id: len(it.gold_attributes) for it in items},
                                 (len(tree.medicines), len(tree.items)), p.hr_ks,
                                 {"policy": "scripted"}, distilled)
    assert list(table3["query"]) == ["random ranking (chance)", "History", "Last question",
                                     "Distilled (policy)",
                                     "Distilled (policy), well-formed calls",
                                     "Last question, same 4 questions"]
    assert table3["questions"].tolist() == [8, 8, 8, 8, 4, 4]
    assert table3.loc[0, "doc_HR@50"] == pytest.approx(50 / 52)
    for col in table3.columns[3:]:            # HR@k never decreases with k
        assert table3[col].between(0, 1).all()
    hr = table3.filter(like="doc_HR@").to_numpy()
    assert (np.diff(hr, axis=1) >= 0).all()

    subset = s06.read_subset(items, p.n_read_items, seed=13)
    answers = s06.run_read(p, clients, tree, subset, results)
    assert len(answers) == 3 * 4
    closed = [a for a in answers if a.config == "closed_book"]
    assert all(a.text == "I am not sure." and a.evidence_keys == [] for a in closed)
    assert all(len(a.evidence_keys) == p.read_top_k for a in answers if a.config != "closed_book")

    battles = s06.run_battles(p, clients["judge"], subset, answers)
    assert len(battles.judged.raw) == 4 * 3 * 2 and not battles.judged.unparsable
    assert order_agreement(battles.judged.judgements) == 1.0   # this judge is fair
    ratings = ratings_for(battles.judged.judgements, p, 13, "stage")
    assert ratings.iloc[-1]["model"] == "closed_book"
    top = ratings.set_index("model")
    assert top.loc["distilled", "bt"] == pytest.approx(top.loc["last_question", "bt"])

    table2 = t08.models_table(p, distilled, results, ratings, {"policy": "scripted"})
    assert list(table2["model"]) == ["distilled", "last_question", "closed_book"]
    assert table2.loc[0, "ins_follow_rate"] == 0.5
    assert np.isnan(table2.loc[2, "doc_HR@1"]) and table2.loc[2, "elo_rank"] == 3


def test_position_biased_judge_rates_everyone_equal(params):
    """A judge that always picks the first answer splits every battle: all ties."""
    p = params
    tree, items = s06.load_inputs(p)
    clients = {"policy": client("policy", policy_responder()),
               "judge": client("judge", lambda req: "1")}
    distilled = s06.run_distill(p, clients, items)
    results = s06.retrieve_all(s06.query_sources(p, items, distilled), items, toy_encode,
                               toy_encode([it.text for it in tree.items]), tree, keep=10)
    subset = s06.read_subset(items, 3, seed=1)
    answers = s06.run_read(p, clients, tree, subset, results)
    battles = s06.run_battles(p, clients["judge"], subset, answers)
    assert order_agreement(battles.judged.judgements) == 0.0
    # merged battles: each split reads as a tie, exactly
    battle = p.model_copy(update={"elo_game": "battle"})
    ratings = ratings_for(battles.judged.judgements, battle, 1, "stage")
    assert ratings["elo"].tolist() == [1000.0] * 3 and ratings["ties"].tolist() == [6] * 3
    assert ratings["elo_rank"].tolist() == [1, 1, 1]          # equal ratings share a rank
    assert (ratings["elo_low"] == ratings["elo_high"]).all()


def test_unparsable_verdicts_are_recorded_not_rated(params):
    p = params
    tree, items = s06.load_inputs(p)
    clients = {"policy": client("policy", policy_responder()),
               "judge": client("judge", lambda req: "Both answers are fine.")}
    subset = s06.read_subset(items, 2, seed=1)
    distilled = s06.run_distill(p, clients, items)
    results = s06.retrieve_all(s06.query_sources(p, items, distilled), items, toy_encode,
                               toy_encode([it.text for it in tree.items]), tree, keep=10)
    battles = s06.run_battles(p, clients["judge"], subset, s06.run_read(p, clients, tree,
                                                                        subset, results))
    assert not battles.judged.judgements and len(battles.judged.unparsable) == 12
    assert ratings_for([], p, 1, "stage").empty


def test_params_are_strict():
    with pytest.raises(ParamsError, match=r"unknown key 'medqa.elo_kk' \(did you mean 'elo_k'"):
        parse_params({"medqa": {"elo_kk": 16}})
    with pytest.raises(ParamsError, match="models"):
        parse_params({"medqa": {"models": [{"name": "a", "role": "policy"}]}})
    with pytest.raises(ParamsError, match="retrieval"):
        parse_params({"medqa": {"models": [{"name": "a", "retrieval": "bm25"},
                                           {"name": "b"}]}})
    with pytest.raises(ParamsError, match="hr_ks"):
        parse_params({"medqa": {"hr_ks": [0, 5]}})
    assert parse_params({"medqa": {}}).medqa == MedQAParams()


def test_stored_verdicts_are_read_with_their_contract(tmp_path, params):
    bad = tmp_path / "v.jsonl"
    bad.write_text('{"id": "b1", "item": "m1", "model_a": "x", "model_b": "y", "winner": "x"}\n')
    p = params.model_copy(update={"stored_verdicts": str(bad)})
    with pytest.raises(Exception, match=r"v.jsonl:1: field 'winner'"):
        stored_judgements(p)
    bad.write_text('{"id": "b1", "item": "m1", "model_a": "x", "model_b": "y", '
                   '"winner": "model_a", "judge": "human"}\n')
    table = ratings_for(stored_judgements(p), p, 1, "stored")
    assert table.loc[0, "model"] == "x" and table.loc[0, "verdicts"] == "stored"


def test_documents_ranked_by_generic_name_as_the_paper_does(params):
    tree, items = s06.load_inputs(params)
    item_vecs = toy_encode([it.text for it in tree.items])
    names = toy_encode(tree.names)
    # a query that is just the gold generic name finds its document first by name
    sources = {"name": [it.gold_medicine for it in items]}
    by_name = s06.retrieve_all(sources, items, toy_encode, item_vecs, tree, keep=5,
                               name_vecs=names)["name"]
    assert [r.doc_rank for r in by_name] == [1] * len(items)
    # a query naming only the attribute says nothing about the name: ranks differ
    attr = {"attr": [" ".join(it.gold_attributes) for it in items]}
    a_name = s06.retrieve_all(attr, items, toy_encode, item_vecs, tree, keep=5,
                              name_vecs=names)["attr"]
    a_item = s06.retrieve_all(attr, items, toy_encode, item_vecs, tree, keep=5)["attr"]
    assert [r.doc_rank for r in a_name] != [r.doc_rank for r in a_item]
    assert [r.attr_rank for r in a_name] == [r.attr_rank for r in a_item]


def test_run_writes_the_stage_outputs_with_scripted_models(tmp_path, monkeypatch, params):
    from scripted_stage import scripted_stage

    policy = policy_responder()

    def respond(req):
        return fair_judge(req) if "Answer 1: " in content(req) else policy(req)

    monkeypatch.setattr(s06, "load_encoder", lambda path, batch: toy_encode)
    stage = scripted_stage("08_medqa", tmp_path, monkeypatch, respond, section=params)
    out = s06.run(stage)
    assert out.metrics["ins_follow_rate"] == {"policy": 0.5}
    assert "wall_s" not in out.metrics and out.metrics["elo_games"] == 4 * 3 * 2
    reports = tmp_path / "reports/08_medqa"
    assert (reports / "table3_retrieval.md").exists()
    verdicts = (reports / "records/verdicts.jsonl").read_text().splitlines()
    assert len(verdicts) == 4 * 3 * 2 and all('"key": "' in v for v in verdicts)
    # every table rebuilds from the records alone, byte for byte
    from medpref.medqa.outputs import OUTPUTS

    assert OUTPUTS.differences(reports, stage.params, tmp_path / "rebuilt") == []
    (reports / "ratings.csv").write_text("edited by hand\n")
    assert OUTPUTS.differences(reports, stage.params, tmp_path / "rebuilt2") == [
        f"{reports / 'ratings.csv'}: differs from its rebuild from the records"]
    # finish records what the notebook passed it by hand before (the run notes it now)
    from scripted_stage import provenance_as_before

    before = provenance_as_before(stage, out.models, out.prompts)
    assert "embeddings" in before["models"] and "medqa_judge" in before["prompts"]
    stage.finish(out.metrics)
    assert (tmp_path / "reports/08_medqa/timings.json").exists()
    assert json.loads((reports / "provenance.json").read_text()) == before


def test_run_fails_before_writing_when_no_answer_comes_out(tmp_path, monkeypatch, params):
    from medpref.llm import session as llm_session
    from medpref.llm.types import Completion
    from medpref.stagekit import StageFailed
    from scripted_stage import scripted_stage

    monkeypatch.setattr(s06, "load_encoder", lambda path, batch: toy_encode)
    stage = scripted_stage("08_medqa", tmp_path, monkeypatch, lambda r: "", section=params)
    backend = llm_session.BACKENDS["hf"](None, None)
    monkeypatch.setattr(backend, "generate", lambda reqs, on_complete=None: [
        Completion(text="", error="HTTP 503") for _ in reqs])
    with pytest.raises(StageFailed, match="stage medqa failed: 0 of 12 answers"):
        s06.run(stage)
    assert not (tmp_path / "reports/08_medqa/table2_models.md").exists()
