#!/usr/bin/env python
"""Draw real doctor turns of the training dialogues for REM labelling (issue 40).

The REM's constructed rows come from written constructions; the independent test showed
that a scorer fitted on them alone transfers to real turns only in part. This draw gives
the REM real turns of the *training* side to learn from and to choose on, labelled per
rule by the rubric like the independent test:

- every generated doctor turn of stage 01's trajectories (the candidate next turn and the
  doctor turns of its future rounds): what stage 04's REM scores;
- ``--human`` doctor turns of the training-split dialogues (seeded).

Each item gets a part, ``train`` or ``dev``, by dialogue (``--dev-share`` of the
dialogues, seeded), so a dialogue's turns are never on both sides. No evaluation-split
dialogue is drawn. Stage 01's trajectories are not in git (a DVC output), so the committed
file holds every item's text and ``--check`` verifies the human turns against
``data/embedded/dialogues.jsonl`` and the generated ones against stage 01's committed
candidate records (their dialogue and split turn).

    python scripts/rem_real_items.py --run RUN --out data/embedded/rem/real_turns.jsonl
    python scripts/rem_real_items.py --blind OUT.jsonl      # history and turn only
    python scripts/rem_real_items.py --check
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "data/embedded/rem/real_turns.jsonl"
SEED = 41
HUMAN = 120
DEV_SHARE = 0.3


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def parts(dialogues: list[str], share: float, seed: int = SEED) -> dict[str, str]:
    ids = sorted(dialogues)
    random.Random(seed).shuffle(ids)
    n_dev = round(len(ids) * share)
    return {d: ("dev" if i < n_dev else "train") for i, d in enumerate(ids)}


def draw(run: Path, n_human: int = HUMAN, share: float = DEV_SHARE) -> list[dict]:
    rng = random.Random(SEED)
    dial = {d["id"]: d for d in _jsonl(ROOT / "data/embedded/dialogues.jsonl")}
    split = yaml.safe_load((ROOT / "data/embedded/dialogue_split.yaml").read_text())
    train = set(split["train"])
    records = {(r["item"], r["source"]): r
               for r in _jsonl(run / "reports/01_sampling/records/candidates.jsonl")}
    items = []
    for item in _jsonl(run / "data/01_sampling/unlabeled.jsonl"):
        for cand in item["candidates"]:
            if cand["source"] != "generated":
                continue
            rec = records[(item["id"], "generated")]
            if rec["dialogue_id"] not in train:
                raise SystemExit(f"stage 01 item {item['id']}: dialogue {rec['dialogue_id']} "
                                 "is not a training dialogue")
            turns = [*item["history"], {"role": "doctor", "text": cand["response"]},
                     *cand["future"]]
            for i, t in enumerate(turns):
                if i >= len(item["history"]) and t["role"] == "doctor" and t["text"].strip():
                    items.append(({"kind": "generated", "item": item["id"],
                                   "dialogue": rec["dialogue_id"],
                                   "split_turn": rec["split_turn"], "key": rec["key"],
                                   "turn_index": i}, turns[:i], t["text"]))
    human = [(d, i) for d in sorted(train) for i, t in enumerate(dial[d]["turns"])
             if t["role"] == "doctor" and i > 0]
    for d, i in rng.sample(human, n_human):
        items.append(({"kind": "human_train", "dialogue": d, "turn_index": i},
                      dial[d]["turns"][:i], dial[d]["turns"][i]["text"]))
    rng.shuffle(items)
    part = parts(sorted(train), share)
    return [{"id": f"rt-{n:04d}", "part": part[src["dialogue"]], "history": hist,
             "turn": turn, "source": src}
            for n, (src, hist, turn) in enumerate(items, start=1)]


def check() -> int:
    dial = {d["id"]: d for d in _jsonl(ROOT / "data/embedded/dialogues.jsonl")}
    split = yaml.safe_load((ROOT / "data/embedded/dialogue_split.yaml").read_text())
    records = {r["key"]: r for r in
               _jsonl(ROOT / "reports/01_sampling/records/candidates.jsonl")}
    part = parts(sorted(split["train"]), DEV_SHARE)
    wrong = []
    for n, r in enumerate(_jsonl(COMMITTED), start=1):
        src = r["source"]
        if src["dialogue"] not in split["train"]:
            wrong.append(f"line {n} ({r['id']}): dialogue {src['dialogue']} is not training")
        if r["part"] != part[src["dialogue"]]:
            wrong.append(f"line {n} ({r['id']}): part {r['part']} (the seeded parts say "
                         f"{part[src['dialogue']]})")
        if src["kind"] == "human_train":
            turns = dial[src["dialogue"]]["turns"]
            if (r["turn"] != turns[src["turn_index"]]["text"]
                    or r["history"] != turns[:src["turn_index"]]):
                wrong.append(f"line {n} ({r['id']}): not the dialogue's turn")
        elif records.get(src["key"], {}).get("dialogue_id") != src["dialogue"]:
            wrong.append(f"line {n} ({r['id']}): no stage-01 candidate record {src['key']} "
                         f"of {src['dialogue']} (a later stage-01 run: draw again)")
    for w in wrong:
        print(f"{COMMITTED}: {w}", file=sys.stderr)
    return 1 if wrong else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, help="a checkout where stage 01 ran (its data/)")
    ap.add_argument("--out", type=Path, help="write the drawn items (no labels) here")
    ap.add_argument("--blind", type=Path, help="the labellers' view of the committed items")
    ap.add_argument("--check", action="store_true", help="verify the committed items")
    args = ap.parse_args(argv)
    if args.run:
        items = draw(args.run)
        out = args.out or COMMITTED
        out.write_text("".join(json.dumps(it, ensure_ascii=False) + "\n" for it in items),
                       encoding="utf-8")
        kinds = {k: sum(it["source"]["kind"] == k for it in items)
                 for k in ("generated", "human_train")}
        print(f"{len(items)} items {kinds}; parts "
              f"{ {p: sum(it['part'] == p for it in items) for p in ('train', 'dev')} } → {out}")
    if args.blind:
        args.blind.write_text("".join(json.dumps({k: r[k] for k in ("id", "history", "turn")},
                                                 ensure_ascii=False) + "\n"
                                      for r in _jsonl(COMMITTED)), encoding="utf-8")
    if args.check:
        return check()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
