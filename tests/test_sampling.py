"""Stage 01's pure parts: split points, continuation parsing, the run with a fake model."""

from __future__ import annotations

import pytest

from medpref.contracts import Dialogue, Turn
from medpref.sampling.build import build_unlabeled
from medpref.sampling.config import SamplingParams
from medpref.sampling.trajectory import (
    ContinuationError,
    parse_continuation,
    sample_splits,
    split_at,
    split_points,
)


def _dialogue(did: str, rounds: int, style: str = "collect_then_diagnose") -> Dialogue:
    turns = []
    for r in range(rounds):
        turns += [Turn(role="patient", text=f"{did} patient says {r}"),
                  Turn(role="doctor", text=f"{did} doctor answers {r}")]
    return Dialogue(id=did, turns=turns, meta={"style": style})


def test_split_points_leave_the_required_future():
    d = _dialogue("d1", 4)  # doctor turns at 1, 3, 5, 7
    assert split_points(d) == [1, 3, 5, 7]
    assert split_points(d, min_future_rounds=1) == [1, 3, 5]
    assert split_points(d, min_future_rounds=3) == [1]


def test_split_at_gives_history_candidate_and_bounded_future():
    s = split_at(_dialogue("d1", 5), 3, future_rounds=2)
    assert [t.text for t in s.history][-1] == "d1 patient says 1"
    assert s.response == "d1 doctor answers 1"
    assert [t.role for t in s.future] == ["patient", "doctor", "patient", "doctor"]
    assert s.future[-1].text == "d1 doctor answers 3"
    with pytest.raises(ValueError, match="not a doctor reply"):
        split_at(_dialogue("d1", 5), 2, 2)


def test_sampling_is_seeded_and_stable_under_more_items():
    ds = [_dialogue(f"d{i}", 5) for i in range(6)]
    a = sample_splits(ds, 4, 3, 1, seed=7)
    b = sample_splits(ds, 9, 3, 1, seed=7)
    assert [(s.dialogue_id, s.turn_index) for s in a] == \
        [(s.dialogue_id, s.turn_index) for s in b[:4]]
    c = sample_splits(ds, 4, 3, 1, seed=8)
    assert [(s.dialogue_id, s.turn_index) for s in a] != [(s.dialogue_id, s.turn_index) for s in c]


GOLDEN = [
    ("Doctor: Any fever?\nPatient: No.\nDoctor: Good, then rest.", "Any fever?",
     [("patient", "No."), ("doctor", "Good, then rest.")]),
    ("**Doctor:** Any fever?\n\n**Patient:** No.", "Any fever?", [("patient", "No.")]),
    ("Doctor: Any fever? It matters.\nsince when?\nPatient: two days", "Any fever? It matters. since when?",
     [("patient", "two days")]),
    ("Doctor: Hello there. Patient: hi doc Doctor: Let us check.", "Hello there.",
     [("patient", "hi doc"), ("doctor", "Let us check.")]),
    ("Doctor: Rest well. Rest well. Drink water.\nConsultation A: Doctor: unrelated", "Rest well. Drink water.", []),
]


@pytest.mark.parametrize("text,response,future", GOLDEN)
def test_parse_continuation_golden(text, response, future):
    cont = parse_continuation(text, rounds=3)
    assert cont.response == response
    assert [(t.role, t.text) for t in cont.future] == future


def test_future_is_cut_to_the_requested_rounds_and_truncation_drops_the_last_turn():
    text = "Doctor: One two.\nPatient: a\nDoctor: b c\nPatient: d\nDoctor: e f\nPatient: half-writ"
    assert len(parse_continuation(text, rounds=1).future) == 2
    cont = parse_continuation(text, rounds=3, truncated=True)
    assert cont.future[-1].text == "e f" and cont.notes


def test_answer_prefix_is_put_back_before_parsing():
    cont = parse_continuation("Any fever?\nPatient: no", 3, prefix="Doctor:")
    assert cont.response == "Any fever?" and cont.future[0].text == "no"
    with pytest.raises(ContinuationError, match="does not start with the doctor"):
        parse_continuation("Patient: I am 66.", 3, prefix="Doctor:")


def test_repeat_of_the_last_patient_turn_is_dropped():
    cont = parse_continuation("Patient: My knee hurts!\nDoctor: Since when?", 3,
                              last_patient_turn="my knee hurts")
    assert cont.response == "Since when?"


@pytest.mark.parametrize("text,reason", [
    ("", "empty"),
    ("Sure, here is the continuation of the dialogue.", "no 'Doctor:'"),
    ("Patient: I feel worse.\nDoctor: Okay.", "does not start with the doctor"),
    ("Doctor: Patient: I am 66.", "does not start with the doctor"),
    ("Doctor: Ok", "shorter than two words"),
])
def test_malformed_continuations_raise_with_a_reason(text, reason):
    with pytest.raises(ContinuationError, match=reason):
        parse_continuation(text, rounds=3)


def test_build_unlabeled_records_malformed_retries_and_drops(scripted_client):
    dialogues = [_dialogue(f"d{i}", 5, style) for i, style in
                 enumerate(["collect_then_diagnose", "hypothesis_then_verify"] * 3)]
    calls = {"n": 0}

    def responder(req):
        calls["n"] += 1
        history = req.messages[-1]["content"]
        if "d0 patient" in history.split("not finished yet")[-1]:
            return ""  # always malformed: recorded, then dropped
        return "Any red flags? Patient: none\nDoctor: Then we watch and wait."

    client = scripted_client(responder, role="annotator")
    p = SamplingParams(n_items=6, max_attempts=2, future_rounds=2)
    out = build_unlabeled(p, client, seed=1, dialogues=dialogues, pool=dialogues)
    assert len(out.items) == 5
    assert len(out.rejected) == 2 and {r["attempt"] for r in out.rejected} == {0, 1}
    assert all(r["dialogue_id"] == "d0" and r["reason"] == "empty continuation"
               for r in out.rejected)
    assert calls["n"] == 7  # 6 first attempts + 1 retry
    item = out.items[0]
    assert item.history[-1].role == "patient"
    gen = item.candidates[1]
    assert gen.source == "generated" and gen.response == "Any red flags?"
    assert [t.role for t in gen.future] == ["patient", "doctor"]
    assert item.meta["exemplar_id"] != item.meta["dialogue_id"]


# -- the stage: yield guard before any output --------------------------------------------
def _stage(tmp_path, monkeypatch, scripted_client, responder, **update):
    from medpref.params import load_params
    from medpref.stagekit import Stage

    monkeypatch.setattr(Stage, "data_dir", property(lambda self: tmp_path / "data"))
    monkeypatch.setattr(Stage, "reports_dir", property(lambda self: tmp_path / "reports"))
    params = load_params()
    params._sections["sampling"] = params.sampling.model_copy(
        update={"n_items": 4, "future_rounds": 2, **update})
    stage = Stage(name="01_sampling", params=params)
    client = scripted_client(responder, role="annotator")

    class _Session:
        ledger = client.ledger

        def role(self, name, **overrides):
            return client

        def write_ledger(self, path):
            return self.ledger.write(path)

        def close(self):
            pass

    stage._llm = _Session()
    return stage


def test_stage_writes_the_items_and_reports(tmp_path, monkeypatch, scripted_client):
    from medpref.sampling import stage as sampling_stage

    stage = _stage(tmp_path, monkeypatch, scripted_client,
                   lambda r: "Any red flags? Patient: none\nDoctor: Then we watch and wait.")
    out = sampling_stage.run(stage)
    assert len(out.items) == 4 and out.metrics["items_written"] == 4
    written = (tmp_path / "data" / "unlabeled.jsonl").read_text().splitlines()
    assert len(written) == 4
    assert (tmp_path / "reports" / "summary.csv").exists()
    stage.finish(out.metrics, models=out.models, prompts=out.prompts)
    assert (tmp_path / "reports" / "timings.json").exists()
    assert "wall_s" not in (tmp_path / "reports" / "metrics.json").read_text()


def test_stage_with_too_few_items_fails_and_writes_nothing(tmp_path, monkeypatch,
                                                          scripted_client):
    from medpref.sampling import stage as sampling_stage
    from medpref.stagekit import StageFailed

    stage = _stage(tmp_path, monkeypatch, scripted_client, lambda r: "Patient: I feel worse.")
    with pytest.raises(StageFailed, match=r"stage sampling failed: 0 of 4 items produced"):
        sampling_stage.run(stage)
    assert not (tmp_path / "data").exists() and not (tmp_path / "reports").exists()
