#!/usr/bin/env python
"""How many of each model doctor's SP credits hold up when read (issue 41).

Table 2 counts the grader's credits; a folded run batch (``data/embedded/sp_run_batches/
<run>``) holds a blind reader's verdict on every credit of that run's model doctors and on
near misses. This joins them, per doctor and category: credits, credits read, credits the
reader found earned (``real``), and uncredited items the reader found earned (``missed``),
then the share of the case's checklist the reader found earned, averaged over cases as
Eq. 6 averages the grader's (``read %``; an item nobody read counts as not earned, as the
corrected table counts an uncovered non-credit). The Rogan–Gladen correction applies one
error rate to every doctor; where the doctors' false credits differ (a doctor whose
garbled questions share a topic with many items), this count is the one to read.

It reads the committed records and batch only (no model, a second):

    python scripts/sp_read_credits.py [--batch run-72d0bfb] [--root .]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORDS = "reports/06_simulation/records"
SHORT = {"symptoms": "Sym.", "tests": "Test", "diseases": "Dis."}


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def read_counts(grades: list[dict], secret: list[dict], labels: list[dict]) -> list[dict]:
    """One row per model doctor × category. ``grades``: stage 06's grade records (one per
    doctor × case × item, ``passed``); ``secret`` and ``labels``: a run batch's pairs
    (doctor, case, category, item, credited) and the reader's verdicts (id, gold)."""
    gold = {lab["id"]: bool(lab["gold"]) for lab in labels}
    read = defaultdict(list)        # (doctor, case, category, item) -> verdicts
    for s in secret:
        read[(s["doctor"], s["case"], s["category"], s["item"])].append(gold[s["id"]])
    doctors = sorted({s["doctor"] for s in secret})
    rows = []
    for doctor in doctors:
        mine = [g for g in grades if g["doctor"] == doctor]
        for category in SHORT:
            items = [g for g in mine if g["category"] == category]
            c = defaultdict(int)
            per_case = defaultdict(lambda: [0, 0])
            for g in items:
                verdicts = read.get((doctor, g["case"], category, g["item"]), [])
                earned = any(verdicts)
                per_case[g["case"]][0] += earned
                per_case[g["case"]][1] += 1
                if g["passed"]:
                    c["credits"] += 1
                    c["read"] += bool(verdicts)
                    c["real"] += earned
                elif earned:
                    c["missed"] += 1
            shares = [e / m for e, m in per_case.values() if m]
            rows.append({"doctor": doctor, "metric": SHORT[category], "items": len(items),
                         "credits": c["credits"], "read": c["read"], "real": c["real"],
                         "missed": c["missed"],
                         "read_%": round(100 * sum(shares) / len(shares), 1) if shares else None})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", default="run-72d0bfb")
    ap.add_argument("--root", type=Path, default=ROOT)
    args = ap.parse_args(argv)
    folder = args.root / "data/embedded/sp_run_batches" / args.batch
    grades = _jsonl(args.root / RECORDS / "grades.jsonl")
    rows = read_counts(grades, _jsonl(folder / "grader_pairs_SECRET.jsonl"),
                       _jsonl(folder / "grader_pairs_labels.jsonl"))
    cols = ["doctor", "metric", "items", "credits", "read", "real", "missed", "read_%"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join("" if r[k] is None else str(r[k]) for k in cols) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
