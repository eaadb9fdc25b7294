"""params.yaml validation: the committed file loads; mistakes name the key."""

from __future__ import annotations

import copy

import pytest
import yaml

from medpref import REPO_ROOT
from medpref.llm.types import CallSpec
from medpref.params import ParamsError, load_params, parse_params
from medpref.prompts import load_prompt


@pytest.fixture(scope="module")
def raw():
    return yaml.safe_load((REPO_ROOT / "params.yaml").read_text())


def test_committed_params_load():
    params = load_params()
    assert params.shared.seed == 13
    assert "policy" in params.shared.llm.roles
    assert params.sampling.n_items >= 1


def test_misspelled_key_is_rejected_with_its_name_and_a_suggestion(raw):
    bad = copy.deepcopy(raw)
    bad["sampling"]["n_itemz"] = bad["sampling"].pop("n_items")
    with pytest.raises(ParamsError, match=r"unknown key 'sampling\.n_itemz'.*'n_items'"):
        parse_params(bad)


def test_nested_misspelling_names_the_full_path(raw):
    bad = copy.deepcopy(raw)
    bad["shared"]["llm"]["roles"]["judge"]["temprature"] = 0.5
    with pytest.raises(ParamsError, match=r"shared\.llm\.roles\.judge\.temprature.*temperature"):
        parse_params(bad)


def test_out_of_range_value_is_rejected(raw):
    bad = copy.deepcopy(raw)
    bad["sampling"]["future_rounds"] = 0
    with pytest.raises(ParamsError, match=r"'sampling\.future_rounds'"):
        parse_params(bad)


def test_unknown_section_is_rejected(raw):
    with pytest.raises(ParamsError, match=r"unknown section 'samplng'.*'sampling'"):
        parse_params({**raw, "samplng": {}})


def test_replay_role_must_name_what_it_replays(raw):
    bad = copy.deepcopy(raw)
    bad["shared"]["llm"]["roles"]["judge"] = {"backend": "replay"}
    with pytest.raises(ParamsError, match="replays"):
        parse_params(bad)


def test_a_role_has_no_token_budget(raw):
    """max_new_tokens has one home, the stage section of each call: a role-level budget
    (which every call overrode) is refused with where to put it."""
    bad = copy.deepcopy(raw)
    bad["shared"]["llm"]["roles"]["judge"]["max_new_tokens"] = 128
    where = r"shared\.llm\.roles\.judge.*annotation\.calls\.judge\.max_new_tokens"
    with pytest.raises(ParamsError, match=where):
        parse_params(bad)


def _dump(value):
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        return value.model_dump()
    if isinstance(value, (list, tuple)):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return value


_NONE = object()


def _default_mismatches(value, path: str, default=_NONE) -> list[str]:
    """Fields whose code default differs from the value params.yaml gives them; a
    sub-section is compared field by field (against its default instance, if any)."""
    from pydantic import BaseModel
    from pydantic_core import PydanticUndefined

    if not isinstance(value, BaseModel):
        if default is _NONE or _dump(default) == _dump(value):
            return []
        return [f"{path}: code {_dump(default)!r} vs params.yaml {_dump(value)!r}"]
    out = []
    for name, field in type(value).model_fields.items():
        if isinstance(default, BaseModel):
            sub = getattr(default, name)
        elif field.default_factory is not None:
            sub = field.default_factory()
        elif field.default is not PydanticUndefined:
            sub = field.default
        else:
            sub = _NONE
        out += _default_mismatches(getattr(value, name), f"{path}.{name}", sub)
    return out


def test_code_defaults_are_the_committed_values():
    """One home per knob: a section built in code (a notebook, a test, a user's script)
    gets the values `dvc repro` runs with. Roles, servers and prices are named by the
    pipeline (the code has none)."""
    params = load_params()
    bad = []
    for name, section in params._sections.items():
        bad += _default_mismatches(section, name)
    bad = [b for b in bad if not b.startswith(("shared.llm.roles", "shared.llm.prices",
                                               "shared.llm.servers"))]
    assert not bad, "\n".join(bad)


def every_call(params) -> dict[str, CallSpec]:
    """Every call the committed params declare, by a readable name."""
    an, sa, mq, im, nc, rem, sim = (params.annotation, params.sampling, params.medqa,
                                    params.imapscore, params.notechat, params.rem,
                                    params.simulation)
    calls = {f"{section}.{name}": sec.call(name)
             for section, sec in (("annotation", an), ("sampling", sa), ("medqa", mq),
                                  ("imapscore", im), ("notechat", nc), ("rem", rem),
                                  ("simulation", sim))
             for name, slot in type(sec).CALLS.items() if slot.role_from is None}
    for m in mq.models:
        calls[f"medqa.read.{m.name}"] = mq.read_call(m)
        for native in (False, True):
            calls[f"medqa.distill.{m.name}.{native}"] = mq.distill_call(m.role, native)
    for b in nc.baselines:
        calls[f"notechat.baseline.{b.name}"] = nc.baseline_call(b)
    for d in sim.doctors:
        for kind, call in (("sp", sim.doctor_call(d)), ("next_turn", sim.next_turn_call(d)),
                           ("heldout", sim.heldout_call(d))):
            calls[f"simulation.{kind}.{d.name}"] = call
    return calls


def test_every_call_names_a_role_and_a_prompt_that_exist():
    params = load_params()
    calls = every_call(params)
    assert len(calls) >= 30
    for name, call in calls.items():
        assert call.role in params.shared.llm.roles, f"{name}: no role '{call.role}'"
        if call.prompt:  # "" where the call site picks among several its params name
            load_prompt(call.prompt)
    assert params.annotation.call("judge") == CallSpec("judge", "annotation_judge", 24, "Answer:")


def test_a_call_needs_a_positive_budget():
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        CallSpec("judge", "annotation_judge", 0)
