#!/usr/bin/env python
"""The SP grader item by item on CSPT's clinician scripts (issue 41), against hand labels.

``data/embedded/sp_script_items_cspt.jsonl`` holds, for the symptom items of the 25 CSPT
cases whose scripts were read (``sp_script_coverage.jsonl``), whether a doctor question of
the case's reference script asks the item (``covered``), by which script lines (``by``)
and how (``kind``: ``words`` shares the item's words, ``topic`` asks its area without the
answer the item carries). Items are named by ``item_sha`` (12 hex digits of SHA-256 of the
item text) and ``item_index`` only: CSPT has no open licence, so no text is stored. The
cases were split seeded (``split``: 13 ``dev`` cases, on which grader rules may be
changed; 12 ``test`` cases, scored only after a change is fixed).

This script plays stage 06's controls on those cases with the configured grader (no model
is called) and prints, per split, the script control's recall and precision against the
labels and the negative controls' credits; ``--without-headings`` sets
``simulation.grader.zh_headings`` to null (the grader before change zh-history-headings).

    python scripts/cspt_item_check.py --cspt PATH [--split dev|test|all] [--without-headings]

PATH is the folder of CSPT's two archives (SpTesting's ``check_list.zip`` and
``script.zip``); ``MEDPREF_CSPT`` is read when ``--cspt`` is not given.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from medpref.simulation.controls import items_fingerprint  # noqa: E402

LABELS = ROOT / "data/embedded/sp_script_items_cspt.jsonl"
CONTROLS = ("control_script", "control_reciter", "control_testlist", "control_echo",
            "control_lecture")


def load_labels(path: Path = LABELS) -> list[dict]:
    rows = []
    for line, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if raw.strip():
            row = json.loads(raw)
            for key in ("case", "category", "item_index", "item_sha", "items_sha", "covered",
                        "by", "kind", "split"):
                if key not in row:
                    raise SystemExit(f"{path}:{line}: field '{key}' missing")
            rows.append(row)
    return rows


def check_against_cases(labels: list[dict], cases: dict) -> None:
    """Each label names its case's item by index and hash (a changed case stops here)."""
    for n, row in enumerate(labels, start=1):
        items = list(getattr(cases[row["case"]].checklist, row["category"]))
        if items_fingerprint(items) != row["items_sha"]:
            raise SystemExit(f"{LABELS}:{n}: items_sha: {row['case']}'s {row['category']} "
                             "are not the items that were labelled")
        if items_fingerprint([items[row["item_index"]]]) != row["item_sha"]:
            raise SystemExit(f"{LABELS}:{n}: item_sha: item {row['item_index']} differs")


def score(labels: list[dict], grades, doctor: str) -> dict:
    got = {(g.case, items_fingerprint([g.item])): bool(g.passed) for g in grades
           if g.doctor == doctor}
    pairs = [(r["covered"], got[(r["case"], r["item_sha"])]) for r in labels]
    tp = sum(1 for gold, pred in pairs if gold and pred)
    fp = sum(1 for gold, pred in pairs if pred and not gold)
    fn = sum(1 for gold, pred in pairs if gold and not pred)
    return dict(doctor=doctor, items=len(pairs), covered=tp + fn, credited=tp + fp, tp=tp,
                fp=fp, fn=fn, recall=round(tp / max(1, tp + fn), 3),
                precision=round(tp / max(1, tp + fp), 3))


def run(cspt: str, split: str = "all", without_headings: bool = False):
    """Each control's score against the labels of ``split`` (one dict per control) and the
    controls' table of those cases."""
    from medpref.params import load_params, parse_params
    from medpref.simulation.casesets import load_case_set, run_case_set

    params = load_params()
    if without_headings:
        params.raw["simulation"]["grader"]["zh_headings"] = None
        params = parse_params(params.raw, params.path)
    labels = [r for r in load_labels() if split in ("all", r["split"])]
    ids = sorted({r["case"] for r in labels})
    check_against_cases(labels, {c.id: c for c in load_case_set("cspt", cspt, ids=ids)})
    table, _, grades = run_case_set("cspt", cspt, names=list(CONTROLS), ids=ids,
                                    params=params)
    grades = [g for g in grades if g.category == "symptoms"]
    return [score(labels, grades, doctor) for doctor in CONTROLS], table


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cspt", default=os.environ.get("MEDPREF_CSPT"),
                    help="the folder of CSPT's two archives (default: $MEDPREF_CSPT)")
    ap.add_argument("--split", choices=("dev", "test", "all"), default="all")
    ap.add_argument("--without-headings", action="store_true",
                    help="simulation.grader.zh_headings: null (before zh-history-headings)")
    args = ap.parse_args(argv)
    if not args.cspt:
        ap.error("--cspt PATH (or MEDPREF_CSPT) is needed: CSPT is not shipped")
    scores, table = run(args.cspt, args.split, args.without_headings)
    print(f"CSPT symptom items ({args.split}), zh_headings "
          f"{'off' if args.without_headings else 'on'}:")
    for row in scores:
        print(json.dumps(row))
    print(table.round(1).to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
