"""params.yaml validation: the committed file loads; mistakes name the key."""

from __future__ import annotations

import copy

import pytest
import yaml

from medpref import REPO_ROOT
from medpref.params import ParamsError, load_params, parse_params


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
