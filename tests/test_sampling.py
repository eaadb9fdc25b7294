"""Stage 01's pure parts: split points, continuation parsing, the run with a fake model."""

from __future__ import annotations

import pytest

from medpref.contracts import Dialogue, Turn, write_jsonl
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
    ("Doctor: Any fever? It matters.\nsince when?\nPatient: two days",
     "Any fever? It matters. since when?",
     [("patient", "two days")]),
    ("Doctor: Hello there. Patient: hi doc Doctor: Let us check.", "Hello there.",
     [("patient", "hi doc"), ("doctor", "Let us check.")]),
    ("Doctor: Rest well. Rest well. Drink water.\nConsultation A: Doctor: unrelated",
     "Rest well. Drink water.", []),
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
    p = SamplingParams(n_items=6, max_attempts=2, future_rounds=2,
                       rounds={"enabled": False})  # the one-shot continuation alone
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


# -- round-by-round completion of generated futures -----------------------------------------
@pytest.mark.parametrize("text,role,expected", [
    ("I feel worse at night.", "patient", "I feel worse at night."),
    ("Since Monday. Doctor: any fever?", "patient", "Since Monday."),
    ("Any fever? Any fever?\nPatient: no", "doctor", "Any fever?"),
    ("Doctor: take rest.", "patient", None),  # the other speaker's line
    ("Ok.", "patient", None),                   # too short
    ("", "doctor", None),
])
def test_parse_turn_golden(text, role, expected):
    from medpref.sampling.rounds import PREFIX, parse_turn

    assert parse_turn(text, role, PREFIX[role]) == expected


def test_parse_turn_cuts_prompt_echoes_and_rejects_repeats():
    from medpref.sampling.rounds import parse_turn

    raw = ' I feel tired. The patient\'s next message is: "I feel tired.'
    assert parse_turn(raw, "patient", "Patient:") == "I feel tired."
    raw = " I feel tired today. Your next patient message could be: I feel tired."
    assert parse_turn(raw, "patient", "Patient:") == "I feel tired today."
    earlier = ["I'm glad you reached out. Can you tell me about your knee?"]
    echo = " I'm glad you reached out. Can you tell me about your knee?"
    assert parse_turn(echo, "patient", "Patient:", earlier, 0.6) is None
    assert parse_turn(" It hurts when I climb stairs.", "patient", "Patient:", earlier,
                      0.6) == "It hurts when I climb stairs."


def _round_responder(one_shot: str, unreadable_first_doctor: bool = False):
    """One-shot answers ``one_shot``; the round prompts answer by speaker, numbered."""
    seen = {"doctor": 0}
    patient = ["It started on Monday morning.", "The pain is worse when walking.",
               "No fever at all, thankfully.", "I took two tablets of paracetamol."]
    doctor = ["When did it begin exactly?", "Does anything make it worse?",
              "Have you had a temperature?", "Which medicines have you tried so far?"]

    def respond(req):
        system = " ".join(req.messages[0]["content"].split())
        if "realistic doctor-patient consultations" in system:
            return one_shot
        n = req.messages[-1]["content"].count("\nDoctor:") % 4
        if "play the patient" in system:
            return f" {patient[n]}"
        if "play the doctor" in system:
            seen["doctor"] += 1
            if unreadable_first_doctor and seen["doctor"] == 1 and req.params.temperature == 0:
                return " ok"  # unreadable: asked again, sampled
            return f" {doctor[n]}"
        raise AssertionError(system[:60])
    return respond


def test_round_by_round_reaches_the_requested_rounds(scripted_client):
    """A one-shot continuation with no future is completed to 3 rounds, 2 calls a round,
    each step one batch over all items."""
    dialogues = [_dialogue(f"d{i}", 6, style) for i, style in
                 enumerate(["collect_then_diagnose", "hypothesis_then_verify"] * 2)]
    client = scripted_client(_round_responder("Any red flags?"), role="annotator")
    backend = client.backend
    p = SamplingParams(n_items=4, future_rounds=3, min_future_rounds=3, max_attempts=1)
    out = build_unlabeled(p, client, seed=1, dialogues=dialogues, pool=dialogues)
    assert len(out.items) == 4
    for item in out.items:
        for cand in item.candidates:
            assert [t.role for t in cand.future] == ["patient", "doctor"] * 3
        assert item.meta["one_shot_rounds"] == 0 and item.meta["round_by_round_turns"] == 6
    assert out.short == []
    assert len(out.round_records) == 4 * 6
    assert len(backend.requests) == 4 + 4 * 6
    from medpref.sampling.tables import candidate_records, future_rounds_table
    table = future_rounds_table(candidate_records(out.items), 3).set_index("complete_rounds")
    assert table.loc[3, "generated"] == 4 and table.loc[0, "generated (one-shot)"] == 4
    assert table.loc[3, "sampled"] == 4


def test_round_by_round_retries_then_reports_what_stays_short(scripted_client):
    dialogues = [_dialogue(f"d{i}", 6, style) for i, style in
                 enumerate(["collect_then_diagnose", "hypothesis_then_verify"])]
    one_shot = "Any red flags? Patient: no\nDoctor: Good, and any fever?"
    client = scripted_client(_round_responder(one_shot, unreadable_first_doctor=True),
                             role="annotator")
    p = SamplingParams(n_items=2, future_rounds=2, min_future_rounds=2, max_attempts=1)
    out = build_unlabeled(p, client, seed=1, dialogues=dialogues, pool=dialogues)
    assert all(i.meta["one_shot_rounds"] == 1 for i in out.items)
    assert all(len(c.future) == 4 for i in out.items for c in i.candidates)
    assert [r["attempt"] for r in out.round_records if r["parsed"] is None] == [0]

    def never_a_doctor(req):
        system = " ".join(req.messages[0]["content"].split())
        if "realistic doctor-patient consultations" in system:
            return one_shot
        return " It still hurts a lot." if "play the patient" in system else " ok"
    client = scripted_client(never_a_doctor, role="annotator")
    out = build_unlabeled(p, client, seed=2, dialogues=dialogues, pool=dialogues)
    assert len(out.items) == 2  # kept, not dropped, and not silently shortened:
    assert {s["item_id"] for s in out.short} == {i.id for i in out.items}
    assert all(s["complete_rounds"] == 1 and s["requested"] == 2 and
               "no readable doctor turn" in s["failure"] for s in out.short)


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

        def role_models(self):
            return {role: client.model_id for role in self.ledger.totals()["roles"]}

        def model_contents(self):
            return {}

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
    for name in ("summary.csv", "future_rounds.csv", "short_futures.md",
                 "records/candidates.jsonl", "records/rejected.jsonl"):
        assert (tmp_path / "reports" / name).exists(), name
    # the scripted model answers every round prompt with the same lines: echoes, so each
    # generated future stays at its one-shot round, and every item is reported short
    assert out.metrics["items_with_full_futures"] == 0 and len(out.short) == 4
    assert (out.short["source"] == "generated").all()
    assert out.short["failure"].str.contains("no readable").all()
    stage.finish(out.metrics)
    assert (tmp_path / "reports" / "timings.json").exists()
    assert "wall_s" not in (tmp_path / "reports" / "metrics.json").read_text()


GOOD_CONTINUATION = "Any red flags? Patient: none\nDoctor: Then we watch and wait."


def test_stage_records_are_keyed_textless_and_rebuild_its_tables(tmp_path, monkeypatch,
                                                                 scripted_client):
    """The first continuation is malformed (recorded, retried); every table rebuilds from
    the records alone, byte for byte; a table edited by hand is caught, and an edited
    record moves its tables."""
    import json
    import re

    import pandas as pd

    from medpref.outputs import read_rows, write_rows
    from medpref.sampling import stage as sampling_stage
    from medpref.sampling.outputs import OUTPUTS

    seen = []

    def responder(req):
        seen.append(req)
        return "Patient: I feel worse." if len(seen) == 1 else GOOD_CONTINUATION

    stage = _stage(tmp_path, monkeypatch, scripted_client, responder)
    out = sampling_stage.run(stage)
    reports = tmp_path / "reports"
    rows = {r.name: read_rows(r.path(reports)) for r in OUTPUTS.records}
    assert len(rows["candidates"]) == 2 * 4 and len(rows["rejected"]) == 1
    rejected = rows["rejected"][0]
    assert rejected["attempt"] == 0 and rejected["raw"] == "Patient: I feel worse."
    assert rejected["generator"] == out.items[0].meta["generator"]
    assert rejected["prompt_sha"] == out.items[0].meta["prompt_sha"]
    for name, recs in rows.items():
        keys = [r["key"] for r in recs]
        assert all(re.fullmatch(r"[0-9a-f]{16}", k) for k in keys), name
        assert len(set(keys)) == len(keys), f"{name}: two rows share a content key"
    texts = {t.text for i in out.items for t in i.history}
    texts |= {c.response for i in out.items for c in i.candidates}
    written = (reports / "records/candidates.jsonl").read_text()
    assert not [t for t in texts if json.dumps(t)[1:-1] in written]
    sampled = [c.response for i in out.items for c in i.candidates if c.source == "sampled"]
    assert out.summary.set_index("source").loc["sampled", "response_words"] == round(
        sum(len(r.split()) for r in sampled) / len(sampled), 2)

    assert OUTPUTS.differences(reports, stage.params, tmp_path / "s1") == []
    (reports / "summary.md").write_text("edited by hand\n")
    assert OUTPUTS.differences(reports, stage.params, tmp_path / "s2") == [
        f"{reports / 'summary.md'}: differs from its rebuild from the records"]

    # one generated future recorded as complete: one short candidate fewer, and the
    # generated column of future_rounds moves one candidate from 1 to 2 rounds
    edited = next(r for r in rows["candidates"] if r["source"] == "generated")
    edited["complete_rounds"] = 2
    write_rows(reports / "records/candidates.jsonl", rows["candidates"])
    OUTPUTS.rebuild(reports, stage.params, tmp_path / "s3")
    assert len(pd.read_csv(tmp_path / "s3/short_futures.csv")) == len(out.short) - 1
    rounds = pd.read_csv(tmp_path / "s3/future_rounds.csv").set_index("complete_rounds")
    assert (rounds.loc[1, "generated"], rounds.loc[2, "generated"]) == (
        out.rounds.set_index("complete_rounds").loc[1, "generated"] - 1,
        out.rounds.set_index("complete_rounds").loc[2, "generated"] + 1)


def test_stage_with_too_few_items_fails_and_writes_nothing(tmp_path, monkeypatch,
                                                          scripted_client):
    from medpref.sampling import stage as sampling_stage
    from medpref.stagekit import StageFailed

    stage = _stage(tmp_path, monkeypatch, scripted_client, lambda r: "Patient: I feel worse.")
    with pytest.raises(StageFailed, match=r"stage sampling failed: 0 of 4 items produced"):
        sampling_stage.run(stage)
    assert not (tmp_path / "data").exists() and not (tmp_path / "reports").exists()


# -- the written split: stage 01 samples the train part only -----------------------------
def test_stage_01_sees_the_train_dialogues_only(tmp_path, monkeypatch, scripted_client):
    """On the embedded corpus every item's history, real candidate and style exemplar come
    from the split's train part, and no prompt holds a turn of a dev or eval dialogue (so
    stage 04, which reads only these items, never annotates one either)."""
    from medpref.contracts import read_jsonl
    from medpref.data.split import load_split
    from medpref.params import load_params, repo_path
    from medpref.sampling import stage as sampling_stage
    from medpref.sampling.config import RoundsParams

    prompts: list[str] = []

    def responder(req):
        prompts.append("\n".join(m["content"] for m in req.messages))
        return "Any red flags? Patient: none\nDoctor: Then we watch and wait."

    split = load_split(repo_path(load_params().shared.split))
    train = set(split.ids("train"))
    n_items = len(train) + 5                  # more items than train dialogues: all are cut
    stage = _stage(tmp_path, monkeypatch, scripted_client, responder, n_items=n_items,
                   rounds=RoundsParams(enabled=False))
    out = sampling_stage.run(stage)
    dialogues = {d.id: d for d in read_jsonl(repo_path(stage.p.dialogues), Dialogue)}
    assert len(out.items) == n_items and out.n_dialogues == len(train) == out.n_exemplars
    assert {i.meta["dialogue_id"] for i in out.items} == train
    assert {i.meta["exemplar_id"] for i in out.items} <= train
    for item in out.items:
        turns = dialogues[item.meta["dialogue_id"]].turns
        assert item.history == turns[:len(item.history)]
        assert item.candidates[0].response == turns[len(item.history)].text
    held_out = {t.text for d in dialogues.values() if split.part(d.id) != "train"
                for t in d.turns if len(t.text) > 40}
    assert held_out and prompts          # (repeated prompts are answered from the cache)
    assert not [t for t in held_out if any(t in p for p in prompts)]


def test_the_exemplar_pool_keeps_train_and_refuses_unlisted_dialogues(tmp_path):
    from medpref.data.split import DialogueSplit
    from medpref.sampling.build import load_exemplar_pool, load_source_dialogues

    corpus, other = tmp_path / "corpus.jsonl", tmp_path / "other.jsonl"
    write_jsonl(corpus, [_dialogue(i, 3) for i in ("a", "b", "c")])
    write_jsonl(other, [_dialogue(i, 3) for i in ("a", "c", "x")])
    split = DialogueSplit({"a": "train", "b": "dev", "c": "eval"})
    p = SamplingParams(dialogues=str(corpus), exemplar_pool=str(corpus))
    assert [d.id for d in load_source_dialogues(p, split)] == ["a"]
    assert [d.id for d in load_exemplar_pool(p, split)] == ["a"]
    # another pool file: what the split holds out stays out, what it does not list stays in
    p_other = SamplingParams(dialogues=str(corpus), exemplar_pool=str(other))
    assert [d.id for d in load_exemplar_pool(p_other, split)] == ["a", "x"]
    # a corpus dialogue the split does not list is an error, not a silent train dialogue
    with pytest.raises(KeyError, match="'x' is in no part"):
        load_source_dialogues(SamplingParams(dialogues=str(other)), split)
