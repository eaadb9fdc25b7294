"""The REM's real training-side turns (data/embedded/rem/real_turns.jsonl, issue 40)."""

from __future__ import annotations

import json
from collections import Counter

import yaml

from medpref import REPO_ROOT
from script_module import script_module

SCRIPT = REPO_ROOT / "scripts" / "rem_real_items.py"
real_items = script_module("scripts/rem_real_items.py")

ROWS = [json.loads(line) for line in real_items.COMMITTED.read_text(encoding="utf-8")
        .splitlines() if line]


def test_the_committed_items_are_the_draw():
    assert real_items.check() == 0


def test_a_changed_turn_is_caught(tmp_path, monkeypatch):
    rows = [dict(r) for r in ROWS]
    human = next(i for i, r in enumerate(rows) if r["source"]["kind"] == "human_train")
    rows[human]["turn"] += " And one more thing."
    gen = next(i for i, r in enumerate(rows) if r["source"]["kind"] == "generated")
    rows[gen]["source"] = {**rows[gen]["source"], "key": "0000000000000000"}
    bad = tmp_path / "real_turns.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    monkeypatch.setattr(real_items, "COMMITTED", bad)
    assert real_items.check() == 1


def test_sources_parts_and_labels():
    assert Counter(r["source"]["kind"] for r in ROWS) == {"generated": 81, "human_train": 120}
    split = yaml.safe_load((REPO_ROOT / "data/embedded/dialogue_split.yaml").read_text())
    assert {r["source"]["dialogue"] for r in ROWS} <= set(split["train"])
    by_dialogue = {}
    for r in ROWS:
        assert by_dialogue.setdefault(r["source"]["dialogue"], r["part"]) == r["part"]
    assert set(by_dialogue.values()) == {"train", "dev"}
    for r in ROWS:
        assert set(r["labels"]["l1"]) == set("ABCDEF"), r["id"]
        assert all(v in (0, 1, 2) for lab in r["labels"].values() for v in lab.values())
    assert sum("l2" in r["labels"] for r in ROWS) == 60
