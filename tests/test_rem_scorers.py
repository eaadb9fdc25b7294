"""The fitted REM scorers (encoder REM and baselines), Table 5's extra columns, the
development-split choice, the paired interval and the independent test's loader and κ."""

from __future__ import annotations

import json
import zlib

import numpy as np
import pytest

from medpref import REPO_ROOT
from medpref.contracts import ContractError, Turn
from medpref.registry import REM_SCORERS
from medpref.rem.config import RemScorerSettings
from medpref.rem.eval_sets import EvalItem, state_id, stratified_subset
from medpref.rem.evaluation import never_predicted, paired_accuracy_difference, rule_ordering
from medpref.rem.independent import (
    cohen_kappa,
    independent_items,
    kappa_rows,
    load_independent,
)
from medpref.rem.table5 import chosen_scorer, paired_table, selection_table, table5_rows
from medpref.remscore.features import StateFeatures, WordLists, state_parts
from medpref.remscore.fitted import (
    FittedScorer,
    Item,
    fit_model,
    load_model,
    save_model,
)
from medpref.rules import load_rules

RULES = ("A", "B", "C", "D", "E", "F")


@pytest.fixture(scope="module")
def flowchart():
    return load_rules(REPO_ROOT / "configs/rules/plpf_flowchart.yaml")


def bag_of_words(texts):
    """A stand-in sentence encoder: hashed word counts, L2-normalised (deterministic)."""
    out = np.zeros((len(texts), 64), dtype=np.float32)
    for i, text in enumerate(texts):
        for word in text.lower().replace("?", " ?").split():
            out[i, zlib.crc32(word.encode()) % 64] += 1.0
        norm = np.linalg.norm(out[i])
        out[i] /= norm if norm else 1.0
    return out


WORDS = WordLists(disease=frozenset({("appendicitis",), ("migraine",)}),
                  test=frozenset({("blood", "test"), ("scan",)}))


def features() -> StateFeatures:
    return StateFeatures(bag_of_words, lambda: WORDS)


def state(doctor: str, patient: str = "My belly hurts.") -> list[Turn]:
    return [Turn(role="patient", text=patient), Turn(role="doctor", text=doctor)]


ASKS = ["Does it hurt more when you cough?", "When did the pain start?",
        "Have you had a fever?", "Is the pain worse after meals?",
        "Did you vomit today?", "Does walking make it worse?"]
TELLS = ["This is appendicitis, get a blood test today.",
         "It looks like appendicitis, you need a scan.",
         "Most likely appendicitis; a blood test will confirm it.",
         "I think it is appendicitis, please book a scan.",
         "Appendicitis is likely, do a blood test and a scan.",
         "This sounds like appendicitis, get a scan now."]


def rule_matters_items(asks, tells) -> list[Item]:
    """The same turn, a different label per rule: A (gather first) credits asking, B
    (diagnose) credits naming the disease and its test."""
    return ([Item("A", state(t), 2) for t in asks] + [Item("A", state(t), 0) for t in tells]
            + [Item("B", state(t), 0) for t in asks] + [Item("B", state(t), 2) for t in tells])


def fit(mode: str, train, dev=(), **settings):
    s = RemScorerSettings(mode=mode, **settings)
    spec = REM_SCORERS.get(mode).build(s)
    return fit_model(mode, mode, spec, list(train), list(dev), features(), [0.1, 1.0, 10.0],
                     seed=0)


# -- the baselines ------------------------------------------------------------------------------
def test_length_only_prefers_the_length_side(flowchart):
    short = ["Any fever?", "Pain where?", "Since when?", "Cough too?"]
    long = [" ".join(["word"] * n) for n in (30, 40, 50, 60)]
    train = [Item("A", state(t), 0) for t in short] + [Item("A", state(t), 2) for t in long]
    scorer = FittedScorer(fit("length", train), features(), flowchart)
    judged = scorer.score_states([state("Why?"), state(" ".join(["long"] * 45))],
                                 [flowchart["A"]])
    assert judged[0]["A"].label == 0 and judged[1]["A"].label == 2
    assert judged[1]["A"].score > judged[0]["A"].score


def test_majority_predicts_each_rules_majority(flowchart):
    train = ([Item("A", state(f"q{i}?"), 2) for i in range(3)] + [Item("A", state("x"), 0)]
             + [Item("B", state(f"q{i}?"), 1) for i in range(3)] + [Item("B", state("y"), 2)])
    model = fit("majority", train)
    assert model.heads["A"].prior == [0.25, 0.0, 0.75]
    judged = FittedScorer(model, features(), flowchart).score_states(
        [state("anything at all")], [flowchart["A"], flowchart["B"]])[0]
    assert (judged["A"].label, judged["B"].label) == (2, 1)
    assert judged["A"].score == pytest.approx(0.25 * 0 + 0.75 * 2)


def test_surface_reads_the_question_mark_and_the_word_lists(flowchart):
    train = ([Item("B", state(t), 0) for t in ASKS] + [Item("B", state(t), 2) for t in TELLS])
    model = fit("surface", train)
    scorer = FittedScorer(model, features(), flowchart)
    judged = scorer.score_states([state("Any vomiting?"), state("A migraine; do a scan.")],
                                 [flowchart["B"]])
    assert [j["B"].label for j in judged] == [0, 2]
    assert features().matrix("surface", [state("A migraine; do a scan.")]).tolist() == [
        [0.0, 1.0, 1.0]]


def test_rule_blind_gives_one_score_to_every_rule_of_a_state(flowchart):
    model = fit("encoder", rule_matters_items(ASKS, TELLS), rule_blind=True)
    assert list(model.heads) == ["*"]
    judged = FittedScorer(model, features(), flowchart).score_states(
        [state(ASKS[0]), state(TELLS[0])])
    for by_rule in judged:
        assert len({round(j.score, 12) for j in by_rule.values()}) == 1
        assert set(by_rule) == set(RULES)


# -- the encoder REM ----------------------------------------------------------------------------
def test_encoder_separates_what_the_rule_decides_and_the_rule_blind_one_cannot(flowchart):
    train = rule_matters_items(ASKS[:4], TELLS[:4])
    dev = rule_matters_items(ASKS[4:], TELLS[4:])
    held = [("Do you feel sick after eating?", 2, 0),
            ("It is appendicitis; a scan will show it.", 0, 2)]
    per_rule = FittedScorer(fit("encoder", train, dev), features(), flowchart)
    blind = FittedScorer(fit("encoder", train, dev, rule_blind=True), features(), flowchart)
    rules = [flowchart["A"], flowchart["B"]]
    right = {"rule": 0, "blind": 0}
    for scorer, key in ((per_rule, "rule"), (blind, "blind")):
        for (_, gold_a, gold_b), judged in zip(held, scorer.score_states(
                [state(t) for t, _, _ in held], rules)):
            right[key] += (judged["A"].label == gold_a) + (judged["B"].label == gold_b)
    assert right["rule"] == 4          # every (turn, rule) right
    assert right["blind"] <= 2         # one score for both rules: at most half


def test_c_is_chosen_on_the_dev_rows_and_cross_validated_without_them():
    train, dev = rule_matters_items(ASKS[:4], TELLS[:4]), rule_matters_items(ASKS[4:], TELLS[4:])
    with_dev = fit("encoder", train, dev)
    assert {h.chosen_by for h in with_dev.heads.values()} == {"dev"}
    assert set(with_dev.heads["A"].selection) == {"0.1", "1", "10"}
    assert {h.chosen_by for h in fit("encoder", train).heads.values()} == {"cv"}


def test_score_states_interface_and_the_saved_model_reads_back(flowchart, tmp_path):
    model = fit("encoder", rule_matters_items(ASKS, TELLS))
    scorer = FittedScorer(model, features(), flowchart)
    judged = scorer.score_states([state(ASKS[0]), state(TELLS[0])], [flowchart["A"]])
    assert len(judged) == 2
    for by_rule in judged:
        j = by_rule["A"]
        p = [j.probs[str(s)] for s in (0, 1, 2)]
        assert sum(p) == pytest.approx(1.0) and j.mass == 1.0
        assert j.score == pytest.approx(sum(s * x for s, x in zip((0, 1, 2), p)))
        assert j.label == int(np.argmax(p))
    as_label = FittedScorer(model, features(), flowchart, state_value="label")
    assert as_label.score_states([state(ASKS[0])], [flowchart["A"]])[0]["A"].score == 2.0
    save_model(model, tmp_path)
    back = load_model(tmp_path, "encoder")
    assert back.content_id == model.content_id
    again = FittedScorer(back, features(), flowchart).score_states([state(ASKS[0])],
                                                                   [flowchart["A"]])
    assert again[0]["A"].probs == pytest.approx(judged[0]["A"].probs)
    assert scorer.model_id.startswith("fitted:encoder:")
    with pytest.raises(KeyError, match="no classifier for rule 'C'"):
        scorer.score_states([state(ASKS[0])], [flowchart["C"]])
    with pytest.raises(FileNotFoundError, match="stage 03 fits it"):
        load_model(tmp_path, "surface")


def test_scorer_from_settings_builds_a_fitted_scorer_by_name(flowchart, tmp_path):
    from medpref.params import load_params
    from medpref.remscore.scorers import scorer_from_settings

    rem = load_params().rem
    rem = rem.model_copy(update={"fitted": rem.fitted.model_copy(
        update={"model_dir": str(tmp_path)})})
    model = fit("majority", [Item("A", state("x?"), 2)])
    model.name = "majority"
    save_model(model, tmp_path)
    scorer = scorer_from_settings("majority", rem.scorers["majority"], None, rem, flowchart,
                                  0, features())
    assert scorer.prompt is None
    assert scorer.score_states([state("y")], [flowchart["A"]])[0]["A"].label == 2


def test_fitted_settings_refuse_prompt_keys_and_rule_blind_outside_the_encoder():
    with pytest.raises(ValueError, match="reads no prompt: leave n_examples"):
        RemScorerSettings(mode="encoder", n_examples=2)
    with pytest.raises(ValueError, match="rule_blind applies to mode encoder only"):
        RemScorerSettings(mode="length", rule_blind=True)
    with pytest.raises(ValueError, match="fitted scorers only"):
        RemScorerSettings(mode="expected", rule_blind=True)
    assert RemScorerSettings(mode="encoder", rule_blind=True).fitted


def test_state_parts_and_the_lexicon_word_lists():
    parts = state_parts([Turn(role="patient", text="p1"), Turn(role="doctor", text="d1?"),
                         Turn(role="patient", text="p2"), Turn(role="doctor", text="d2")])
    assert (parts.turn, parts.patient, parts.earlier) == ("d2", "p2", ("d1?",))
    with pytest.raises(ValueError, match="ends with the doctor turn"):
        state_parts([Turn(role="patient", text="p")])
    words = WordLists.from_lexicon(REPO_ROOT / "data/embedded/lexicon",
                                   ["Disease or Syndrome"], ["Laboratory Procedure"])
    disease = " ".join(next(iter(words.disease)))
    assert words.has("disease", f"I think this is {disease}.")
    assert not words.has("disease", "Tell me more about the pain.")
    with pytest.raises(ValueError, match="no concept has semantic type"):
        WordLists.from_lexicon(REPO_ROOT / "data/embedded/lexicon", ["Made Up"], [])


# -- Table 5's columns, the dev choice and the paired interval ------------------------------------
def test_never_predicted_and_rule_ordering_hand_counts():
    assert never_predicted([2, 1, None, 2]) == [0]
    # state s1: rules with gold 2, 0, 0 -> 2 pairs with a different gold; s2: one pair
    order = rule_ordering(["s1", "s1", "s1", "s2", "s2"], [2, 0, 0, 1, 2],
                          [1.5, 0.5, 1.5, 1.0, 1.0])
    # s1: (2 vs 0): 1.5 > 0.5 right; (2 vs 0): 1.5 == 1.5 tie; s2: tie
    assert order == {"pairs": 3, "right": 1, "ties": 2, "share": pytest.approx(1 / 3)}


def test_paired_interval_worked_example():
    states = ["a", "a", "b", "b", "c", "c"]
    a = [True, True, True, False, True, True]
    b = [False, True, False, False, True, False]
    d = paired_accuracy_difference(states, a, b, rounds=2000, seed=7)
    assert d["diff"] == pytest.approx((5 - 2) / 6) and d["states"] == 3
    # per-state differences 1, 1, 1 (of 2 items each): every resample gives 3/6
    assert d["lo"] == pytest.approx(0.5) and d["hi"] == pytest.approx(0.5)
    assert d["excludes_0"]
    mixed = paired_accuracy_difference(["a", "b", "c", "d"], [True, False, True, False],
                                       [False, True, False, True], rounds=2000, seed=7)
    assert mixed["diff"] == 0 and mixed["lo"] < 0 < mixed["hi"] and not mixed["excludes_0"]
    assert mixed == paired_accuracy_difference(["a", "b", "c", "d"], [True, False, True, False],
                                               [False, True, False, True], rounds=2000, seed=7)


def _pred(scorer, eval_set, i, rule, gold, label, subset=True):
    return {"scorer": scorer, "eval_set": eval_set, "id": f"{eval_set}{i}:{rule}",
            "state": f"{eval_set}{i}", "rule": rule, "gold": gold, "label": label,
            "score": float(label), "llm_subset": subset}


def _run(scorer, eval_set, items="all"):
    return {"scorer": scorer, "eval_set": eval_set, "items": items, "method": scorer,
            "wall_s": 0.0, "calls": 0, "cache_hits": 0}


def test_the_dev_split_chooses_and_the_test_split_does_not():
    preds = []
    for i in range(4):        # dev: "good" right on every item, "bad" on none
        preds += [_pred("good", "dev", i, "A", 2, 2), _pred("bad", "dev", i, "A", 2, 0)]
        # test: the reverse, which must not change the choice
        preds += [_pred("good", "test", i, "A", 2, 0), _pred("bad", "test", i, "A", 2, 2)]
    runs = [_run(s, e) for e in ("dev", "test") for s in ("good", "bad")]
    sel = selection_table(runs, preds)
    assert chosen_scorer(sel) == "good"
    assert sel.set_index("scorer").loc["good", "exact_common_%"] == 100.0
    table = table5_rows(runs, preds, 0.9, "test")
    assert table.set_index("scorer").loc["good", "never_predicted"] == "1, 2"
    paired = paired_table(preds, "good", ["bad"], ["A"], 1000, 0, sets={"test": ("test",)})
    row = paired[paired["scope"] == "all"].iloc[0]
    assert (row["diff_pp"], row["lo_pp"], row["hi_pp"]) == (-100.0, -100.0, -100.0)


def test_selection_compares_every_scorer_on_the_items_all_of_them_scored():
    preds = [_pred("cheap", "dev", i, "A", 2, 2 if i < 2 else 0) for i in range(6)]
    preds += [_pred("llm", "dev", i, "A", 2, 2) for i in range(2)]   # its subset: items 0, 1
    sel = selection_table([_run("cheap", "dev"), _run("llm", "dev", "llm_subset")], preds)
    by = sel.set_index("scorer")
    assert by.loc["cheap", "n_common"] == 2 and by.loc["cheap", "n"] == 6
    assert by.loc["cheap", "exact_common_%"] == 100.0 and by.loc["llm", "exact_common_%"] == 100.0
    assert chosen_scorer(sel) == "cheap"      # a tie on the common items: the first listed


def test_stratified_subset_is_seeded_and_covers_every_rule_and_score():
    items = [EvalItem(f"{r}{s}{i}", r, [], s, f"st{i}") for r in "AB" for s in (0, 1, 2)
             for i in range(10)]
    sub = stratified_subset(items, 12, seed=3)
    assert len(sub) == 12 and sub == stratified_subset(items, 12, seed=3)
    assert {(it.rule, it.score) for it in sub} == {(r, s) for r in "AB" for s in (0, 1, 2)}
    assert sub != stratified_subset(items, 12, seed=4)
    assert stratified_subset(items, None, 0) == items
    assert state_id(state("x")) == state_id(state("x")) != state_id(state("y"))


# -- the independent test ------------------------------------------------------------------------
def _row(i, l1, l2=None, kind="human_eval"):
    labels = {"l1": dict(zip(RULES, l1))}
    if l2 is not None:
        labels["l2"] = dict(zip(RULES, l2))
    return {"id": f"ind-{i}", "history": [{"role": "patient", "text": "It hurts."}],
            "turn": "Where does it hurt?", "source": {"kind": kind}, "labels": labels}


def _write(tmp_path, rows):
    path = tmp_path / "independent.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_independent_loader_items_and_kappa(tmp_path):
    rows = [_row(1, [2, 0, 0, 2, 1, 2], [2, 0, 0, 2, 2, 2], "model_heldout"),
            _row(2, [0, 2, 1, 1, 1, 0], [0, 2, 1, 1, 1, 1], "model_sp"),
            _row(3, [1, 1, 1, 1, 1, 1])]
    loaded = load_independent(_write(tmp_path, rows), RULES)
    items = independent_items(loaded, RULES)
    assert len(items) == 18 and items[0].id == "ind-1:A" and items[0].score == 2
    assert items[0].history[-1] == Turn(role="doctor", text="Where does it hurt?")
    assert {it.state for it in items} == {"ind-1", "ind-2", "ind-3"}
    kappa = {r["rule"]: r for r in kappa_rows(loaded, RULES, 1000, 0)}
    assert kappa["A"]["n"] == 2 and kappa["A"]["agreement"] == 1.0
    pooled = kappa["all"]
    assert pooled["n"] == 12 and pooled["rows"] == 2 and pooled["agreement"] == 10 / 12
    # hand: l1 = 2,0,0,2,1,2,0,2,1,1,1,0 ; l2 = 2,0,0,2,2,2,0,2,1,1,1,1
    # p_o = 10/12; l1 counts (0,1,2) = 4,4,4, l2 = 3,4,5 -> p_e = (12+16+20)/144 = 1/3
    assert pooled["kappa"] == pytest.approx((10 / 12 - 1 / 3) / (1 - 1 / 3))
    assert pooled["lo"] <= pooled["kappa"] <= pooled["hi"]
    assert cohen_kappa([(1, 1), (1, 1)]) != cohen_kappa([(1, 1), (1, 1)])   # NaN: undefined


@pytest.mark.parametrize("broken, where", [
    (lambda r: r["labels"].pop("l1"), ":2: field 'labels.l1'"),
    (lambda r: r["labels"]["l1"].pop("C"), ":2: field 'labels.l1'"),
    (lambda r: r["labels"]["l1"].update(Z=1), ":2: field 'labels.l1'"),
    (lambda r: r["source"].update(kind="guess"), ":2: field 'source.kind'"),
    (lambda r: r.update(id="ind-1"), ":2: field 'id'"),
])
def test_independent_bad_rows_name_the_line_and_field(tmp_path, broken, where):
    bad = _row(2, [1] * 6)
    broken(bad)
    with pytest.raises(ContractError, match=where):
        load_independent(_write(tmp_path, [_row(1, [1] * 6), bad]), RULES)


def test_the_real_rem_data_has_a_train_split_every_rule(flowchart):
    from medpref.params import load_params, repo_path
    from medpref.rem.build_rem import eval_sets, load_inputs

    params = load_params()
    p = params.rem
    inputs = load_inputs(p, repo_path(params.shared.split))
    train = inputs.split("train")
    # a hand training row that shares text with an evaluation dialogue is left out
    assert "r-0034" not in {a.id for a in train}
    assert "r-0034" in {a.id for a in load_inputs(p).split("train")}
    assert {a.rule for a in train} == set(flowchart.ids)
    sets = eval_sets(p, inputs)
    assert "test" in sets and all(it.state for it in sets["test"])
    # the constructed test split and the hand test rows are separate sets
    assert {it.id[:2] for it in sets["test"]} == {"c-"}
    assert {it.id[:2] for it in sets["hand_test"]} == {"r-"} and len(sets["hand_test"]) == 65
    assert not {a.id for a in train} & {it.id for items in sets.values() for it in items}


def test_the_simulation_reads_its_rem_by_name(tmp_path, monkeypatch):
    """Stage 06's REM is the rem.scorers entry simulation.rem_scorer names (the default
    REM), built as stage 03 builds it; a name not in rem.scorers is an error."""
    from types import SimpleNamespace

    from medpref.params import load_params
    from medpref.remscore import scorers
    from medpref.simulation.common import rem_scorer

    params = load_params()
    rem = params.rem.model_copy(update={"fitted": params.rem.fitted.model_copy(
        update={"model_dir": str(tmp_path)})})
    model = fit("majority", [Item(r, state("x?"), 2) for r in RULES])
    model.name = params.simulation.rem_scorer
    save_model(model, tmp_path)
    monkeypatch.setattr(scorers, "state_features", lambda rem: features())
    stage = SimpleNamespace(params=SimpleNamespace(rem=rem), llm=None, seed=0)
    scorer, flowchart, name = rem_scorer(stage, params.simulation)
    assert name == params.simulation.rem_scorer == params.annotation.rem_scorer
    assert isinstance(scorer, FittedScorer)
    assert {j.label for j in scorer.score_states([state("y")])[0].values()} == {2}
    with pytest.raises(ValueError, match="simulation.rem_scorer 'nope' is not in rem.scorers"):
        rem_scorer(stage, params.simulation.model_copy(update={"rem_scorer": "nope"}))
