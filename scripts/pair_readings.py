"""Stage 04's pair decisions read by hand against the rubric, blind to what any strategy chose.

``draw`` writes one reading item per stage-04 item of a run: the consultation so far and its
two candidate next doctor turns, labelled ``X`` and ``Y`` in a seeded order (which one the
dialogue's doctor wrote is not shown, nor any strategy's choice). A reader answers, by the
flowchart rubric (``configs/rules/plpf_flowchart.yaml``), which of the two is the better next
doctor turn (``X``, ``Y`` or ``equal``) and whether each is usable at all as a doctor's turn.

``score`` joins the readings with the run's decisions (``reports/04_annotation/records/
decisions.jsonl``): per strategy, on its decisive items, how often it chose what the reader
chose, with a Wilson interval; and how many of its pairs prefer a turn the reader found
unusable over a usable one. A reading may carry a second, independent reader's answers
(``second``: better, X_usable, Y_usable); their agreement is counted beside.

The committed readings (``data/embedded/rem/pair_readings.jsonl``) are of the items of the
run whose commit each row names (``run``). They judge the two candidates, not a strategy's
choice, so a later stage-04 run on the same stage-01 items (a retrained REM, other weights)
is scored against them as they are; new items need a new draw and reading.

  python scripts/pair_readings.py draw --root RUN --out items.jsonl
  python scripts/pair_readings.py score --root RUN --readings data/embedded/rem/pair_readings.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from pathlib import Path

from medpref.metrics.intervals import proportion_ci

SEED = 2026
HISTORY_TURNS = 14


def load_items(root: Path) -> list[dict]:
    path = root / "data/01_sampling/unlabeled.jsonl"
    if not path.exists():
        raise SystemExit(f"{path}: not found (run stage 01 there first)")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def draw(root: Path, out: Path) -> None:
    rng = random.Random(SEED)
    rows = []
    for item in load_items(root):
        cands = item["candidates"]
        if len(cands) != 2:
            raise SystemExit(f"item {item['id']}: {len(cands)} candidates (two expected)")
        order = [0, 1]
        rng.shuffle(order)
        rows.append({"item_id": item["id"],
                     "history": item["history"][-HISTORY_TURNS:],
                     "X": cands[order[0]]["response"], "Y": cands[order[1]]["response"],
                     "key": {"X": cands[order[0]]["source"], "Y": cands[order[1]]["source"]}})
    out.parent.mkdir(parents=True, exist_ok=True)
    blind = out.with_name(out.stem + ".blind.jsonl")
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                   encoding="utf-8")
    blind.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "key"},
                                        ensure_ascii=False) + "\n" for r in rows),
                     encoding="utf-8")
    print(f"{len(rows)} items: {out} (with the key), {blind} (for the reader)")


def score(root: Path, readings: Path) -> dict:
    reads = {}
    for n, line in enumerate(readings.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        r = json.loads(line)
        for field in ("item_id", "better", "X_usable", "Y_usable", "key"):
            if field not in r:
                raise SystemExit(f"{readings}:{n}: field '{field}' missing")
        if r["better"] not in ("X", "Y", "equal"):
            raise SystemExit(f"{readings}:{n}: field 'better' is {r['better']!r} "
                             "(X, Y or equal)")
        reads[r["item_id"]] = r
    decisions = [json.loads(line) for line in
                 (root / "reports/04_annotation/records/decisions.jsonl")
                 .read_text(encoding="utf-8").splitlines() if line]
    out: dict[str, dict] = {}
    for strategy in sorted({d["strategy"] for d in decisions}):
        c = Counter()
        for d in decisions:
            r = reads.get(d["item_id"])
            if d["strategy"] != strategy or r is None:
                continue
            c["items"] += 1
            if d["winner_source"] not in ("sampled", "generated"):
                c["no_decision"] += 1
                continue
            c["decisive"] += 1
            usable = {r["key"][s]: r[f"{s}_usable"] for s in ("X", "Y")}
            loser = "generated" if d["winner_source"] == "sampled" else "sampled"
            if usable[loser] and not usable[d["winner_source"]]:
                c["unusable_over_usable"] += 1
            if usable[d["winner_source"]] and not usable[loser]:
                c["usable_over_unusable"] += 1
            if r["better"] == "equal":
                c["reader_equal"] += 1
                continue
            c["reader_decided"] += 1
            c["agree"] += r["key"][r["better"]] == d["winner_source"]
        iv = proportion_ci(c["agree"], c["reader_decided"]) if c["reader_decided"] else None
        out[strategy] = {**{k: c[k] for k in ("items", "decisive", "no_decision",
                                               "reader_decided", "reader_equal", "agree",
                                               "usable_over_unusable",
                                               "unusable_over_usable")},
                         "agree_share": (round(c["agree"] / c["reader_decided"], 3)
                                         if c["reader_decided"] else None),
                         "agree_ci95": ([round(iv.lo, 3), round(iv.hi, 3)] if iv else None)}
    better = Counter(r["key"].get(r["better"], "equal") for r in reads.values())
    second = [r for r in reads.values() if "second" in r]
    agreement = ({"items": len(second),
                  "better_same": sum(r["second"]["better"] == r["better"] for r in second),
                  "usable_same": sum(r["second"][f"{s}_usable"] == r[f"{s}_usable"]
                                     for r in second for s in "XY")} if second else None)
    usable = Counter((r["key"][s], r[f"{s}_usable"]) for r in reads.values() for s in "XY")
    return {"readings": len(reads), "second_reader": agreement, "reader_prefers": dict(better),
            "usable_by_source": {f"{src} usable={u}": n for (src, u), n in sorted(usable.items())},
            "strategies": out}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("draw")
    d.add_argument("--root", type=Path, default=Path("."))
    d.add_argument("--out", type=Path, required=True)
    s = sub.add_parser("score")
    s.add_argument("--root", type=Path, default=Path("."))
    s.add_argument("--readings", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.cmd == "draw":
        draw(args.root, args.out)
    else:
        print(json.dumps(score(args.root, args.readings), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
