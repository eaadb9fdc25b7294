"""Params overlays: overrides applied as `dvc exp run -S`, validated like params.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest

from medpref import REPO_ROOT
from medpref.overlays import apply, flatten, set_args, validate
from medpref.params import ParamsError


def test_flatten_and_apply_on_a_hand_example():
    tree = {"a": {"b": 1, "c": {"d": [1, 2]}}, "e": None}
    assert flatten(tree) == {"a.b": 1, "a.c.d": [1, 2], "e": None}
    base = {"a": {"b": 0, "x": 5}}
    assert apply(base, {"a.b": 1, "a.c.d": 2}) == {"a": {"b": 1, "x": 5, "c": {"d": 2}}}
    assert base == {"a": {"b": 0, "x": 5}}  # not changed in place


def test_the_paper_overlay_is_valid_and_sets_the_papers_sizes():
    params = validate("paper")
    assert (params.training.recipe, params.training.hardware) == ("paper", "gpu")
    assert params.rem.train.hardware == "gpu"
    assert params.simulation.rounds == 5 and params.simulation.n_cases is None
    assert params.shared.llm.roles["judge"].backend == "openai"


def test_set_args_are_hydra_overrides_dvc_accepts():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    args = set_args("paper")
    assert args[::2] == ["-S"] * (len(args) // 2)
    assert all(a.startswith("++") for a in args[1::2])   # add-or-override: any valid key
    parsed = OverridesParser.create().parse_overrides(args[1::2])
    values = {o.key_or_group: o.value() for o in parsed}
    assert values["simulation.rounds"] == 5 and values["simulation.n_cases"] is None
    assert values["shared.llm.roles.judge.model"] == "gpt-4o"


def _repo_with_overlay(root: Path, name: str, text: str) -> Path:
    """A repo folder with the committed params.yaml and one overlay ``name``."""
    (root / "configs" / "overlays").mkdir(parents=True)
    (root / "params.yaml").write_text((REPO_ROOT / "params.yaml").read_text())
    (root / "configs" / "overlays" / f"{name}.yaml").write_text(text)
    return root


def test_an_overlay_with_an_unknown_key_is_refused_naming_it(tmp_path):
    _repo_with_overlay(tmp_path, "bad", "simulation:\n  roundz: 3\n")
    with pytest.raises(ParamsError, match="unknown key 'simulation.roundz'"):
        validate("bad", tmp_path)
    with pytest.raises(SystemExit, match="no params overlay 'nope'"):
        validate("nope", tmp_path)


def test_an_overlay_with_the_old_training_profile_key_is_refused_naming_it(tmp_path):
    _repo_with_overlay(tmp_path, "old", "training:\n  profile: paper\n")
    with pytest.raises(ParamsError, match="unknown key 'training.profile'"):
        validate("old", tmp_path)
