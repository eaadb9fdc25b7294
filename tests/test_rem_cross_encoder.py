"""scripts/rem_cross_encoder.py: states grouped by their history, the joint input (history
tail and turn in their segments, the turn-only ablation without history), agreement by
hand, and a two-step training run on the embedded encoder."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from medpref import REPO_ROOT
from script_module import script_module

rce = script_module("scripts/rem_cross_encoder.py")

ENCODER = REPO_ROOT / "models" / "all-minilm-l6-v2"


def _turn(role: str, text: str):
    return SimpleNamespace(role=role, text=text)


def _row(history, rule, score, id_="x-0001"):
    return SimpleNamespace(history=history, rule=rule, score=score, id=f"{id_}:{rule}")


H1 = [_turn("patient", "I have had a cough for two weeks."),
      _turn("doctor", "Do you bring up any phlegm?")]
H2 = [_turn("patient", "My knee hurts."), _turn("doctor", "You have arthritis.")]


def test_rows_of_one_history_make_one_state_with_a_score_per_rule():
    states = rce.states_of([_row(H1, "A", 2), _row(H2, "A", 0), _row(H1, "B", 1)])
    assert [s.gold for s in states] == [{"A": 2, "B": 1}, {"A": 0}]
    assert states[0].history[-1].text == "Do you bring up any phlegm?"


@pytest.fixture(scope="module")
def tok():
    if not ENCODER.exists():
        pytest.skip("the embedded encoder is not prepared (make setup)")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(ENCODER))


def test_the_history_tail_and_the_turn_sit_in_their_own_segments(tok):
    ids, seg = rce.encode(tok, H1, rce.Settings())
    turn = tok("Do you bring up any phlegm?", add_special_tokens=False)["input_ids"]
    assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
    assert ids[-len(turn) - 1:-1] == turn
    assert seg.count(1) == len(turn) + 1 and seg[:seg.index(1)] == [0] * seg.index(1)
    assert "cough" in tok.decode(ids[:seg.index(1)])
    only, seg_only = rce.encode(tok, H1, rce.Settings(turn_only=True))
    assert only == [tok.cls_token_id, tok.sep_token_id, *turn, tok.sep_token_id]
    assert seg_only == [0, 0] + [1] * (len(turn) + 1)


def test_a_long_history_is_cut_from_the_left_to_the_budget(tok):
    long = [_turn("patient", " ".join(["early"] * 300 + ["recent", "pain"])), H1[-1]]
    ids, _ = rce.encode(tok, long, rce.Settings(max_tokens=64))
    assert len(ids) == 64
    assert "recent pain" in tok.decode(ids)


def test_exact_agreement_by_hand():
    states = [rce.State("a", H1, {"A": 2, "B": 1}), rce.State("b", H2, {"A": 0})]
    probs = np.zeros((2, len(rce.RULE_IDS), 3))
    probs[0, 0, 2] = probs[0, 1, 0] = probs[1, 0, 0] = 1.0   # A right, B wrong, A right
    assert rce.exact(probs, states) == pytest.approx(100 * 2 / 3)
    assert rce.exact(probs, states, ("A",)) == 100.0
    assert np.isnan(rce.exact(probs, states, ("F",)))
    assert rce.exact(probs, states, only=[0]) == 50.0              # state a alone: A right, B wrong


def test_the_model_written_turns_are_those_the_labelled_files_say_a_model_wrote():
    """The selection set: a state is model-written when its rows' stem is a turn whose
    source kind is a model's (the 120 of the 162 development states the notes count)."""
    states = rce.states_of([_row(H1, "A", 2, "tt-0001"), _row(H1, "B", 1, "tt-0001"),
                            _row(H2, "A", 0, "rt-0002")])
    assert [st.ids for st in states] == [["tt-0001:A", "tt-0001:B"], ["rt-0002:A"]]
    from medpref.params import load_params

    rem = load_params().rem
    stems = rce.model_written_ids([REPO_ROOT / f for f in [*rem.turns.files, rem.independent]])
    assert "tt-0001" in stems and "rt-0002" not in stems      # a policy's turn; a human's
    assert [rce.is_model_written(st, stems) for st in states] == [True, False]


@pytest.mark.slow
def test_two_training_steps_give_development_probabilities(tok):
    states = [rce.State(str(i), h, {"A": a, "C": 0})
              for i, (h, a) in enumerate([(H1, 2), (H2, 0)] * 4)]
    s = rce.Settings(epochs=1, batch=4, evals_per_epoch=1)
    data = rce.examples(tok, states, s)
    found = rce.train(rce.build_model(str(ENCODER)), data, data, states, s, log=lambda m: None)
    assert list(found) == [2]
    probs = found[2]
    assert probs.shape == (8, len(rce.RULE_IDS), 3)
    assert np.allclose(probs.sum(-1), 1.0)


def test_balanced_weights_and_the_weighted_loss_by_hand():
    """Rule A labelled 0, 0, 1 and rule B labelled 2 once: A's weights 3/(3·2), 3/(3·1), 0;
    B's 0, 0, 1/3. With every weight 1 the loss is torch's cross-entropy over the labelled
    cells; weighting A's 1 up moves the loss towards that cell's."""
    import torch

    rules = len(rce.RULE_IDS)
    ign = [rce.IGNORE] * (rules - 2)
    data = [([1], [0], [0, rce.IGNORE, *ign]), ([1], [0], [0, rce.IGNORE, *ign]),
            ([1], [0], [1, 2, *ign])]
    w = rce.label_weights(data)
    assert w[0].tolist() == [0.5, 1.0, 0.0] and w[1].tolist() == pytest.approx([0, 0, 1 / 3])
    torch.manual_seed(0)
    logits = torch.randn(3, rules, 3)
    y = torch.tensor([d[2] for d in data])
    plain = torch.nn.CrossEntropyLoss(ignore_index=rce.IGNORE)(logits.reshape(-1, 3),
                                                               y.reshape(-1))
    assert float(rce.weighted_loss(logits, y, torch.ones(rules, 3))) == pytest.approx(
        float(plain), rel=1e-6)
    only_a1 = torch.zeros(rules, 3)
    only_a1[0, 1] = 1.0
    cell = torch.nn.functional.cross_entropy(logits[2, 0:1], y[2, 0:1])
    assert float(rce.weighted_loss(logits, y, only_a1)) == pytest.approx(float(cell), rel=1e-6)



def test_the_baselines_by_hand():
    """majority: the training label frequencies; length: a fit that, with short turns at 0
    and long ones at 2, answers 0 for a short turn and 2 for a long one."""
    short, long = [_turn("doctor", "Yes.")], [_turn("doctor", " ".join(["word"] * 40))]
    train = [rce.State(f"s{i}", short, {"A": 0}) for i in range(6)] + [
        rce.State(f"l{i}", long, {"A": 2}) for i in range(4)]
    dev = [rce.State("d0", short, {"A": 0}), rce.State("d1", long, {"A": 2})]
    out = rce.baselines(train, dev, [1.0], 0)
    assert out["majority"][0, 0].tolist() == pytest.approx([0.6, 0.0, 0.4])
    assert out["length"][:, 0].argmax(-1).tolist() == [0, 2]
    assert np.allclose(out["length"][:, 0].sum(-1), 1.0)


def test_the_paired_interval_by_hand():
    mean, lo, hi = rce.paired_interval(np.array([1, 1, 1, 0]), np.array([0, 1, 1, 0]))
    assert mean == 25.0 and 0.0 <= lo <= mean <= hi <= 100.0
    assert rce.paired_interval(np.ones(5), np.ones(5)) == (0.0, 0.0, 0.0)


def _sp_turns():
    return script_module("scripts/rem_sp_turns.py")


def test_the_sp_turn_draw_leaves_the_test_cases_and_every_labelled_text_out():
    """scripts/rem_sp_turns.py: no SP test case, no turn text any labelled file holds, the
    part set by case, and the committed rows are the seeded draw."""
    import json

    import yaml

    m = _sp_turns()
    try:
        items = m.draw()
    except SystemExit as err:   # a shallow clone lacks the records' commit
        pytest.skip(str(err))
    turns = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())["rem"]["turns"]
    assert items and not {it["source"]["case"] for it in items} & set(turns["sp_test_cases"])
    assert {it["part"] for it in items if it["source"]["case"] in turns["sp_dev_cases"]} == {"dev"}
    assert {it["part"] for it in items if it["source"]["case"] not in turns["sp_dev_cases"]} == {
        "train"}
    labelled = {json.loads(line)["turn"] for f in m.LABELLED
                for line in (REPO_ROOT / f).read_text().splitlines()}
    assert not labelled & {it["turn"] for it in items}
    assert len({it["turn"] for it in items}) == len(items)
    assert m.main(["--check"]) == 0


def test_merging_labels_names_the_sheet_line_and_field(tmp_path):
    m = _sp_turns()
    items = [{"id": "st-0001", "part": "train", "history": [], "turn": "t", "source": {}}]
    bad = tmp_path / "l1.jsonl"
    bad.write_text('{"id": "st-0001", "labels": {"A": 0, "B": 3}}\n')
    with pytest.raises(SystemExit, match=r"l1.jsonl:1: labels: no 0/1/2 score for \['B'"):
        m.merge(items, [("l1", bad)])
    good = tmp_path / "ok.jsonl"
    good.write_text('{"id": "st-0001", "labels": {"A": 0, "B": 1, "C": 2, "D": 0, "E": 1, '
                    '"F": 2}, "note": "n"}\n')
    (row,) = m.merge(items, [("l1", good)])
    assert row["labels"] == {"l1": {"A": 0, "B": 1, "C": 2, "D": 0, "E": 1, "F": 2}}
    assert row["notes"] == {"l1": "n"}
    with pytest.raises(SystemExit, match="no l1 label"):
        m.merge(items, [("l2", good)])
