#!/usr/bin/env python
"""Draw the SP turns of the trained policies for the REM's training and development rows
(data/embedded/rem/sp_turns.jsonl, issue 40).

The cross-encoder tried in ``scripts/rem_cross_encoder.py`` stops answering rule A's 1 (a
question that passes over what the patient just said) on the turns a model wrote after one
epoch: the labelled training turns hold few of them. This draw adds turns of the same kind
from the SP consultations that stage 06 committed (``RECORDS_REV``, the policies of the
run of ``72d0bfb``, which the cold run of ``552368d`` reproduced): every doctor turn of the
six model policies in the cases *outside* ``rem.turns.sp_test_cases``, whose text no
labelled-turn file or independent draw holds, one per distinct text, seeded and shuffled.
Each row's ``part`` is set by case, as stage 03 sets the independent draws' SP turns:
``rem.turns.sp_dev_cases`` → ``dev``, the other non-test cases → ``train``; the test cases'
turns are never drawn, so the independent test stays untouched.

The labellers see only the history and the turn (``--blind``), score every rule by
``configs/rules/plpf_flowchart.yaml`` and never see a scorer's output; ``--merge`` writes
their labels (``l1`` on every row, ``l2`` where a second labeller scored the row) into the
committed file, which is not in ``rem.turns.files`` until a stage-03 run adopts it.

    python scripts/rem_sp_turns.py --check                 # the committed rows are the draw
    python scripts/rem_sp_turns.py --blind OUT.jsonl       # the labellers' view
    python scripts/rem_sp_turns.py --merge l1=A.jsonl l1=B.jsonl l2=C.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
#: the commit whose stage-06 consultations the turns are drawn from (the records last
#: written there; ``git log -- reports/06_simulation/records/consultations.jsonl``)
RECORDS_REV = "f4fcdd2"
RECORDS = "reports/06_simulation/records/consultations.jsonl"
COMMITTED = ROOT / "data/embedded/rem/sp_turns.jsonl"
#: every file whose turn texts are already labelled (left out of the draw)
LABELLED = ("data/embedded/rem/train_turns.jsonl", "data/embedded/rem/real_turns.jsonl",
            "data/embedded/rem/independent.jsonl")
POLICIES = ("base", "sft", "gpt4_rank", "cai_avg", "cai_dep", "agent")
RULES = ("A", "B", "C", "D", "E", "F")
SEED = 44
PREFIX = "st"


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _consultations(rev: str = RECORDS_REV) -> list[dict]:
    shown = subprocess.run(["git", "show", f"{rev}:{RECORDS}"], cwd=ROOT,
                           capture_output=True, text=True)
    if shown.returncode:
        raise SystemExit(f"{RECORDS} at {rev}: {shown.stderr.strip()} (the draw needs the "
                         "repository's history; a shallow clone lacks it)")
    return [json.loads(line) for line in shown.stdout.splitlines() if line]


def draw() -> list[dict]:
    """The rows (without labels) in the labelled order."""
    turns = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))["rem"]["turns"]
    test, dev = set(turns["sp_test_cases"]), set(turns["sp_dev_cases"])
    seen = {row["turn"] for f in LABELLED for row in _jsonl(ROOT / f)}
    pool = [(c, i) for c in _consultations() if c["kind"] == "model"
            and c["doctor"] in POLICIES and c["case"] not in test
            for i, t in enumerate(c["turns"]) if t["role"] == "doctor" and t["text"].strip()]
    rng = random.Random(SEED)
    picked = []
    for c, i in rng.sample(pool, len(pool)):
        text = c["turns"][i]["text"]
        if text not in seen:
            seen.add(text)
            picked.append((c, i))
    return [{"id": f"{PREFIX}-{n:04d}", "part": "dev" if c["case"] in dev else "train",
             "history": c["turns"][:i], "turn": c["turns"][i]["text"],
             "source": {"kind": "model_sp", "policy": c["doctor"], "case": c["case"],
                        "turn_index": i, "key": c["key"], "run": "72d0bfb"}}
            for n, (c, i) in enumerate(picked, start=1)]


def merge(items: list[dict], sheets: list[tuple[str, Path]]) -> list[dict]:
    """The rows with the labellers' scores: each sheet holds ``{"id", "labels": {rule:
    score}, "note"}`` lines for one labeller name (``l1`` must cover every row)."""
    by_id = {it["id"]: {**it, "labels": {}, "notes": {}} for it in items}
    for who, path in sheets:
        for line, row in enumerate(_jsonl(path), start=1):
            if row["id"] not in by_id:
                raise SystemExit(f"{path}:{line}: id: unknown row '{row['id']}'")
            labels = row["labels"]
            bad = [r for r in RULES if labels.get(r) not in (0, 1, 2)]
            if bad:
                raise SystemExit(f"{path}:{line}: labels: no 0/1/2 score for {bad}")
            target = by_id[row["id"]]
            if who in target["labels"]:
                raise SystemExit(f"{path}:{line}: id: '{row['id']}' labelled twice by {who}")
            target["labels"][who] = {r: labels[r] for r in RULES}
            if row.get("note"):
                target["notes"][who] = row["note"]
    missing = [i for i, row in by_id.items() if "l1" not in row["labels"]]
    if missing:
        raise SystemExit(f"no l1 label for {len(missing)} rows, e.g. {missing[:3]}")
    return list(by_id.values())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed rows")
    ap.add_argument("--blind", type=Path, help="write the labellers' view (id, history, turn)")
    ap.add_argument("--merge", nargs="+", metavar="WHO=SHEET",
                    help="write the committed file from the labellers' sheets")
    args = ap.parse_args(argv)
    items = draw()
    if args.blind:
        args.blind.write_text("".join(json.dumps({k: it[k] for k in ("id", "history", "turn")},
                                                 ensure_ascii=False) + "\n" for it in items),
                              encoding="utf-8")
        print(f"{args.blind}: {len(items)} rows")
    if args.merge:
        sheets = [(w, Path(p)) for w, _, p in (m.partition("=") for m in args.merge)]
        rows = merge(items, sheets)
        COMMITTED.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                             encoding="utf-8")
        print(f"{COMMITTED}: {len(rows)} rows")
    if args.check:
        keys = ("id", "part", "history", "turn", "source")
        committed = [{k: r[k] for k in keys} for r in _jsonl(COMMITTED)]
        if committed != items:
            print(f"{COMMITTED}: differs from the seeded draw", file=sys.stderr)
            return 1
        print(f"{COMMITTED}: {len(items)} rows, the seeded draw")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
