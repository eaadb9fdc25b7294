"""Stage 03 (rules and REM): rules file, task format, parsing, scorers, metrics."""

from __future__ import annotations

import json
import math
import os

import pytest
import yaml

from medpref import REPO_ROOT
from medpref.contracts import RemAnnotation, Turn, read_jsonl
from medpref.llm.client import LLMClient
from medpref.llm.scripted import ScriptedBackend
from medpref.llm.types import CallSpec, GenerationParams
from medpref.params import load_params, parse_params
from medpref.prompts import load_prompt
from medpref.rem.evaluation import confusion, match_metrics, to_label
from medpref.remscore.compliance import cut_at_final_doctor_turn, rule_compliance
from medpref.remscore.scorers import build_scorer, judgement_from_samples
from medpref.remscore.task import (
    COMMENT_PREFIX,
    build_messages,
    format_answer,
    parse_judgement,
    rule_text,
    select_examples,
)
from medpref.rules import RulesError, load_rules
from medpref.rules.flowchart import parse_rules

RULES = REPO_ROOT / "configs" / "rules" / "plpf_flowchart.yaml"
ICL = REPO_ROOT / "data" / "embedded" / "rem" / "icl_examples.jsonl"
ANNOTATIONS = REPO_ROOT / "data" / "embedded" / "rem" / "annotations.jsonl"
REM_CALL = CallSpec("rem", "rem_judge", 64, COMMENT_PREFIX)


@pytest.fixture(scope="module")
def flowchart():
    return load_rules(RULES)


@pytest.fixture(scope="module")
def icl():
    return read_jsonl(ICL, RemAnnotation)


def _rules_data():
    return yaml.safe_load(RULES.read_text(encoding="utf-8"))


STATE = [Turn(role="patient", text="I have had a cough for a week."),
         Turn(role="doctor", text="Any fever or shortness of breath?")]


# -- the rules file -------------------------------------------------------------------------
def test_rules_file_is_the_plpf_flowchart(flowchart):
    assert flowchart.ids == ["A", "B", "C", "D", "E", "F"]
    assert [g.id for g in flowchart.goals] == ["A", "B", "C"]
    assert flowchart["B"].predecessors == ("A",) and flowchart["C"].predecessors == ("B",)
    assert flowchart.constrained_goals("D") == ["B", "C"]
    assert flowchart.constrained_goals("E") == ["A", "B", "C"]
    assert flowchart.constrained_goals("F") == ["A", "B", "C"]
    assert any("AI" in h or "AI" in flowchart["E"].text for h in flowchart["E"].hints)
    for rule in flowchart:
        assert set(rule.criteria) == {0, 1, 2}
    for cid in ("D", "F"):  # our own choices: the file says why
        assert flowchart[cid].rationale


def test_rules_cycle_is_an_error_naming_the_rules():
    data = _rules_data()
    data[0]["predecessors"] = ["C"]  # A ≺ ... ≺ C ≺ A
    with pytest.raises(RulesError, match=r"cycle: .*A.*C|cycle: .*C.*A") as err:
        parse_rules(data, "edited.yaml")
    assert "edited.yaml" in str(err.value)


def test_rules_unknown_id_is_an_error_naming_it():
    data = _rules_data()
    data[1]["constrained_by"] = ["D", "Z"]
    with pytest.raises(RulesError, match=r"rule 'B': refers to unknown rule 'Z'"):
        parse_rules(data, "edited.yaml")


def test_rules_missing_score_level_is_an_error_naming_the_rule():
    data = _rules_data()
    del data[2]["criteria"][1]
    with pytest.raises(RulesError, match=r"rule 'C': field 'criteria'"):
        parse_rules(data)


# -- task format ----------------------------------------------------------------------------
def test_rule_text_full_has_criteria_short_does_not(flowchart):
    full, short = rule_text(flowchart["A"], "full"), rule_text(flowchart["A"], "short")
    assert full.startswith("Rule A (Validation):") and short.startswith("Rule A (Validation):")
    assert "- 2:" in full and "- 0:" in full and "- 2:" not in short


def test_select_examples_covers_every_score_first(icl):
    for rule in "ABCDEF":
        three = select_examples(icl, rule, 3)
        assert sorted(e.score for e in three) == [0, 1, 2]
        assert len(select_examples(icl, rule, 5)) == 5
    assert select_examples(icl, "A", 0) == []


def test_messages_put_examples_as_earlier_turns(flowchart, icl):
    shots = select_examples(icl, "B", 2)
    msgs = build_messages(load_prompt("rem_judge"), flowchart["B"], STATE, shots)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant",
                                         "user"]
    assert "Rule B (Diagnosis)" in msgs[-1]["content"]
    assert msgs[2]["content"].endswith(f"Score: {shots[0].score}")
    assert "Doctor: Any fever or shortness of breath?" in msgs[-1]["content"]


def test_format_answer_both_orders():
    assert format_answer("Asks  about\nfever.", 2) == "Comment: Asks about fever.\nScore: 2"
    assert format_answer("ok", 0, "score_first") == "Score: 0\nComment: ok"


# -- parsing golden answers -----------------------------------------------------------------
@pytest.mark.parametrize("raw, comment, score", [
    ("Comment: The doctor asks about fever.\nScore: 2", "The doctor asks about fever.", 2),
    ("Score: 0\nComment: No diagnosis yet.", "No diagnosis yet.", 0),
    ("comment: partial. score: 1", "partial.", 1),
    ("Comment: fine\nScore: **2**", "fine", 2),
    ("Comment: fine\nScore: 1/2", "fine", 1),
    ("Comment: ok\nScore: 2\nConsultation:\nPatient: hi\nScore: 0", "ok", 2),  # first counts
    ("The doctor gathers history. Score = 2", "The doctor gathers history.", 2),
    ("1", "", 1),
    ("Comment: clear.\nScore: 2.0", "clear.", 2),
    ("Comment: Answer this:\nScores: 2 = fully follows it",  # echoed instructions
     "Answer this: Scores: 2 = fully follows it", None),
])
def test_parse_golden(raw, comment, score):
    parsed = parse_judgement(raw)
    assert (parsed.comment, parsed.score) == (comment, score)


@pytest.mark.parametrize("raw", [
    "Comment: The doctor did well.",           # no score at all
    "Comment: good\nScore: 3",                 # out of range
    "Comment: good\nScore: 1.5",               # not a level
    "Comment: good\nScore: 4/5",               # another scale
    "I am sorry, I cannot evaluate medical conversations.",
    "",
])
def test_parse_unparsable_is_none_not_zero(raw):
    assert parse_judgement(raw).score is None


def test_samples_average_ignores_unparsable_and_counts_it():
    j = judgement_from_samples("A", ["Comment: a\nScore: 2", "Comment: b", None,
                                     "Comment: c\nScore: 1"])
    assert j.score == pytest.approx(1.5)
    assert j.samples == [2.0, None, None, 1.0]
    assert j.unparsable == 2
    none = judgement_from_samples("A", ["no idea", "Score: 9"])
    assert none.score is None and none.unparsable == 2


# -- scorers over scripted backends ---------------------------------------------------------
def _client(responder, option_responder=None):
    backend = ScriptedBackend(responder, option_responder=option_responder)
    return LLMClient("rem", backend, GenerationParams(max_new_tokens=32)), backend


def test_sampled_scorer_averages_k_seeded_samples(flowchart, icl):
    def responder(req):  # the answer depends on the seed: 2, 1, unparsable, 2, ...
        return {0: " ok\nScore: 2", 1: " meh\nScore: 1", 2: " ???"}[req.params.seed % 3]

    client, backend = _client(responder)
    scorer = build_scorer("sampled", client, flowchart, icl, k=3, seed=0, n_examples=3,
                          call=REM_CALL)
    out = scorer.score_states([STATE, STATE[:1] + [STATE[1]]], [flowchart["A"], flowchart["E"]])
    assert len(out) == 2 and set(out[0]) == {"A", "E"}
    j = out[0]["A"]
    assert j.score == pytest.approx(1.5) and j.unparsable == 1 and len(j.comments) == 3
    assert j.comments[0].startswith("Comment: ok")
    seeds = sorted({r.params.seed for r in backend.requests})
    assert seeds == [0, 1, 2] and all(r.params.temperature == 0.7 for r in backend.requests)
    assert all(r.prefix == "Comment:" for r in backend.requests)


def test_expected_score_equals_hand_computed_sum(flowchart, icl):
    probs = {"0": 0.2, "1": 0.3, "2": 0.5}  # Σ k·p(k) = 0·0.2 + 1·0.3 + 2·0.5 = 1.3
    seen = []

    def options(prompt, opts, prefix):
        seen.append((tuple(opts), prefix, prompt[-2]["content"]))
        return dict(probs)

    client, backend = _client(lambda r: "unused", options)
    scorer = build_scorer("expected", client, flowchart, icl, k=5, seed=0, n_examples=3,
                          call=REM_CALL)
    j = scorer.score_states([STATE], [flowchart["C"]])[0]["C"]
    assert j.score == pytest.approx(1.3)
    assert j.probs == probs and j.unparsable == 0
    assert seen[0][0] == ("0", "1", "2") and seen[0][1] == "Score: "
    assert seen[0][2].startswith("Score: ")  # in-context answers are score-first here
    assert backend.requests == []          # one pass, no generation


def test_expected_with_comment_scores_after_the_greedy_comment(flowchart, icl):
    prefixes = []

    def options(prompt, opts, prefix):
        prefixes.append(prefix)
        return {"0": 0.0, "1": 1.0, "2": 0.0}

    client, backend = _client(lambda r: " The doctor asks about fever.\nScore: 2", options)
    scorer = build_scorer("expected", client, flowchart, icl, k=1, seed=0, comment=True,
                          call=REM_CALL)
    j = scorer.score_states([STATE], [flowchart["A"]])[0]["A"]
    assert prefixes == ["Comment: The doctor asks about fever.\nScore: "]  # cut at Score:
    assert j.score == pytest.approx(1.0) and backend.requests[0].params.temperature == 0.0


def test_finetuned_scorer_is_zero_shot_with_short_rule(flowchart, icl):
    prompts = []

    def options(prompt, opts, prefix):
        prompts.append(prompt)
        return {"0": 1.0, "1": 0.0, "2": 0.0}

    client, _ = _client(lambda r: " nothing asked", options)
    scorer = build_scorer("finetuned", client, flowchart, icl, call=REM_CALL, k=1, seed=0)
    assert scorer.name == "finetuned"
    j = scorer.score_states([STATE], [flowchart["D"]])[0]["D"]
    assert j.score == 0.0
    assert [m["role"] for m in prompts[0]] == ["system", "user"]
    assert "Scoring criteria" not in prompts[0][-1]["content"]


def test_one_state_asked_every_rule_shares_all_but_the_rule(flowchart):
    """The consultation comes before the rule, so the six prompts of one state differ
    only at their end: a local backend runs their common beginning once."""
    texts = []
    for rule in flowchart.rules:
        msgs = build_messages(load_prompt("rem_judge"), rule, STATE, (), "short")
        texts.append("".join(m["content"] for m in msgs))
    common = len(os.path.commonprefix(texts))
    assert "Doctor: Any fever or shortness of breath?" in texts[0][:common]
    for rule, text in zip(flowchart.rules, texts):  # what differs is the rule and the question
        assert text[common:].startswith(rule_text(rule, "short")[common - text.index("Rule "):])


def test_unknown_mode_and_foreign_examples_are_errors(flowchart, icl):
    client, _ = _client(lambda r: "")
    with pytest.raises(ValueError, match=r"rem.scorers.<name>.mode: no REM scorer mode "
                                         r"'greedy' \(known: encoder, expected, finetuned, length, "
                                         r"majority, sampled, surface\)"):
        build_scorer("greedy", client, flowchart, icl, call=REM_CALL)
    bad = [icl[0].model_copy(update={"rule": "Q"})]
    with pytest.raises(ValueError, match=r"\['Q'\]"):
        build_scorer("sampled", client, flowchart, bad, call=REM_CALL)


# -- metrics ----------------------------------------------------------------------------------
def test_to_label_rounds_half_up():
    assert [to_label(x) for x in (0.0, 0.49, 0.5, 1.49, 1.5, 2.0, None)] == [0, 0, 1, 1, 2, 2,
                                                                             None]


def test_exact_and_fuzzy_match_hand_computed():
    golds = [2, 2, 0, 1, 1, 0]
    preds = [2.0, 0.2, 1.6, 1.0, None, 0.4]
    # labels:  2, 0, 2, 1, none, 0 → exact 3/6; fuzzy errors: 2→0, 0→2, none → 3/6
    m = match_metrics(golds, preds)
    assert m["exact"] == pytest.approx(3 / 6) and m["fuzzy"] == pytest.approx(3 / 6)
    assert m["coverage"] == pytest.approx(5 / 6)
    assert m["mae"] == pytest.approx((0 + 1.8 + 1.6 + 0 + 0.4) / 5)
    table = confusion(golds, preds)
    assert table.loc[2, 0] == 1 and table.loc[0, 2] == 1 and table.loc[1, "none"] == 1
    assert int(table.values.sum()) == 6
    assert math.isnan(match_metrics([], [])["exact"])


def test_labels_sampled_round_the_mean_probability_scorers_take_the_argmax():
    from medpref.remscore.base import RuleJudgement
    from medpref.remscore.scorers import ExpectedJudgement

    assert RuleJudgement("A", 1.5).label == 2 and RuleJudgement("A", None).label is None
    flat = ExpectedJudgement("A", 0.96, probs={"0": 0.36, "1": 0.32, "2": 0.32})
    assert flat.label == 0          # near-uniform: Σ s·p(s) ≈ 1, but 0 is most probable
    tie = ExpectedJudgement("A", 1.0, probs={"0": 0.4, "1": 0.2, "2": 0.4})
    assert tie.label == 0           # a tie goes to the lower score
    assert ExpectedJudgement("A", None, probs={}).label is None


def test_fuzzy_over_gold_0_and_2_hand_labels():
    """Over all items a gold 1 is always fuzzy-correct; fuzzy02 keeps gold 0/2 only."""
    golds = [1, 1, 1, 1, 2, 2, 0, 0]
    labels = [0, 2, 1, None, 0, 1, 1, 2]
    # fuzzy errors: none (gold 1), 2→0, 0→2 → 5/8; over gold 0/2 (4 items): 2→0, 0→2 → 2/4
    m = match_metrics(golds, [None if lab is None else float(lab) for lab in labels], labels)
    assert m["fuzzy"] == pytest.approx(5 / 8)
    assert m["n02"] == 4 and m["fuzzy02"] == pytest.approx(2 / 4)
    assert math.isnan(match_metrics([1, 1], [1.0, 1.0])["fuzzy02"])  # no gold 0/2 item


def test_near_constant_scorer_is_flagged():
    from medpref.rem.evaluation import label_spread

    golds = [0, 2, 1, 0, 2, 1, 1, 0, 2, 1, 2]
    ones = [1] * 10 + [2]  # one label on 10 of 11 items
    m = match_metrics(golds, [float(x) for x in ones], ones)
    assert m["fuzzy"] == 1.0 and m["fuzzy02"] == 1.0  # why the flag is needed
    spread = label_spread(ones, 0.9)
    assert spread["top_label"] == 1 and spread["top_label_share"] == pytest.approx(10 / 11)
    assert spread["near_constant"] is True
    assert label_spread([0, 1, 2, 1, None], 0.9)["near_constant"] is False
    assert label_spread([None], 0.9)["top_label"] is None


def test_state_value_label_is_the_greedy_score_expected_the_mean():
    from medpref.remscore.scorers import expected_judgement

    class Scores:
        probs, mass = {"0": 0.3, "1": 0.25, "2": 0.45}, 0.9

        def expected(self):
            return sum(int(k) * v for k, v in self.probs.items())

    assert expected_judgement("A", Scores(), None).score == pytest.approx(1.15)
    label = expected_judgement("A", Scores(), None, "label")
    assert label.score == 2.0 and label.label == 2 and label.samples == [2.0]
    assert expected_judgement("A", None, None, "label").score is None


def test_match_metrics_on_given_labels():
    golds, preds = [0, 2, 1], [0.96, 1.04, 1.0]
    assert match_metrics(golds, preds)["exact"] == pytest.approx(1 / 3)   # all round to 1
    m = match_metrics(golds, preds, labels=[0, 2, None])
    assert m["exact"] == pytest.approx(2 / 3) and m["fuzzy"] == pytest.approx(2 / 3)
    assert m["mae"] == pytest.approx((0.96 + 0.96 + 0.0) / 3)  # MAE uses the scores
    assert confusion(golds, preds, [0, 2, None]).loc[1, "none"] == 1
    with pytest.raises(ValueError, match="3 predictions but 2 labels"):
        match_metrics(golds, preds, labels=[0, 2])


# -- compliance -------------------------------------------------------------------------------
def test_cut_at_final_doctor_turn():
    turns = STATE + [Turn(role="patient", text="No fever.")]
    assert cut_at_final_doctor_turn(turns) == STATE
    with pytest.raises(ValueError):
        cut_at_final_doctor_turn(STATE[:1])


def test_rule_compliance_is_the_per_rule_mean(flowchart, icl):
    by_rule = {"A": {"0": 0, "1": 0, "2": 1.0}, "B": {"0": 1.0, "1": 0, "2": 0}}

    def options(prompt, opts, prefix):
        rule = prompt[-1]["content"].split("Rule ")[1][0]
        return dict(by_rule.get(rule, {"0": 0, "1": 1.0, "2": 0}))

    client, _ = _client(lambda r: "", options)
    scorer = build_scorer("expected", client, flowchart, icl, call=REM_CALL, n_examples=1)
    table = rule_compliance([STATE, STATE], scorer, flowchart.rules)
    assert list(table["rule"]) == list("ABCDEF")
    assert list(table["mean"]) == [2.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    assert list(table["n"]) == [2] * 6 and list(table["unusable"]) == [0] * 6


# -- params and data --------------------------------------------------------------------------
def test_rem_params_reject_unknown_keys_and_bad_values():
    from medpref.params import ParamsError

    raw = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())["rem"]
    with pytest.raises(ParamsError, match="unknown key 'rem.kk'"):
        parse_params({"rem": {**raw, "kk": 3}})
    with pytest.raises(ParamsError, match="'rem.train.recipe.r'"):
        parse_params({"rem": {**raw, "train": {**raw["train"], "recipe": {
            **raw["train"]["recipe"], "r": 0}}}})
    with pytest.raises(ParamsError, match="'rem.scorers.finetuned'"):  # the card decides
        parse_params({"rem": {**raw, "scorers": {**raw["scorers"], "finetuned": {
            "mode": "finetuned", "detail": "full"}}}})
    with pytest.raises(ParamsError, match="'rem.scorers.expected'"):  # k is for sampling
        parse_params({"rem": {**raw, "scorers": {**raw["scorers"], "expected": {
            "mode": "expected", "k": 5}}}})
    with pytest.raises(ParamsError, match="'rem.scorers.sampled'"):  # v = mean of samples
        parse_params({"rem": {**raw, "scorers": {**raw["scorers"], "sampled": {
            "mode": "sampled", "k": 2, "state_value": "label"}}}})
    with pytest.raises(ParamsError, match="compliance_scorers"):
        parse_params({"rem": {**raw, "compliance_scorers": ["greedy"]}})
    assert list(parse_params({"rem": raw}).rem.scorers) == [
        "sampled", "expected", "finetuned", "encoder", "encoder_blind", "majority", "length",
        "surface"]


def test_embedded_annotations_cover_every_rule_and_split(flowchart):
    anns = read_jsonl(ANNOTATIONS, RemAnnotation)
    for rule in flowchart.ids:
        rows = [a for a in anns if a.rule == rule]
        assert len(rows) >= 30
        assert {a.split for a in rows} == {"train", "test"}
        assert all(a.history[-1].role == "doctor" for a in rows)


# -- stage pieces -----------------------------------------------------------------------------
def test_flowchart_layout_and_figure(flowchart, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from medpref.rem.figures import draw_flowchart, flowchart_layout, goal_order
    from medpref.reports import save_figure

    assert goal_order(flowchart) == ["A", "B", "C"]
    pos = flowchart_layout(flowchart)
    assert [pos[g][1] for g in "ABC"] == [1.0] * 3 and [pos[c][1] for c in "DEF"] == [0.0] * 3
    assert pos["A"][0] < pos["B"][0] < pos["C"][0]
    path = save_figure(draw_flowchart(flowchart), tmp_path / "flowchart.png")
    assert path.stat().st_size > 10_000


def test_stage_eval_subset_and_sft_examples():
    from medpref.rem.build_rem import load_inputs, sft_examples

    inputs = load_inputs(load_params().rem)
    subset = inputs.split("test", per_rule=3)
    assert len(subset) == 18 and all(a.split == "test" for a in subset)
    for rule in "ABCDEF":
        assert sorted(a.score for a in subset if a.rule == rule) == [0, 1, 2]
    hand = [a for a in inputs.annotations if a.id.startswith("r-")]
    assert len(hand) == 252        # every hand row, beside the constructed ones
    splits = {"train", "dev", "test", "turns_dev"}   # turns_dev: the labelled turns' dev part
    assert sum(len(inputs.split(s)) for s in splits) == len(inputs.annotations)
    ex = sft_examples(subset[:1], inputs.flowchart, "rem_judge", "short")[0]
    assert [m["role"] for m in ex["prompt"]] == ["system", "user"]
    assert ex["completion"] == [{"role": "assistant", "content": (
        f"Comment: {' '.join(subset[0].comment.split())}\nScore: {subset[0].score}")}]
    first = sft_examples(subset[:1], inputs.flowchart, "rem_judge", "short", "score_first")[0]
    assert first["completion"][0]["content"].startswith(f"Score: {subset[0].score}\nComment: ")
    assert "Score: <0, 1 or 2>\nComment:" in first["prompt"][0]["content"]


@pytest.mark.parametrize("order, comment_calls", [("comment_first", 1), ("score_first", 0)])
def test_stage_finetuned_scorer_follows_the_trained_answer_order(flowchart, order,
                                                                  comment_calls, tmp_path):
    """A REM trained score-first is read in one pass; comment-first writes a comment. The
    order comes from the adapter's task card, as in stage 04 (one builder for both)."""
    from medpref.finetune.sft import TASK_CARD
    from medpref.rem.build_rem import RemInputs, make_scorer

    prefixes = []

    def options(prompt, opts, prefix):
        prefixes.append(prefix)
        return {"0": 0.0, "1": 0.0, "2": 1.0}

    client, backend = _client(lambda r: " asks about the fever.\nScore: 2", options)
    adapters = []

    class Session:  # what make_scorer needs of an LLMSession
        def role(self, name, adapter=None):
            adapters.append(adapter)
            return client

    adapter = tmp_path / "rem_lora"
    adapter.mkdir()
    (adapter / TASK_CARD).write_text(json.dumps({"answer_order": order,
                                                 "rule_detail": "short"}))
    p = load_params().rem
    p = p.model_copy(update={"train": p.train.model_copy(update={"adapter_dir": str(adapter)})})
    scorer = make_scorer("finetuned", Session(), p, RemInputs(flowchart, [], []), seed=0)
    assert scorer.name == "finetuned" and adapters == [str(adapter)]
    j = scorer.score_states([STATE], [flowchart["A"]])[0]["A"]
    assert j.score == 2.0 and len(backend.requests) == comment_calls
    assert prefixes == (["Score: "] if order == "score_first"
                        else ["Comment: asks about the fever.\nScore: "])
    with pytest.raises(KeyError, match="no REM scorer 'greedy'"):
        make_scorer("greedy", Session(), p, RemInputs(flowchart, [], []), seed=0)


def test_stage_scorer_without_adapter_is_an_error_naming_it(flowchart, tmp_path):
    from medpref.rem.build_rem import RemInputs, make_scorer

    p = load_params().rem
    p = p.model_copy(update={"train": p.train.model_copy(
        update={"adapter_dir": str(tmp_path / "missing")})})
    with pytest.raises(FileNotFoundError, match="no adapter at .*missing"):
        make_scorer("finetuned", None, p, RemInputs(flowchart, [], []), seed=0)


def test_annotation_with_unknown_rule_is_an_error_naming_it(tmp_path):
    from medpref.rem.build_rem import load_inputs

    bad = tmp_path / "ann.jsonl"
    bad.write_text('{"id": "r-9", "rule": "Z", "history": [], "score": 1, "comment": "x"}\n')
    with pytest.raises(ValueError, match=r"record 'r-9': unknown rule 'Z'"):
        load_inputs(load_params().rem.model_copy(update={"annotations": str(bad)}))
