"""scripts/caseset_judge.py: the controls graded by the judge role, not by the rules."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from medpref import registry
from medpref.llm.scripted import ScriptedBackend
from script_module import script_module

cj = script_module("scripts/caseset_judge.py")


@pytest.fixture
def always():
    """A backend answering every request with ``answer["text"]``, registered for one test
    (the registries are module state)."""
    answer = {"text": "Yes"}
    registry.register_backend("test_caseset_judge")(
        lambda cfg, shared: ScriptedBackend(lambda req: answer["text"], name="always"))
    yield answer
    registry.BACKENDS.unregister("test_caseset_judge")


@pytest.mark.parametrize("answer, score", [("Yes", 100.0), ("No", 0.0)])
def test_the_judge_not_the_rules_grades_the_controls(tmp_path, always, answer, score):
    """A judge that says yes to everything passes the lecture on every symptom and test
    item (the rules give it 0), one that says no fails the clinician's script: the rows
    are the judge's, and its range shows in them. (A diagnosis also needs the judge's
    count of candidates, which "Yes" does not give.)"""
    always["text"] = answer
    args = SimpleNamespace(source="embedded", path=None, limit=1, start=0,
                           controls=["control_script", "control_lecture"], mode="generate",
                           backend="test_caseset_judge", model="always", free=True,
                           cache=str(tmp_path / "cache.sqlite"), out=None)
    text = cj.run(args)
    assert "role `judge` = test_caseset_judge" in text
    # the judge's spread per control: every answer the same, so min = max
    share = f"{score / 100:.3f}"
    assert f"- control_lecture symptoms: p(yes) min {share}, median {share}, max {share}" in text
    table = text.split("control_script expected")[0]       # the controls' table, no gate
    rows = {line.split("|")[1].strip(): line for line in table.splitlines()
            if line.startswith("| control_")}
    for control in ("control_script", "control_lecture"):
        cells = [c.strip() for c in rows[control].split("|")[3:5]]     # Sym., Test
        assert all(float(c) == score for c in cells if c != "nan"), rows[control]
