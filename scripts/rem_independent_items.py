#!/usr/bin/env python
"""Draw the REM's independent test items (data/embedded/rem/independent.jsonl, issue 40).

300 doctor turns that no construction made: 120 held-out next turns of the six model
policies (20 each, reports/06_simulation/records/heldout_turns.jsonl), 80 turns of the
model doctors in the SP consultations (records/consultations.jsonl) and 100 human doctor
turns of the split's eval dialogues, seeded and shuffled. The labellers saw only the
history and the turn (``--blind`` writes that view); the source of each item and the
labels (``l1`` on all, ``l2`` on every fifth) are kept beside it in the committed file.
The model turns were drawn from stage 06's records as commit ``a6d9a8b`` committed them
(``RECORDS_REV``; later runs replace those records), read with ``git show``.

    python scripts/rem_independent_items.py --check   # the committed items are this draw
    python scripts/rem_independent_items.py --blind OUT.jsonl
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
RECORDS = "reports/06_simulation/records"
#: the commit whose stage-06 records the model turns were drawn from
RECORDS_REV = "a6d9a8b"
COMMITTED = ROOT / "data/embedded/rem/independent.jsonl"
POLICIES = ("base", "sft", "gpt4_rank", "cai_avg", "cai_dep", "agent")
SEED = 40


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _records(name: str) -> list[dict]:
    """A stage-06 record file as ``RECORDS_REV`` committed it."""
    shown = subprocess.run(["git", "show", f"{RECORDS_REV}:{RECORDS}/{name}"], cwd=ROOT,
                           capture_output=True, text=True)
    if shown.returncode:
        raise SystemExit(f"{RECORDS}/{name} at {RECORDS_REV}: {shown.stderr.strip()} (the "
                         "draw needs the repository's history; a shallow clone lacks it)")
    return [json.loads(line) for line in shown.stdout.splitlines() if line]


def draw() -> list[dict]:
    """The 300 items with their sources, in the labelled order (ids ri-0001 …)."""
    rng = random.Random(SEED)
    dial = {d["id"]: d for d in _jsonl(ROOT / "data/embedded/dialogues.jsonl")}
    split = yaml.safe_load((ROOT / "data/embedded/dialogue_split.yaml").read_text())
    heldout = _records("heldout_turns.jsonl")
    items = []
    for pol in POLICIES:
        rows = [r for r in heldout if r["policy"] == pol and r["turn"] and not r.get("error")]
        for r in rng.sample(rows, 20):
            items.append((dict(kind="model_heldout", policy=pol, dialogue=r["dialogue"],
                               cut=r["cut"], key=r["key"]),
                          dial[r["dialogue"]]["turns"][:r["cut"]], r["turn"]))
    sp = [(c, i) for c in _records("consultations.jsonl") if c["kind"] == "model"
          for i, t in enumerate(c["turns"]) if t["role"] == "doctor" and t["text"].strip()]
    for c, i in rng.sample(sp, 80):
        items.append((dict(kind="model_sp", policy=c["doctor"], case=c["case"], turn_index=i,
                           key=c["key"]), c["turns"][:i], c["turns"][i]["text"]))
    human = [(d, i) for d in split["eval"] for i, t in enumerate(dial[d]["turns"])
             if t["role"] == "doctor"]
    for d, i in rng.sample(human, 100):
        items.append((dict(kind="human_eval", dialogue=d, turn_index=i),
                      dial[d]["turns"][:i], dial[d]["turns"][i]["text"]))
    rng.shuffle(items)
    return [{"id": f"ri-{n:04d}", "history": hist, "turn": turn, "source": source}
            for n, (source, hist, turn) in enumerate(items, start=1)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed items")
    ap.add_argument("--blind", type=Path, help="write the labellers' view (history, turn)")
    args = ap.parse_args(argv)
    items = draw()
    if args.blind:
        args.blind.write_text("".join(json.dumps({k: it[k] for k in ("id", "history", "turn")},
                                                 ensure_ascii=False) + "\n" for it in items))
    if args.check:
        committed = [{k: r[k] for k in ("id", "history", "turn", "source")}
                     for r in _jsonl(COMMITTED)]
        if committed != items:
            print(f"{COMMITTED}: differs from the seeded draw", file=sys.stderr)
            return 1
        print(f"{COMMITTED}: {len(items)} items, the seeded draw")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
