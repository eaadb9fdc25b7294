"""The REM's independent test (issue 40 item 2): turns no construction made, labelled blind."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import yaml

from medpref import REPO_ROOT

PATH = REPO_ROOT / "data/embedded/rem/independent.jsonl"
RULES = "ABCDEF"


def rows() -> list[dict]:
    return [json.loads(line) for line in PATH.read_text(encoding="utf-8").splitlines()]


def test_the_committed_items_are_the_seeded_draw_from_the_committed_records():
    out = subprocess.run([sys.executable, "scripts/rem_independent_items.py", "--check"],
                         cwd=REPO_ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_sizes_sources_and_labels():
    data = rows()
    kinds = Counter((r["source"].get("draw", 1), r["source"]["kind"]) for r in data)
    assert kinds == {(1, "model_heldout"): 120, (1, "model_sp"): 80, (1, "human_eval"): 100,
                     (2, "model_heldout"): 120, (2, "model_sp"): 80, (2, "human_eval"): 36,
                     (3, "model_heldout"): 120, (3, "model_sp"): 120}
    turns = [r["turn"] for r in data if r["source"].get("draw", 1) > 1]
    first = {r["turn"] for r in data if r["source"].get("draw", 1) == 1}
    assert not first & set(turns)                            # no turn in two draws
    assert len(set(turns)) == len(turns)
    # the third draw's SP turns are the test cases' only (the other cases' train the REM)
    test_cases = set(yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
                     ["rem"]["turns"]["sp_test_cases"])
    third_sp = {r["source"]["case"] for r in data
                if r["source"].get("draw") == 3 and r["source"]["kind"] == "model_sp"}
    assert third_sp and third_sp <= test_cases
    for r in data:
        assert set(r["labels"]["l1"]) == set(RULES), r["id"]
        assert all(v in (0, 1, 2) for v in r["labels"]["l1"].values()), r["id"]
        assert r["history"] == [] or r["history"][-1]["role"] == "patient", r["id"]
    second = [r for r in data if "l2" in r["labels"]]
    assert Counter(r["source"].get("draw", 1) for r in second) == {1: 60, 2: 59, 3: 60}
    assert all(set(r["labels"]["l2"]) == set(RULES) for r in second)


def test_human_turns_come_from_eval_dialogues_only():
    split = yaml.safe_load((REPO_ROOT / "data/embedded/dialogue_split.yaml").read_text())
    dialogues = {r["source"]["dialogue"] for r in rows() if r["source"]["kind"] == "human_eval"}
    assert dialogues and dialogues <= set(split["eval"])


def test_every_label_has_all_three_scores_somewhere_except_where_the_set_has_none():
    """The set is not degenerate: on every rule at least two labels occur."""
    data = rows()
    for rule in RULES:
        assert len({r["labels"]["l1"][rule] for r in data}) >= 2, rule
