"""Stage 04: strategies on scripted backends and scorers, parsers, selection, analyses."""

from __future__ import annotations

import json

import pytest

from medpref import REPO_ROOT
from medpref.annotation import agent as agent_mod
from medpref.annotation import analysis, cai, grid
from medpref.annotation.config import AnnotationParams, ScoringConfig
from medpref.annotation.judging import (
    judge_both_orders,
    judge_items,
    one_order,
    parse_choice,
    shown_order,
)
from medpref.annotation.pairs import Decision
from medpref.annotation.stage import load_items
from medpref.contracts import ContractError, UnlabeledItem
from medpref.llm.pairwise import combine_orders, to_candidate_frame
from medpref.params import ParamsError, load_params, parse_params
from medpref.prompts import load_prompt
from medpref.remscore.base import RuleJudgement
from medpref.rules import load_rules

FLOWCHART = load_rules(REPO_ROOT / "configs/rules/plpf_flowchart.yaml")
P = load_params().annotation  # the repository's params (the only home of their values)


def scoring(**changes) -> ScoringConfig:
    return P.scoring.model_copy(update=changes)


def annotation_params(**changes) -> AnnotationParams:
    return P.model_copy(update=changes)


def make_item(iid: str, c1: str, c2: str, rounds: int = 2) -> UnlabeledItem:
    def future(tag):
        out = []
        for r in range(rounds):
            out += [{"role": "patient", "text": f"{tag} patient {r}"},
                    {"role": "doctor", "text": f"{tag} doctor {r}"}]
        return out
    return UnlabeledItem.model_validate({
        "id": iid,
        "history": [{"role": "patient", "text": f"{iid}: I have had a cough for a week."}],
        "candidates": [{"response": c1, "future": future(c1), "source": "sampled"},
                       {"response": c2, "future": future(c2), "source": "generated"}]})


# -- judge answers: golden parses, including unparsable ones --------------------------------
@pytest.mark.parametrize("text,expected", [
    ("Response 1", "1"),
    ("**Response 2** is better because it asks about fever.", "2"),
    ("2.\nIt asks about the duration.", "2"),
    ("(1)", "1"),
    ('"Response 1"\n\nThe doctor should refer the patient.', "1"),
    ("1. I will ask about their lifestyle and diet", None),  # a list, not a choice
    ("Response 1 is better than response 2.", "1"),
    ("The second response, since it checks red flags.", "2"),
    ("Equal. Both ask the same thing.", "equal"),
    ("Both responses are equivalent.", "equal"),
    ("Neither reply follows the plan.", "equal"),
    ("Reply #1 follows the plan. Response 2 does not.", "1"),
    ("", None),
    ("The doctor should ask about the fever first.", None),
    ("10 days is a long time to wait.", None),
    ("Response 3", None),
])
def test_parse_choice_golden(text, expected):
    assert parse_choice(text) == expected


def test_both_orders_combine():
    assert to_candidate_frame("1", "ba") == "2" and to_candidate_frame("equal", "ba") == "equal"
    assert combine_orders("1", "1") == "1"
    assert combine_orders("1", "2") == "tie"  # disagreement is a tie
    assert combine_orders("equal", "2") == "tie"
    assert combine_orders(None, "2") == "unparsable"


JUDGE = load_prompt("annotation_judge")


def test_one_order_drops_equal():
    assert one_order("1") == "1" and one_order("2") == "2"
    assert one_order("equal") == "tie" and one_order(None) == "unparsable"


def test_single_order_gpt4_rank_asks_once_and_drops_equal(scripted_client):
    """The follow-up's reading: one question per item; "equal" gives no pair."""
    from medpref.annotation.judging import gpt4_rank_pairs

    def respond(req):
        user = req.messages[-1]["content"]
        first = user.split("Possible reply 1:")[1].split("Possible reply 2:")[0]
        if "fever" in first:
            return "Response 1"
        return "Equal, both are fine." if "rest" in first else "Response 2"
    client = scripted_client(respond)
    items = [make_item(f"u-{i}", "Take rest." if i % 2 else "Drink water.", "Any fever?")
             for i in range(12)]
    judged = judge_items(items, client, JUDGE, 8, "gpt4_rank", reading="one", seed=5,
                         call=P.call("judge"))
    assert set(judged) == {"one"}
    one = judged["one"]
    assert len(one.records) == len(items)  # one call per item
    for item, d in zip(items, one.decisions):
        order = shown_order(item.id, 5)
        assert d.detail["order"] == order
        rest_first = item.id in {f"u-{i}" for i in range(1, 12, 2)} and order == "ab"
        # the fever reply wins whenever the judge reads it; "rest" shown first → equal → tie
        assert d.outcome == ("tie" if rest_first else "2")
    pairs = gpt4_rank_pairs(items, one.decisions)
    assert len(pairs) == sum(d.outcome == "2" for d in one.decisions) < len(items)
    assert all(p.chosen == "Any fever?" for p in pairs)
    assert {r["order"] for r in one.records} == {"ab", "ba"}  # the seeded order varies


def test_both_readings_share_one_batch_of_answers(scripted_client):
    client = scripted_client(lambda r: "Response 1, clearly.")  # a position-biased judge
    items = [make_item(f"u-{i}", "Any fever?", "Take rest.") for i in range(6)]
    judged = judge_items(items, client, JUDGE, 8, "gpt4_rank", reading="one", seed=5,
                         call=P.call("judge"),
                         also=["both"])
    assert len(judged["one"].records) == 2 * len(items) and judged["both"].records == []
    assert all(d.outcome == "tie" for d in judged["both"].decisions)  # ours: bias → tie
    assert all(d.outcome in ("1", "2") for d in judged["one"].decisions)  # paper: a pick


def test_position_bias_becomes_a_tie(scripted_client):
    """A judge that always answers 'Response 1' disagrees with itself across orders."""
    client = scripted_client(lambda r: "Response 1, clearly.")
    items = [make_item("u-1", "Any fever?", "Take rest.")]
    judged = judge_both_orders(items, client, JUDGE, 8, "gpt4_rank", P.call("judge"))
    assert [d.outcome for d in judged.decisions] == ["tie"]
    assert {r["order"] for r in judged.records} == {"ab", "ba"}


def test_consistent_judge_gives_a_preference(scripted_client):
    def prefers_fever(req):
        user = req.messages[-1]["content"]
        first = user.split("Possible reply 1:")[1].split("Possible reply 2:")[0]
        return "Response 1" if "fever" in first else "Response 2"
    client = scripted_client(prefers_fever)
    items = [make_item("u-1", "Take rest.", "Any fever or chills?")]
    judged = judge_both_orders(items, client, JUDGE, 8, "gpt4_rank", P.call("judge"))
    d = judged.decisions[0]
    assert d.outcome == "2" and d.winner_source == "generated"


def test_unparsable_judge_answers_are_recorded_and_skipped(scripted_client):
    answers = iter(["Response 1", "I am not sure what you mean."])
    client = scripted_client(lambda r: next(answers))
    from medpref.annotation.judging import gpt4_rank_pairs
    items = [make_item("u-1", "Any fever?", "Take rest.")]
    judged = judge_both_orders(items, client, JUDGE, 8, "gpt4_rank", P.call("judge"))
    assert judged.decisions[0].outcome == "unparsable"
    assert [r["parsed"] for r in judged.records] == ["1", None]
    assert judged.records[1]["raw"] == "I am not sure what you mean."
    assert gpt4_rank_pairs(items, judged.decisions) == []


# -- CAI with a scripted scorer ---------------------------------------------------------------
class ScriptedScorer:
    """Rule scores by the state's last doctor turn; counts what it was asked."""

    name = "scripted"

    def __init__(self, table: dict[str, dict[str, float | None]]):
        self.table = table
        self.calls = 0

    def score_states(self, states, rules):
        self.calls += 1
        return [{r.id: RuleJudgement(r.id, self.table[s[-1].text][r.id]) for r in rules}
                for s in states]


def flat(a, b, c, d=2, e=2, f=2):
    return dict(zip("ABCDEF", (a, b, c, d, e, f)))


def test_cai_scores_ties_and_top_n():
    # trajectory 1: only the candidate's own state counts.
    # avg sums (constraints all 2): good 12, ok 11.5, poor 7, bad 6
    table = {"good": flat(2, 2, 2), "ok": flat(2, 2, 1.5), "poor": flat(1, 0, 0),
             "bad": flat(0, 0, 0), "none": flat(None, 2, 2)}
    for tag in list(table):
        for r in range(3):
            table[f"{tag} doctor {r}"] = table[tag]
    scorer = ScriptedScorer(table)
    items = [make_item("u-1", "good", "ok"),     # avg margin 0.5 → tie
             make_item("u-2", "poor", "good"),   # avg margin 5 → 2 wins
             make_item("u-3", "good", "bad"),    # avg margin 6 → 1 wins
             make_item("u-4", "good", "none")]   # unscored
    states = cai.collect_states(items, trajectory=1)
    judgements = cai.score_unique_states(scorer, FLOWCHART, states)
    assert scorer.calls == 1 and len(judgements) == 8  # one scorer call for every state
    decisions = cai.cai_decisions(states, judgements, FLOWCHART, scoring(top_n=1), "avg",
                                  "cai_avg")
    assert [d.outcome for d in decisions] == ["tie", "2", "1", "unscored"]
    assert decisions[1].margin == pytest.approx(5.0)
    pairs = cai.cai_pairs(items, decisions, top_n=1)
    assert [(p.id, p.chosen, p.rejected) for p in pairs] == [("p-cai_avg-u-3", "good", "bad")]
    assert pairs[0].chosen_source == "sampled" and pairs[0].margin == pytest.approx(6.0)
    assert len(cai.cai_pairs(items, decisions, top_n=None)) == 2


def test_cai_dep_uses_the_trajectory_and_the_common_length():
    table = {"c1": flat(2, 0, 0), "c2": flat(0, 0, 0)}
    for r in range(3):
        table[f"c1 doctor {r}"] = flat(2, 2, 2)  # c1's future completes the process
        table[f"c2 doctor {r}"] = flat(0, 0, 0)
    items = [make_item("u-1", "c1", "c2", rounds=2)]
    states = cai.collect_states(items * 2, trajectory=3)  # the same item twice
    assert states[0].n_states == 3
    j = cai.score_unique_states(ScriptedScorer(table), FLOWCHART, states)
    assert len(j) == 6  # a state shared by two items is scored once
    states = states[:1]
    d = cai.cai_decisions(states, j, FLOWCHART, scoring(), "dep", "cai_dep")[0]
    # c1: state 0 dep = A 2 + B 0 + C 0 + γ·6 = 2.6 ; later states: 2+2+2+0.6 = 6.6
    assert d.detail["state_scores"][0] == pytest.approx([2.6, 6.6, 6.6])
    assert d.detail["scores"][0] == pytest.approx(2.6 + 0.65 * 6.6 + 0.65 ** 2 * 6.6)
    assert d.outcome == "1"
    rows = cai.state_score_rows(states, j, FLOWCHART, scoring())
    assert len(rows) == 6 and rows[0]["avg_score"] == pytest.approx(8.0)
    assert rows[0]["dep_score"] == pytest.approx(2.6)


# -- the agent on a scripted backend ---------------------------------------------------------
def agent_responder(rank_answer: str, rerank_answer: str = "Response 1",
                    need_answer: str = "Yes"):
    def respond(req):
        system = " ".join(req.messages[0]["content"].split())
        if "plans a consultation" in system:
            return "1. Ask about fever. 2. Examine the chest. 3. Advise."
        if "checking how far" in system:
            return "Ask whether the patient has a fever."
        if "picks the reply" in system:
            return rank_answer
        if "checks whether the draft replies" in system:
            return need_answer
        if "write one reply" in system:
            return "Do you have a fever, and since when?\nPatient: yes"
        if "reviewing an online consultation" in system:
            user = req.messages[-1]["content"]
            first = user.split("Possible reply 1:")[1].split("Possible reply 2:")[0]
            return rerank_answer if "rest" in first else "Response 2"
        raise AssertionError(f"unexpected prompt: {system[:60]}")
    return respond


def _agent_setup(scripted_client, responder, rerank=True, reading="both"):
    base = scripted_client(responder)
    clients = agent_mod.AgentClients(base, base, base, base)
    prompts = agent_mod.AgentPrompts(*(load_prompt(P.call(n).prompt) for n in (
        "long_plan", "short_plan", "rank", "need", "rethink", "judge")))
    settings = agent_mod.AgentSettings(history_max_turns=8, calls=P.agent_calls,
                                       rerank=rerank, judge_reading=reading, seed=3)
    return clients, prompts, settings


def test_agent_tie_gives_three_pairs(scripted_client):
    clients, prompts, s = _agent_setup(scripted_client, agent_responder("Equal"))
    item = make_item("u-1", "Take rest and fluids.", "See a doctor.")
    res = agent_mod.agent_rank([item], clients, prompts, s)
    assert [d.outcome for d in res.decisions] == ["tie"]
    by_id = {p.id: p for p in res.pairs}
    assert set(by_id) == {"p-agent-u-1-c3-over-1", "p-agent-u-1-c3-over-2", "p-agent-u-1-rerank"}
    c3 = by_id["p-agent-u-1-c3-over-1"]
    assert c3.chosen == "Do you have a fever, and since when?"  # the patient line is cut
    assert c3.chosen_source == "rethinker" and c3.rejected == "Take rest and fluids."
    assert by_id["p-agent-u-1-rerank"].chosen == "Take rest and fluids."  # judge: rest wins
    assert {r["step"] for r in res.records} == {"long_plan", "short_plan", "rank", "need",
                                                "rethink", "rerank"}
    assert res.decisions[0].detail["better_needed"] == "yes"


def test_rethinker_no_gives_no_c3(scripted_client):
    """The Rethinker's Yes/No comes first: "No" (a draft already does it) writes no c3."""
    clients, prompts, s = _agent_setup(scripted_client, agent_responder("Equal",
                                                                         need_answer="No."))
    res = agent_mod.agent_rank([make_item("u-1", "Take rest and fluids.", "See a doctor.")],
                               clients, prompts, s)
    assert [d.outcome for d in res.decisions] == ["tie"]
    assert [p.id for p in res.pairs] == ["p-agent-u-1-rerank"]  # only the re-rank pair
    assert not any(r["step"] == "rethink" for r in res.records)
    assert res.decisions[0].detail["better_needed"] == "no"
    assert res.decisions[0].detail["rethinker_reply"] is False


def test_rerank_uses_the_configured_gpt4_reading(scripted_client):
    """With the follow-up's one-order reading, the re-rank asks the judge once."""
    clients, prompts, s = _agent_setup(scripted_client, agent_responder("Equal"),
                                       reading="one")
    res = agent_mod.agent_rank([make_item("u-1", "Take rest.", "See a doctor.")],
                               clients, prompts, s)
    assert sum(r["step"] == "rerank" for r in res.records) == 1


@pytest.mark.parametrize("text,expected", [
    ("Yes", "yes"), ("No.", "no"), ("**No**, reply 1 does it.", "no"),
    ("Yes, neither asks about the fever.\nNo other issue.", "yes"),
    ("Yes or no?", None), ("Maybe.", None), ("", None),
])
def test_parse_yes_no_golden(text, expected):
    assert agent_mod.parse_yes_no(text) == expected


def test_agent_rerank_off_reproduces_rethinker_only(scripted_client):
    clients, prompts, s = _agent_setup(scripted_client, agent_responder("Equal"), rerank=False)
    res = agent_mod.agent_rank([make_item("u-1", "Take rest.", "See a doctor.")],
                               clients, prompts, s)
    assert sorted(p.id for p in res.pairs) == ["p-agent-u-1-c3-over-1", "p-agent-u-1-c3-over-2"]
    assert not any(r["step"] == "rerank" for r in res.records)


def test_agent_decisive_rank_gives_one_pair(scripted_client):
    clients, prompts, s = _agent_setup(scripted_client, agent_responder("Response 1"))
    items = [make_item("u-1", "Take rest.", "See a doctor."),
             make_item("u-2", "Drink water.", "Any fever?")]
    res = agent_mod.agent_rank(items, clients, prompts, s)
    assert len(res.pairs) == 2 and all(d.outcome in ("1", "2") for d in res.decisions)
    for item, _d, pair in zip(items, res.decisions, res.pairs):
        order = agent_mod.shown_order(item.id, 3)
        shown_first = 0 if order == "ab" else 1  # "Response 1" is the one shown first
        assert pair.chosen == item.candidates[shown_first].response
        assert pair.id == f"p-agent-{item.id}"
    assert not any(r["step"] in ("rethink", "rerank") for r in res.records)


def test_agent_unparsable_rank_is_skipped(scripted_client):
    clients, prompts, s = _agent_setup(scripted_client, agent_responder("Hmm, hard to say."))
    res = agent_mod.agent_rank([make_item("u-1", "Take rest.", "See a doctor.")],
                               clients, prompts, s)
    assert res.pairs == [] and res.decisions[0].outcome == "unparsable"
    assert res.decisions[0].detail["failed_step"] == "rank"
    assert [r["parsed"] for r in res.records if r["step"] == "rank"] == [None]


@pytest.mark.parametrize("text,expected", [
    ("Do you have a fever?", "Do you have a fever?"),
    ("Doctor: How long has it lasted? Patient: two days", "How long has it lasted?"),
    ("**Doctor:** Any chest pain?\nPatient: no", "Any chest pain?"),
    ("Patient: I feel bad", None),
    ("Okay.", None),
    ("", None),
])
def test_parse_reply_golden(text, expected):
    assert agent_mod.parse_reply(text) == expected


def test_parse_plan_rejects_empty_and_stubs():
    assert agent_mod.parse_plan("  1. Ask about fever.\n 2. Examine. ") == \
        "1. Ask about fever. 2. Examine."
    assert agent_mod.parse_plan("Ok sure") is None


def test_shown_order_is_seeded_and_mixed():
    orders = [agent_mod.shown_order(f"u-{i}", 13) for i in range(40)]
    assert orders == [agent_mod.shown_order(f"u-{i}", 13) for i in range(40)]
    assert 5 < orders.count("ab") < 35


# -- inputs, params, analyses -------------------------------------------------------------
def test_load_items_names_bad_candidates_and_subsamples(tmp_path):
    good = make_item("u-1", "a b", "c d").model_dump(mode="json")
    three = dict(good, id="u-2", candidates=good["candidates"] * 2)
    path = tmp_path / "unlabeled.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (good, three)) + "\n")
    p = annotation_params(input=str(path))
    with pytest.raises(ContractError, match=r"unlabeled.jsonl:2: field 'candidates'"):
        load_items(p)
    path.write_text("\n".join(json.dumps(dict(good, id=f"u-{i}")) for i in range(5)) + "\n")
    assert [i.id for i in load_items(annotation_params(input=str(path), max_items=2))] == \
        ["u-0", "u-1"]
    assert len(load_items(annotation_params(input=str(path)))) == 5  # default: every item


def test_an_item_of_a_held_out_dialogue_is_refused(tmp_path):
    """Stage 01 samples train only; should an item of a dev or eval dialogue reach stage 04
    anyway, it is refused with the file, the line and the field."""
    from medpref.data.split import load_split
    from medpref.params import load_params, repo_path

    split = load_split(repo_path(load_params().shared.split))
    rows = [dict(make_item(f"u-{i}", "a b", "c d").model_dump(mode="json"),
                 meta={"dialogue_id": did})
            for i, did in enumerate([split.ids("train")[0], "mts-17", split.ids("eval")[0]])]
    path = tmp_path / "unlabeled.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    p = annotation_params(input=str(path))
    with pytest.raises(ContractError, match=rf"unlabeled.jsonl:3: field 'meta.dialogue_id': "
                                            rf"dialogue '{split.ids('eval')[0]}' is in the "
                                            r"'eval' part"):
        load_items(p, split)
    path.write_text("\n".join(json.dumps(r) for r in rows[:2]) + "\n")  # train + unlisted
    assert [i.id for i in load_items(p, split)] == ["u-0", "u-1"]


def _raw_with(dotted: str, value) -> dict:
    """The repository's params.yaml with one key set (or added)."""
    import copy

    import yaml
    raw = copy.deepcopy(yaml.safe_load((REPO_ROOT / "params.yaml").read_text()))
    node, *path, last = [raw, *dotted.split(".")]
    for part in path:
        node = node[part]
    node[last] = value
    return raw


def test_params_are_strict():
    with pytest.raises(ParamsError, match="annotation.scoring.gama"):
        parse_params(_raw_with("annotation.scoring.gama", 0.1))
    with pytest.raises(ParamsError, match="annotation.scoring.alpha"):
        parse_params(_raw_with("annotation.scoring.alpha", 1.0))  # V_α needs α < 1
    with pytest.raises(ParamsError, match="annotation.scoring.predecessors"):
        parse_params(_raw_with("annotation.scoring.predecessors", "closure"))
    with pytest.raises(ParamsError, match="annotation.judge.orders"):
        parse_params(_raw_with("annotation.judge.orders", "two"))
    with pytest.raises(ParamsError, match="annotation.grid.trajectories"):
        parse_params(_raw_with("annotation.grid.trajectories", [1, 5]))
    # Eq. 4's constants have one home: params.yaml (no defaults in the code)
    scoring_raw = _raw_with("annotation.scoring", {"alpha": 0.1})
    with pytest.raises(ParamsError, match="annotation.scoring.beta"):
        parse_params(scoring_raw)


def _decisions():
    return [Decision("u-1", "s", "1", 2.0, "sampled"), Decision("u-2", "s", "2", 1.5, "generated"),
            Decision("u-3", "s", "1", 3.0, "sampled"), Decision("u-4", "s", "tie", 0.2),
            Decision("u-5", "s", "unparsable")]


def test_summary_counts_and_plpf_reference_row():
    class R:
        name, decisions, pairs = "s", _decisions(), [object()] * 3
    table = analysis.summary_table([R])
    row = table.iloc[0]
    assert [row[k] for k in ("items", "decisive", "ties", "unusable", "pairs")] == [5, 3, 1, 1, 3]
    assert row.tie_ratio == pytest.approx(0.25)
    assert row.win_ratio_sampled_generated == pytest.approx(2.0)
    assert row.margin_median == pytest.approx(1.75)
    assert table.iloc[1].win_ratio_sampled_generated == analysis.PLPF_REPORTED_WIN_RATIO
    prefs = analysis.source_preferences([R])
    assert prefs.iloc[0][["sampled", "generated", "tie", "unusable"]].tolist() == \
        pytest.approx([0.4, 0.2, 0.2, 0.2])


def test_grid_cells_follow_params():
    from medpref.stagekit import open_stage

    assert grid.cell_stage("dep", 2) == "04_annotation_grid_dep_2"
    stage = open_stage("04_annotation_grid", weighting="avg", trajectory=3)
    assert stage.key == "annotation" and stage.name == "04_annotation_grid_avg_3"
    assert stage.report("metrics.json").parts[-4:] == ("04_annotation", "grid", "avg_3",
                                                       "metrics.json")
    assert stage.data("pairs.jsonl").parts[-3:] == ("grid", "avg_3", "pairs.jsonl")
    assert open_stage("04_annotation_grid_table").reports_dir.parts[-2:] == (
        "04_annotation", "grid_table")
    with pytest.raises(ValueError, match="not in annotation.grid"):
        open_stage("04_annotation_grid", weighting="dep", trajectory=4)


# -- the real REM scorer, small (loads the embedded model) --------------------------------------
@pytest.mark.slow
def test_cai_with_embedded_rem_scores_once_then_hits_the_cache(tmp_path, embedded_llm_path):
    from medpref.annotation.grid import GridStage
    from medpref.annotation.stage import rem_scorer, run_cai, score_states
    from medpref.stagekit import Stage

    raw = _raw_with("shared.llm.cache_dir", str(tmp_path / "cache"))
    raw["shared"]["llm"]["roles"]["rem"] = {"backend": "hf", "model": str(embedded_llm_path),
                                            "batch_size": 4}
    raw["rem"]["scorers"]["zero_shot"] = {"mode": "expected", "detail": "short"}  # fast
    raw["annotation"]["rem_scorer"] = "zero_shot"
    params = parse_params(raw)
    items = [make_item("u-1", "How long have you had the cough, and any fever?",
                       "It is a cold, take rest.", rounds=1)]

    def run_once(name):
        stage = (Stage if name == "04_annotation" else GridStage)(name=name, params=params)
        scorer = rem_scorer(stage, FLOWCHART)
        scored = score_states(items, scorer, FLOWCHART, trajectory=1)
        result = run_cai(items, scored, FLOWCHART, stage.p, "dep")
        ledger = stage.llm.ledger.totals()["total"]
        stage.close()
        return scored, result, ledger

    scored, result, cold = run_once("04_annotation")
    assert len(scored.judgements) == 2  # 2 candidates × 1 state
    assert all(0.0 <= j.score <= 2.0 for js in scored.judgements.values() for j in js.values())
    assert result.decisions[0].outcome in ("1", "2", "tie")
    assert cold["calls"] == 2 * len(FLOWCHART) and cold["cache_hits"] == 0
    _, again, warm = run_once("04_annotation_grid_dep_1")  # another file, same folder
    assert warm["calls"] == 0 and warm["cache_hits"] == 2 * len(FLOWCHART)
    assert again.decisions[0].detail["scores"] == result.decisions[0].detail["scores"]


def test_threshold_sweep_counts_survivors():
    class R:
        name, decisions = "cai_dep", [Decision("u-1", "cai_dep", "tie", 0.3),
                                      Decision("u-2", "cai_dep", "1", 1.2, "sampled"),
                                      Decision("u-3", "cai_dep", "tie", 0.05),
                                      Decision("u-4", "cai_dep", "unscored")]
    row = analysis.threshold_sweep([R], thresholds=(1.0, 0.25, 0.05)).iloc[0]
    assert [row["t=1"], row["t=0.25"], row["t=0.05"], row["scored"]] == [1, 2, 3, 3]
