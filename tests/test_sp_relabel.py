"""A second blind labelling of a run's credits (data/embedded/sp_relabel): its agreement
figures, within itself and with the folded batch that holds the same pairs."""

from __future__ import annotations

import json

import pytest
from sklearn.metrics import cohen_kappa_score

from medpref import REPO_ROOT

FOLDER = REPO_ROOT / "data" / "embedded" / "sp_relabel" / "run-0fd74f0"
BATCH = REPO_ROOT / "data" / "embedded" / "sp_run_batches" / "run-72d0bfb"


def read(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


@pytest.fixture(scope="module")
def labelled():
    key = read(FOLDER / "key.jsonl")
    first, twice = {}, []
    for n in (1, 2, 3):
        part = {r["id"] for r in read(FOLDER / f"part_{n}.jsonl")}
        labels = read(FOLDER / f"labels_{n}.jsonl")
        assert {r["id"] for r in labels} == part          # every pair shown was labelled
        for r in labels:
            if r["id"] in first:
                twice.append((first[r["id"]], r["gold"]))
            else:
                first[r["id"]] = r["gold"]
    assert set(first) == {k["id"] for k in key}
    return key, first, twice


def test_the_draw_holds_every_credit_and_five_near_misses_each(labelled):
    key, _, _ = labelled
    credited = sum(k["verdict"] for k in key)
    assert credited == 68 and len(key) - credited == 5 * credited
    assert {k["split"] for k in key} == {"dev", "test"}


def test_the_pairs_labelled_twice_agree(labelled):
    _, _, twice = labelled
    a, b = zip(*twice)
    assert len(twice) == 72 and sum(x == y for x, y in twice) == 71
    assert round(cohen_kappa_score(a, b), 2) == 0.93


def test_the_two_labellings_of_the_same_pairs_agree(labelled):
    key, first, _ = labelled
    blind = {r["id"]: r for r in read(BATCH / "grader_pairs.jsonl")}
    earlier = {(blind[r["id"]]["case"], blind[r["id"]]["item"], blind[r["id"]]["sentence"]):
               r["gold"] for r in read(BATCH / "grader_pairs_labels.jsonl")}
    both = [(earlier[(k["case"], k["item"], k["sentence"])], first[k["id"]]) for k in key
            if (k["case"], k["item"], k["sentence"]) in earlier]
    a, b = zip(*both)
    assert len(both) == 335 and sum(x == y for x, y in both) == 326
    assert round(cohen_kappa_score(a, b), 2) == 0.86
