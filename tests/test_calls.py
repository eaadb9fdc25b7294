"""Every model call in one shape: each params section's ``calls`` mapping
(:mod:`medpref.llm.calls`).

The mapping must resolve every call to the role, prompt, budget and answer prefix that
main's section configs resolved before it (``fixtures/calls_before_calls_mapping.json``,
made once by ``fixtures/calls_before_calls_mapping.py``): those four fields are what a
call's cache key holds, so a warm rerun makes no new model call. The keys that moved into
``calls`` are errors naming their new home."""

from __future__ import annotations

import copy
import json
from dataclasses import asdict
from pathlib import Path

import pytest
import yaml

from medpref import REPO_ROOT
from medpref.llm.calls import CallParams, CallSlot, resolve_calls
from medpref.params import ParamsError, load_params, parse_params
from medpref.simulation.config import DoctorConfig

BEFORE = json.loads((Path(__file__).parent / "fixtures" / "calls_before_calls_mapping.json")
                    .read_text(encoding="utf-8"))
RAW = yaml.safe_load((REPO_ROOT / "params.yaml").read_text(encoding="utf-8"))


def resolved_now() -> dict:
    """The same calls as the fixture script resolved, keyed alike, from the new params."""
    p = load_params()
    out: dict = {}
    s = p.sampling
    out["sampling/continuation"] = s.call("continuation")
    for speaker, spec in s.round_calls.items():
        out[f"sampling/rounds/{speaker}"] = spec
    n = p.notechat
    out["notechat/planning"] = n.call("planning")
    out.update({f"notechat/turn/{k}": c for k, c in n.turn_calls.items()})
    out.update({f"notechat/polish/{k}": c for k, c in n.polish_calls.items()})
    out.update({f"notechat/baseline/{b.name}": n.baseline_call(b) for b in n.baselines})
    from medpref.registry import REM_SCORERS

    # a fitted scorer (the encoder REM, the baselines) makes no model call
    out.update({f"rem/scorer/{name}": p.rem.call("score") for name, s in p.rem.scorers.items()
                if not REM_SCORERS.get(s.mode).fitted})
    a = p.annotation
    out["annotation/judge"] = a.call("judge")
    out.update({f"annotation/agent/{k}": v for k, v in vars(a.agent_calls).items()})
    for name in ("question", "answer", "relation"):
        out[f"imapscore/{name}"] = p.imapscore.call(name)
    m = p.medqa
    for model in m.models:
        for native in (False, True):
            out[f"medqa/distill/{model.role}/{'native' if native else 'text'}"] = \
                m.distill_call(model.role, native)
        out[f"medqa/read/{model.name}"] = m.read_call(model)
    out["medqa/judge"] = m.judge_call
    sim = p.simulation
    for d in [*sim.doctors, DoctorConfig(name="sft", role="policy",
                                         adapter="data/05_training/sft")]:
        out[f"simulation/consult/{d.name}"] = sim.doctor_call(d)
        out[f"simulation/next_turn/{d.name}"] = sim.next_turn_call(d)
        out[f"simulation/heldout/{d.name}"] = sim.heldout_call(d)
    for key, name in (("patient", "patient"), ("grader", "grader"), ("gpd", "gpd"),
                      ("rem", "rem_comment")):
        out[f"simulation/{key}"] = sim.call(name)
    out = {k: v if isinstance(v, dict) else asdict(v) for k, v in out.items()}
    for part, settings in sim.keyed_settings().items():
        out[f"simulation/record_settings/{part}"] = settings
    return out


def test_every_call_resolves_as_before_the_calls_mapping():
    before = {k: v for k, v in BEFORE.items() if k != "source_commit"}
    now = resolved_now()
    assert sorted(now) == sorted(before)
    # a setting added since (a new grader or patient key, issue 40/41) is not a change of
    # what the calls mapping resolved: only the settings the fixture holds are compared
    changed = {k: (before[k], now[k]) for k in before
               if {key: now[k].get(key) for key in before[k]} != before[k]}
    assert not changed


def test_the_comparison_sees_a_changed_budget(monkeypatch):
    raw = copy.deepcopy(RAW)
    raw["annotation"]["calls"]["need"]["max_new_tokens"] = 9
    p = parse_params(raw)
    assert p.annotation.agent_calls.need.max_new_tokens == 9 != \
        BEFORE["annotation/agent/need"]["max_new_tokens"]


def test_params_spell_a_generation_budget_one_way():
    text = (REPO_ROOT / "params.yaml").read_text(encoding="utf-8")
    spellings = {w for line in text.splitlines() for w in line.split("#")[0].replace(
        ":", " ").replace("{", " ").replace(",", " ").split() if w.endswith("_tokens")}
    assert spellings == {"max_new_tokens", "chunk_tokens"}   # chunk_tokens: a retrieval size


def test_each_section_that_calls_models_declares_its_calls():
    p = load_params()
    for section in ("sampling", "notechat", "rem", "annotation", "imapscore", "medqa",
                    "simulation"):
        sec = getattr(p, section)
        assert set(sec.calls) == set(type(sec).CALLS), section


@pytest.mark.parametrize("section, path, old, new", [
    ("annotation", ("agent",), {"rank_tokens": 24}, "annotation.calls.rank.max_new_tokens"),
    ("annotation", ("judge",), {"max_new_tokens": 24}, "annotation.calls.judge.max_new_tokens"),
    ("medqa", (), {"judge_max_new_tokens": 4}, "medqa.calls.judge.max_new_tokens"),
    ("imapscore", (), {"max_new_tokens_relation": 6}, "imapscore.calls.relation.max_new_tokens"),
    ("notechat", (), {"doctor_max_new_tokens": 48}, "notechat.calls.doctor_turn.max_new_tokens"),
    ("sampling", ("rounds",), {"patient_role": "patient"}, "sampling.calls.patient_turn.role"),
    ("rem", ("scorers", "sampled"), {"max_new_tokens": 80}, "rem.calls.score.max_new_tokens"),
    ("rem", (), {"prompt": "rem_judge"}, "rem.calls.score.prompt"),
    ("simulation", ("next_turn",), {"gpd_role": "judge"}, "simulation.calls.gpd.role"),
    ("simulation", (), {"rem_role": "rem"}, "simulation.calls.rem_comment.role"),
])
def test_a_key_of_before_the_calls_mapping_is_an_unknown_key_naming_it(section, path, old,
                                                                      new):
    """No migration shims: a key that moved into ``<section>.calls`` (``new``) is refused
    like any misspelled key, by its dotted name."""
    raw = copy.deepcopy(RAW)
    target = raw[section]
    for part in path:
        target = target[part]
    target.update(old)
    key = ".".join([section, *path, *old])
    with pytest.raises(ParamsError, match=f"unknown key '{key}'"):
        parse_params(raw)


def test_a_missing_unknown_or_overspecified_call_is_an_error_naming_it():
    slots = {"judge": CallSlot(answer_prefix="Verdict:"), "read": CallSlot(role_from="models")}
    ok = {"judge": CallParams(role="judge", prompt="j", max_new_tokens=4),
          "read": CallParams(prompt="r", max_new_tokens=9)}
    assert resolve_calls("medqa", ok, slots)["read"].role == ""
    with pytest.raises(ValueError, match=r"medqa.calls: missing \['read'\]"):
        resolve_calls("medqa", {"judge": ok["judge"]}, slots)
    with pytest.raises(ValueError, match="unknown call 'jugde' \\(did you mean 'judge'"):
        resolve_calls("medqa", {**ok, "jugde": ok["judge"]}, slots)
    with pytest.raises(ValueError, match="medqa.calls.judge.answer_prefix: fixed by the code"):
        resolve_calls("medqa", {**ok, "judge": ok["judge"].model_copy(
            update={"answer_prefix": "x"})}, slots)
    with pytest.raises(ValueError, match="medqa.calls.read.role: each call takes it from models"):
        resolve_calls("medqa", {**ok, "read": ok["read"].model_copy(update={"role": "x"})},
                      slots)
    with pytest.raises(ValueError, match="medqa.calls.judge.role: required"):
        resolve_calls("medqa", {**ok, "judge": CallParams(prompt="j", max_new_tokens=4)}, slots)


def test_a_misspelled_call_field_or_call_name_in_params_is_an_error():
    raw = copy.deepcopy(RAW)
    raw["medqa"]["calls"]["judge"]["max_tokens"] = 4
    with pytest.raises(ParamsError, match="unknown key 'medqa.calls.judge.max_tokens'"):
        parse_params(raw)
    raw = copy.deepcopy(RAW)
    raw["imapscore"]["calls"]["relations"] = raw["imapscore"]["calls"].pop("relation")
    with pytest.raises(ParamsError, match="unknown call 'relations'"):
        parse_params(raw)


def test_calls_that_share_one_client_or_one_trained_prompt_must_agree():
    raw = copy.deepcopy(RAW)
    raw["imapscore"]["calls"]["relation"]["role"] = "annotator"
    with pytest.raises(ParamsError, match="one judge asks every call"):
        parse_params(raw)
    raw = copy.deepcopy(RAW)
    raw["simulation"]["calls"]["next_turn"]["prompt"] = "other"
    with pytest.raises(ParamsError, match="the prompt they were trained with"):
        parse_params(raw)
