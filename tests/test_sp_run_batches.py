"""Blind-labelled credits of a run (data/embedded/sp_run_batches), folded or waiting to be."""

from __future__ import annotations

import json

from medpref import REPO_ROOT
from medpref.data.sp_cases import embedded_sp_graded
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


def test_a_folded_batch_holds_its_folders_labels():
    """A batch already in the hand-graded set: the same pairs, verdicts and splits."""
    graded = embedded_sp_graded()
    for folder in (p for p in BATCHES.iterdir() if p.is_dir()):
        folded = [g for g in graded if g.batch == folder.name]
        if not folded:
            continue
        labels = {lab["id"]: lab for lab in read(folder / "grader_pairs_labels.jsonl")}
        secret = {s["id"]: s for s in read(folder / "grader_pairs_SECRET.jsonl")}
        assert len(folded) == len(labels)
        items = runpairs.labelled_items(read(folder / "grader_pairs.jsonl"), list(secret.values()),
                                        list(labels.values()), folder.name, 1,
                                        str(folder / "grader_pairs_labels.jsonl"))
        assert [(i.item, i.passed, i.split) for i in items] == [
            (g.item, g.passed, g.split) for g in folded]
