"""Stage 04's decisions against blind hand readings (scripts/pair_readings.py)."""

from __future__ import annotations

import json

import pytest

from medpref import REPO_ROOT
from script_module import script_module

pr = script_module("scripts/pair_readings.py")


def write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def test_agreement_and_unusable_wins_are_counted(tmp_path):
    decisions = [
        {"strategy": "s", "item_id": "u1", "winner_source": "sampled"},
        {"strategy": "s", "item_id": "u2", "winner_source": "generated"},
        {"strategy": "s", "item_id": "u3", "winner_source": None},
    ]
    write(tmp_path / "reports/04_annotation/records/decisions.jsonl", decisions)
    key = {"X": "sampled", "Y": "generated"}
    readings = [
        {"item_id": "u1", "better": "X", "X_usable": True, "Y_usable": False, "key": key,
         "second": {"better": "X", "X_usable": True, "Y_usable": False}},
        {"item_id": "u2", "better": "X", "X_usable": True, "Y_usable": False, "key": key,
         "second": {"better": "Y", "X_usable": True, "Y_usable": True}},
        {"item_id": "u3", "better": "equal", "X_usable": False, "Y_usable": False, "key": key},
    ]
    write(tmp_path / "r.jsonl", readings)
    got = pr.score(tmp_path, tmp_path / "r.jsonl")
    s = got["strategies"]["s"]
    assert (s["decisive"], s["no_decision"], s["reader_decided"], s["agree"]) == (2, 1, 2, 1)
    assert (s["usable_over_unusable"], s["unusable_over_usable"]) == (1, 1)
    assert got["second_reader"] == {"items": 2, "better_same": 1, "usable_same": 3}


def test_a_bad_reading_names_its_line(tmp_path):
    write(tmp_path / "reports/04_annotation/records/decisions.jsonl", [])
    write(tmp_path / "r.jsonl", [{"item_id": "u1", "better": "Z", "X_usable": True,
                                  "Y_usable": True, "key": {}}])
    with pytest.raises(SystemExit, match=r"r.jsonl:1: field 'better'"):
        pr.score(tmp_path, tmp_path / "r.jsonl")


#: the commit that landed the records of run c4d3594, whose stage-04 items were read
READ_RUN_LANDED = "a6483c4"


def _unlabeled_md5(lock_text: str) -> set[str]:
    """The md5 of stage 01's items (``data/01_sampling/unlabeled.jsonl``) as a dvc.lock
    records it (every stage that lists it, as output or dependency)."""
    import yaml

    lock = yaml.safe_load(lock_text)
    return {f["md5"] for st in lock["stages"].values() for kind in ("outs", "deps")
            for f in st.get(kind, []) if f["path"] == "data/01_sampling/unlabeled.jsonl"}


def test_the_committed_readings_cover_the_committed_runs_items():
    """The readings judge stage 04's items (a history and its two candidate turns), not a
    strategy's choice: they stay valid while stage 01's items are the ones read (a retrained
    REM changes the decisions, which are then scored against the same readings)."""
    import subprocess

    rows = [json.loads(line) for line in (REPO_ROOT / "data/embedded/rem/pair_readings.jsonl")
            .read_text(encoding="utf-8").splitlines() if line]
    decisions = [json.loads(line) for line in (REPO_ROOT / "reports/04_annotation/records/"
                 "decisions.jsonl").read_text(encoding="utf-8").splitlines() if line]
    assert {r["item_id"] for r in rows} == {d["item_id"] for d in decisions}
    then = subprocess.run(["git", "-C", str(REPO_ROOT), "show", f"{READ_RUN_LANDED}:dvc.lock"],
                          capture_output=True, text=True, check=True)
    now = (REPO_ROOT / "dvc.lock").read_text(encoding="utf-8")
    assert len(_unlabeled_md5(then.stdout)) == 1
    assert _unlabeled_md5(now) == _unlabeled_md5(then.stdout), \
        "stage 01's items changed since they were read: read anew"
    assert {r["run"] for r in rows} == {"c4d3594"}
    got = pr.score(REPO_ROOT, REPO_ROOT / "data/embedded/rem/pair_readings.jsonl")
    assert got["second_reader"]["items"] == len(rows)
