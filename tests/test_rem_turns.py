"""Labelled turns as REM rows (rem.turns, src/medpref/rem/turns.py; issue 40)."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import yaml

from medpref import REPO_ROOT
from medpref.contracts import ContractError
from medpref.params import load_params
from medpref.rem import build_rem as b03
from medpref.rem.config import TURNS_DEV, RemParams, RemTurnsParams
from medpref.rem.independent import IndependentRow
from medpref.rem.turns import load_turn_rows, turn_annotations

RULES = list("ABCDEF")
LABELS = {r: 2 for r in RULES}


def _row(i: str, part: str = "train", **labels) -> dict:
    return {"id": i, "part": part, "history": [{"role": "patient", "text": "I have a cough."}],
            "turn": "How long have you had it?", "source": {"kind": "model_train"},
            "labels": {"l1": {**LABELS, **labels}}}


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _sp(i: str, case: str, kind: str = "model_sp") -> IndependentRow:
    source = {"kind": kind, "case": case} if kind == "model_sp" else {"kind": kind}
    return IndependentRow(id=i, history=[{"role": "patient", "text": "My chest hurts."}],
                          turn="Where exactly?", source=source, labels={"l1": dict(LABELS)})


def test_file_rows_and_sp_turns_become_one_row_per_rule_in_their_split(tmp_path):
    f = _write(tmp_path / "t.jsonl", [_row("tt-1"), _row("tt-2", "dev", A=0)])
    p = RemTurnsParams(files=[str(f)], sp_test_cases=["sp-1"], sp_dev_cases=["sp-2"])
    independent = [_sp("ri-1", "sp-1"), _sp("ri-2", "sp-2"), _sp("ri-3", "sp-3"),
                   _sp("ri-4", "", kind="model_heldout"), _sp("ri-5", "", kind="human_eval")]
    rows, used = turn_annotations(p, independent, RULES)
    assert used == {"ri-2", "ri-3"}          # test case, held-out and human turns stay tests
    splits = Counter((a.id.split(":")[0], a.split) for a in rows)
    assert splits == {("tt-1", "train"): 6, ("tt-2", TURNS_DEV): 6, ("ri-2", TURNS_DEV): 6,
                      ("ri-3", "train"): 6}
    a = next(a for a in rows if a.id == "tt-2:A")
    assert a.score == 0 and a.rule == "A"
    assert [t.role for t in a.history] == ["patient", "doctor"]   # the turn ends the state
    assert a.history[-1].text == "How long have you had it?"


def test_an_sp_case_in_neither_list_is_an_error():
    p = RemTurnsParams(files=[], sp_test_cases=[], sp_dev_cases=[])
    with pytest.raises(ValueError, match="neither"):
        turn_annotations(p, [_sp("ri-1", "sp-9")], RULES)


@pytest.mark.parametrize("row, field", [
    ({"labels": {"l2": LABELS}}, "labels.l1"),
    ({"labels": {"l1": {r: 1 for r in "ABCDE"}}}, "labels.l1"),
    ({"labels": {"l1": {**LABELS, "Z": 1}}}, "labels.l1"),
])
def test_a_bad_row_names_file_line_and_field(tmp_path, row, field):
    f = _write(tmp_path / "t.jsonl", [_row("tt-1"), {**_row("tt-2"), **row}])
    with pytest.raises(ContractError) as err:
        load_turn_rows(f, RULES)
    assert "t.jsonl" in str(err.value) and ":2" in str(err.value) and field in str(err.value)


def test_a_repeated_id_is_an_error(tmp_path):
    f = _write(tmp_path / "t.jsonl", [_row("tt-1"), _row("tt-1")])
    with pytest.raises(ContractError, match="twice"):
        load_turn_rows(f, RULES)


def test_selection_on_turns_needs_turns_and_case_lists_are_disjoint():
    rem = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())["rem"]
    with pytest.raises(ValueError, match="needs rem.turns"):
        RemParams(**{**rem, "turns": None})
    with pytest.raises(ValueError, match="both test and dev"):
        RemTurnsParams(sp_test_cases=["sp-1"], sp_dev_cases=["sp-1"])


@pytest.fixture(scope="module")
def inputs():
    params = load_params()
    return params.rem, b03.load_inputs(params.rem, REPO_ROOT / params.shared.split)


def test_the_committed_turns_train_the_rem_and_leave_the_test(inputs):
    p, inp = inputs
    trained = [r for r in inp.independent if r.id in inp.trained_ids]
    cases = {r.source.model_extra["case"] for r in trained}
    assert trained and all(r.source.kind == "model_sp" for r in trained)
    assert not cases & set(p.turns.sp_test_cases)
    assert {r.source.draw for r in trained} == {1, 2}         # draw 3 is all test
    sets = b03.eval_sets(p, inp)
    tested = {it.state for name, items in sets.items() if name.startswith("independent")
              for it in items}
    assert not tested & inp.trained_ids
    assert len(tested) == len(inp.independent) - len(trained)
    # the LLM rows' fixed subset is drawn from the whole draw, as before the turns trained
    assert len(b03.subset_pool(inp, "independent", sets["independent"])) == 6 * 300
    turn_rows = [a for a in inp.annotations if a.id.startswith(("tt-", "rt-"))]
    assert {a.split for a in turn_rows} == {"train", TURNS_DEV}
    assert len(inp.split(TURNS_DEV)) >= 6 * 100


def test_the_policies_training_turns_come_from_training_dialogues_split_by_dialogue():
    split = yaml.safe_load((REPO_ROOT / "data/embedded/dialogue_split.yaml").read_text())
    rows = load_turn_rows(REPO_ROOT / "data/embedded/rem/train_turns.jsonl", RULES)
    assert len(rows) >= 200
    assert {r.source["dialogue"] for r in rows} <= set(split["train"])
    part = {}
    for r in rows:
        assert part.setdefault(r.source["dialogue"], r.part) == r.part
    assert set(part.values()) == {"train", "dev"}
    assert Counter(r.source["kind"] for r in rows) == {"model_train": len(rows)}


def test_a_turn_row_carrying_eval_dialogue_text_is_left_out(tmp_path, inputs):
    p, _ = inputs
    split = yaml.safe_load((REPO_ROOT / "data/embedded/dialogue_split.yaml").read_text())
    dialogues = {json.loads(line)["id"]: json.loads(line) for line in
                 (REPO_ROOT / "data/embedded/dialogues.jsonl").read_text().splitlines()}
    eval_turns = dialogues[split["eval"][0]]["turns"]
    leaked = {**_row("tt-9"), "history": eval_turns[:4]}
    f = _write(tmp_path / "t.jsonl", [leaked])
    bad = p.model_copy(update={"turns": p.turns.model_copy(update={"files": [str(f)]})})
    got = b03.load_inputs(bad, REPO_ROOT / "data/embedded/dialogue_split.yaml")
    assert set(got.turns_left_out) == {f"tt-9:{r}" for r in RULES}
    assert got.turns_left_out["tt-9:A"] == [split["eval"][0]]
    assert not [a for a in got.annotations if a.id.startswith("tt-9:")]


def test_the_committed_turns_left_out_are_stock_phrases_across_a_turn_boundary(inputs):
    """The one committed turn row the check leaves out: a policy's "Have you had any …"
    after a patient's "… my weight is steady" runs into an eval dialogue's words (the check
    reads the state as one text); pinned so that a new leak cannot hide behind it."""
    _, inp = inputs
    assert {k.split(":")[0] for k in inp.turns_left_out} == {"tt-0206"}
