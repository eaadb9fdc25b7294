"""dvc.yaml's plots: each names a table a stage writes, and columns that table has."""

from __future__ import annotations

import csv

import pytest
import yaml

from medpref import REPO_ROOT

SPEC = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text())


def _foreach_keys(stage: dict) -> tuple[str, list[str]]:
    """The variable that names a ``foreach: ${section.key}`` stage (``${key}`` over a
    mapping, ``${item}`` over a list) and its values, read from params.yaml."""
    ref = stage["foreach"]
    node = ref
    if isinstance(ref, str):
        node = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
        for part in ref.strip("${}").split("."):
            node = node[part]
    return ("${item}" if isinstance(node, list) else "${key}"), list(node)


def declared_outs() -> set[str]:
    """Every path a stage declares (outs, metrics, plots); a foreach stage per key."""
    outs = set()
    for stage in SPEC["stages"].values():
        body = stage.get("do", stage)
        var, keys = _foreach_keys(stage) if "foreach" in stage else ("", [None])
        for entry in body.get("outs", []) + body.get("metrics", []) + body.get("plots", []):
            path = next(iter(entry)) if isinstance(entry, dict) else entry
            outs.update(path.replace(var, k) if k else path for k in keys)
    return outs


def plot_sources(entry: dict) -> list[tuple[str, list[str]]]:
    """(file, fields it must have) for one top-level plots entry."""
    (name, props), = entry.items()
    x, y = props.get("x"), props.get("y")
    if isinstance(y, dict):
        return [(f, [x, *([v] if isinstance(v, str) else v)]) for f, v in y.items()]
    return [(name, [x, *([y] if isinstance(y, str) else y)])]


CASES = [src for entry in SPEC.get("plots", []) for src in plot_sources(entry)]


def test_there_are_plots():
    assert len(CASES) >= 15


@pytest.mark.parametrize("path,fields", CASES, ids=[f"{p}:{f[-1]}" for p, f in CASES])
def test_plot_reads_a_declared_table_with_its_columns(path, fields):
    assert path in declared_outs(), f"plots: {path} is not an output of any dvc stage"
    file = REPO_ROOT / path
    if not file.exists():
        pytest.skip(f"{path} not produced yet (run its stage)")
    with open(file, newline="", encoding="utf-8") as fh:
        header = next(csv.reader(fh))
    missing = [f for f in fields if f not in header]
    assert not missing, f"plots: {path} has no column(s) {missing}; it has {header}"
