"""Blind-labelled credits of a run waiting to be folded (data/embedded/sp_run_batches)."""

from __future__ import annotations

import json

from medpref import REPO_ROOT
from medpref.simulation import runpairs

BATCHES = REPO_ROOT / "data" / "embedded" / "sp_run_batches"


def read(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def test_each_batch_folds_into_hand_graded_items():
    folders = [p for p in BATCHES.iterdir() if p.is_dir()]
    assert folders
    for folder in folders:
        blind = read(folder / "grader_pairs.jsonl")
        secret = read(folder / "grader_pairs_SECRET.jsonl")
        labels = read(folder / "grader_pairs_labels.jsonl")
        assert [b["id"] for b in blind] == [s["id"] for s in secret]
        assert {lab["id"] for lab in labels} == {b["id"] for b in blind}
        items = runpairs.labelled_items(blind, secret, labels, folder.name, 1,
                                        str(folder / "grader_pairs_labels.jsonl"))
        assert len(items) == len(blind) >= 400
        assert {s["split"] for s in secret} == {"dev", "test"}
        # every credit of the run's model doctors is one of the pairs
        assert sum(s["credited"] for s in secret) > 0
