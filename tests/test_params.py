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


def test_params_yaml_is_as_generated():
    """One home per knob: every value a section model defaults is written into params.yaml
    from the code (`medpref params-yaml`), so a section built in code (a notebook, a test,
    a user's script) gets the values `dvc repro` runs with, and nobody types it twice."""
    from medpref import paramsgen

    diff = paramsgen.differences(REPO_ROOT / "params.yaml")
    assert not diff, ("params.yaml differs from the section models' defaults; run "
                      "`medpref params-yaml`:\n" + "".join(diff[:60]))


def test_params_yaml_generator_writes_a_changed_default_and_keeps_the_rest(monkeypatch):
    """A default changed in the code reaches params.yaml in its old style, a defaulted key
    missing from the file is added, and the comments, the key order and the values typed
    only in the file stay; a second pass changes nothing."""
    from pydantic import Field

    from medpref import paramsgen
    from medpref.params import StrictModel

    class Inner(StrictModel):
        k: int = 3
        calls: dict[str, int] = Field(default_factory=lambda: {"a": 1, "b": 2})

    class Section(StrictModel):
        name: str                        # no default: typed in the file alone
        n: int = 5
        inner: Inner = Field(default_factory=Inner)
        added: float = 0.5

    text = ("# top comment\n"
            "toy:\n"
            "  name: kept              # a comment on a typed value\n"
            "  n: 4                    # a comment on a defaulted value\n"
            "  inner:\n"
            "    k: 3\n"
            "    calls: {a: 1, b: 9}   # flow style\n")
    section = Section.model_validate(yaml.safe_load(text)["toy"])
    out = paramsgen.render(text, {"toy": section})
    assert out == ("# top comment\n"
                   "toy:\n"
                   "  name: kept              # a comment on a typed value\n"
                   "  n: 5                    # a comment on a defaulted value\n"
                   "  inner:\n"
                   "    k: 3\n"
                   "    calls: {a: 1, b: 2}   # flow style\n"
                   "  added: 0.5\n")
    again = Section.model_validate(yaml.safe_load(out)["toy"])
    assert paramsgen.render(out, {"toy": again}) == out


def test_pipeline_named_values_are_not_generated():
    """Roles, servers and prices have no code value: the generator leaves them to the file."""
    from medpref import paramsgen

    paths = {".".join(p) for p, _, _ in paramsgen.generated_values(load_params()._sections)}
    assert not [p for p in paths if p.startswith(paramsgen.TYPED_IN_PARAMS)]
    assert "simulation.patient.guard_min_sentences" in paths     # a nested default


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
