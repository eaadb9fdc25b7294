"""control_process, the DPO control (issue 32): planted pairs from the training dialogues
only, the chosen turn asking (a question or a test request) and the rejected one the
dialogue's own diagnosis turn, which names the disease or a treatment first; registered as
a control, so its run is marked and the paper tables leave it out."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest

from medpref.annotation.control import (
    NAME,
    asks,
    build,
    control_pairs,
    names_diagnosis,
    names_treatment,
    rejected_ok,
    requests_test,
)
from medpref.annotation.stage import strategy_plan
from medpref.contracts import ContractError, Dialogue, Turn, read_jsonl, write_jsonl
from medpref.control_runs import CONTROLS, is_control
from medpref.data.split import DialogueSplit, load_split
from medpref.params import load_params, repo_path

DIAGNOSIS = ("This is most likely migraine with aura. I'd like you to keep a headache "
             "diary and take ibuprofen at the start of an attack.")


def _dialogue(id_: str, diagnosis_turn: int = 5, diagnosis_text: str = DIAGNOSIS) -> Dialogue:
    texts = ["I get headaches with flashing lights.",
             "How long do the flashing lights last before the pain starts?",   # 1: asks
             "About twenty minutes.",
             "That must be hard for you.",                                     # 3: no ask
             "It is.",
             diagnosis_text,                                                   # 5: diagnosis
             "Thanks.",
             "Does anything else worry you?"]
    roles = ["patient", "doctor"] * 4
    return Dialogue(id=id_, turns=[Turn(role=r, text=t) for r, t in zip(roles, texts)],
                    meta={"diagnosis": "migraine with aura", "diagnosis_turn": diagnosis_turn})


SPLIT = DialogueSplit({"tr1": "train", "tr2": "train", "dv": "dev", "ev": "eval"}, "s.yaml")


def test_pairs_come_from_training_dialogues_before_their_diagnosis():
    dialogues = [_dialogue(i) for i in ("tr1", "dv", "ev", "tr2")]
    built = control_pairs(dialogues, SPLIT, None, seed=0)
    assert [p.meta["dialogue"] for p in built.pairs] == ["tr1", "tr2"]
    assert built.dialogues == 2 and built.skipped == []
    pair = built.pairs[0]
    # the one state before the diagnosis whose real next turn asks; turn 3 asks nothing
    assert pair.meta["turn"] == 1 and [t.text for t in pair.prompt] == [
        "I get headaches with flashing lights."]
    assert pair.chosen.startswith("How long do the flashing lights")
    assert pair.rejected == DIAGNOSIS and pair.meta["diagnosis_turn"] == 5
    assert (pair.strategy, pair.chosen_source, pair.rejected_source) == (
        NAME, "sampled", "premature_diagnosis")


def test_a_diagnosis_turn_that_plans_tests_first_or_asks_gives_no_pair():
    tests_first = ("To confirm it I'd like blood tests and an MRI scan. Then we can talk "
                   "about migraine with aura.")
    asking = "It is migraine with aura. Do you take the combined pill?"
    dialogues = [_dialogue("tr1", diagnosis_text=tests_first), _dialogue("tr2",
                                                                          diagnosis_text=asking)]
    built = control_pairs(dialogues, SPLIT, None, seed=0)
    assert built.pairs == [] and built.skipped == ["tr1", "tr2"]


def test_a_seeded_cap_keeps_a_subset():
    dialogues = [_dialogue(f"d{i}") for i in range(10)]
    split = DialogueSplit({d.id: "train" for d in dialogues})
    a = control_pairs(dialogues, split, 4, seed=1).pairs
    assert len(a) == 4 and a == control_pairs(dialogues, split, 4, seed=1).pairs
    assert [p.id for p in a] != [p.id for p in control_pairs(dialogues, split, 4, seed=2).pairs]


@pytest.mark.parametrize("meta, field", [
    ({"diagnosis": "migraine"}, "meta.diagnosis_turn"),
    ({"diagnosis": "migraine", "diagnosis_turn": 2}, "meta.diagnosis_turn"),   # a patient turn
    ({"diagnosis": "migraine", "diagnosis_turn": 99}, "meta.diagnosis_turn"),
    ({"diagnosis_turn": 5}, "meta.diagnosis"),
])
def test_bad_meta_names_the_file_line_and_field(tmp_path, meta, field):
    good, bad = _dialogue("tr1"), _dialogue("tr2")
    bad = bad.model_copy(update={"meta": meta})
    path = tmp_path / "dialogues.jsonl"
    write_jsonl(path, [good, bad])
    with pytest.raises(ContractError, match=rf"dialogues.jsonl:2: field '{field}'"):
        control_pairs(read_jsonl(path, Dialogue), SPLIT, None, 0, str(path))


@pytest.mark.parametrize("text, asking", [
    ("How long has it been going on?", True),
    ("Tell me about your periods", True),
    ("I'd like to check your blood pressure and do an ECG.", True),   # a test request
    ("I'd like to start you on metformin.", False),                    # a treatment
    ("That sounds like angina.", False),
    ("I'm sorry to hear that.", False),
])
def test_asking_is_a_question_or_a_test_request(text, asking):
    assert asks(text) is asking


def test_naming_the_diagnosis_needs_its_naming_words_and_treatments_are_cued():
    assert names_diagnosis("This is heart failure.", "heart failure")
    assert not names_diagnosis("We will see how well the heart pumps.", "heart failure")
    assert names_diagnosis("It is COPD, chronic obstructive pulmonary disease.",
                           "chronic obstructive pulmonary disease")
    assert names_treatment("I'll prescribe a steroid cream.")
    assert not names_treatment("How long have you had the rash?")
    assert requests_test("We'll do a urine test today.")
    assert rejected_ok("So this is gout. Take naproxen for a few days.", "gout")
    assert not rejected_ok("I'd like blood tests first. It may be gout.", "gout")


# -- the embedded data -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def embedded():
    params = load_params()
    cfg = params.annotation.control
    return (read_jsonl(repo_path(cfg.dialogues), Dialogue),
            load_split(repo_path(params.shared.split)), build(params, params.shared.seed))


def test_on_the_embedded_dialogues_at_least_40_pairs_all_from_training_dialogues(embedded):
    dialogues, split, built = embedded
    train = set(split.ids("train"))
    by_id = {d.id: d for d in dialogues}
    assert len(built.pairs) >= 40
    for pair in built.pairs:
        d = by_id[pair.meta["dialogue"]]
        assert d.id in train
        j, k = pair.meta["turn"], d.meta["diagnosis_turn"]
        assert j < k and pair.rejected == d.turns[k].text == d.turns[pair.meta["diagnosis_turn"]
                                                                      ].text
        assert pair.chosen == d.turns[j].text and asks(pair.chosen)
        assert not names_diagnosis(pair.chosen, d.meta["diagnosis"])
        assert names_diagnosis(pair.rejected, d.meta["diagnosis"]) or names_treatment(
            pair.rejected)
        assert [t.text for t in pair.prompt] == [t.text for t in d.turns[:j]]
    # no turn of a dev or eval dialogue is in any pair
    held = {t.text for d in split.select(dialogues, ["dev", "eval"]) for t in d.turns}
    train_turns = {t.text for d in split.select(dialogues, "train") for t in d.turns}
    used = {p.chosen for p in built.pairs} | {p.rejected for p in built.pairs} | {
        t.text for p in built.pairs for t in p.prompt}
    assert not used & (held - train_turns)


# -- a control, not a strategy -------------------------------------------------------------------

def test_it_is_a_registered_control_with_its_own_dpo_run_and_no_paper_row(embedded, tmp_path):
    from medpref.annotation import control
    from medpref.finetune.policies import dpo_runs, heldout_runs
    from medpref.papertables.build import build_table
    from medpref.papertables.spec import load_registry

    params = load_params()
    assert NAME in params.annotation.strategies and is_control(NAME) and CONTROLS == {NAME}
    assert not any(is_control(s) for s in ("gpt4_rank", "cai_avg", "cai_dep", "agent"))
    assert dict(strategy_plan([NAME]))[NAME] is control.control_process
    assert dpo_runs(params)[NAME] == f"{params.annotation.output_dir}/pairs/{NAME}.jsonl"
    assert NAME not in heldout_runs(params)          # the strategies' runs only
    registry = load_registry(repo_path(params.tables.registry))
    assert set(registry.controls) == CONTROLS
    # stage 04's entry returns the builder's pairs (no model call, no decision)
    stage = SimpleNamespace(params=params, seed=params.shared.seed,
                            step=lambda name: contextlib.nullcontext())
    [result] = control.control_process(SimpleNamespace(stage=stage))
    assert result.name == NAME and result.decisions == [] and result.pairs == embedded[2].pairs
    # a table listing doctors leaves the control's row out
    import pandas as pd

    from medpref.papertables.build import OURS

    spec = next(a for a in registry.artefacts if a.id == "followup_table3")
    source = tmp_path / spec.source
    source.parent.mkdir(parents=True)
    cols = list(spec.columns.values())
    rows = [{"doctor": d, **dict.fromkeys(cols, 1.0)} for d in ("sft", NAME, "cai_dep")]
    pd.DataFrame(rows).to_csv(source, index=False)
    built = build_table(spec, tmp_path)
    assert built.table[built.table["source"] == OURS]["row"].tolist() == ["sft", "cai_dep"]
    assert all(NAME in a.exclude_rows for a in registry.artefacts)
