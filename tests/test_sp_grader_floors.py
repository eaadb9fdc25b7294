"""The configured SP grader over EVERY hand-graded item, against recorded floors.

``data/embedded/sp_grader_floors.yaml`` holds, per split and batch group (every batch;
the committed run's own sentences, batch ``run-06c7d04``; the templated and script
batches), the κ, recall and precision the grader measured when the floors were written
(the figures themselves: the current figures are the floors; "run" holds every batch of a
run's own sentences, ``run-*``). A rule change that lowers
any of them fails here; one that raises them should raise the floors in the same commit.
Needs the MiniLM encoder (``models/all-minilm-l6-v2``); skipped without it.
"""

from __future__ import annotations

import math

import pytest
import yaml

from medpref import REPO_ROOT
from medpref.data.sp_cases import embedded_sp_graded
from medpref.params import load_params
from medpref.simulation.validation import agreement_rows, grade_hand_items

FLOORS = REPO_ROOT / "data" / "embedded" / "sp_grader_floors.yaml"
def is_run_batch(batch: str) -> bool:
    """A batch of a committed run's own sentences (``run-<commit>``)."""
    return batch.startswith("run-")


def group_of(batch: str, group: str) -> bool:
    return {"all": True, "run": is_run_batch(batch), "other": not is_run_batch(batch)}[group]


@pytest.fixture(scope="module")
def measured():
    from conftest import configured_grader_with_minilm

    grader = configured_grader_with_minilm()
    items = embedded_sp_graded()
    grades = grade_hand_items(items, grader)
    by_id = {gr.case: gr for gr in grades}
    out = {}
    for group in ("all", "run", "other"):
        chosen = [it for it in items if group_of(it.batch or "v1", group)]
        rows = agreement_rows(chosen, [by_id[it.id] for it in chosen], n_boot=100)
        out[group] = {r["split"]: r for r in rows
                      if r["batch"] == "all" and r["category"] == "all"}
    return out


def test_the_floors_name_every_split_and_group():
    floors = yaml.safe_load(FLOORS.read_text(encoding="utf-8"))
    assert floors["grader"] == load_params().simulation.grader.mode
    assert set(floors["floors"]) == {"all", "run", "other"}
    for group in floors["floors"].values():
        assert set(group) == {"dev", "test"}
        for figures in group.values():
            assert set(figures) == {"items", "kappa", "recall", "precision"}


@pytest.mark.parametrize("group", ["all", "run", "other"])
@pytest.mark.parametrize("split", ["dev", "test"])
def test_the_grader_holds_its_recorded_figures(measured, group, split):
    floor = yaml.safe_load(FLOORS.read_text(encoding="utf-8"))["floors"][group][split]
    row = measured[group][split]
    assert row["items"] == floor["items"], "the hand-graded items changed: rewrite the floors"
    for stat in ("kappa", "recall", "precision"):
        assert not math.isnan(row[stat]), stat
        assert row[stat] >= floor[stat] - 1e-9, (group, split, stat, row[stat], floor[stat])
