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

A second draw (``--draw 2``, ids ri-0301 …) was made after the first draw's rule-A interval
against rule-blind missed 0 (issue 40), to confirm on turns nobody had scored: the same recipe
on the retrained policies' records of the cold run of ``c4d3594`` (committed in ``a6483c4``),
seed 41, leaving out every turn text of draw 1; the human part is the 36 eval-split doctor
turns draw 1 did not take. The REM was not changed between the draws. Both draws live in the
committed file; ``source.draw`` tells them apart (absent = 1).

A third draw (``--draw 3``, ids ri-0537 …) is the test of the REM that trains on labelled
model turns (issue 40: the plan fixed before it was drawn): the same records as draw 2, seed
42, 20 held-out turns per policy and 120 SP turns of the test cases (``TEST_CASES``) only,
leaving out every turn text of draws 1 and 2; no human part (the eval split has none left).

A fourth draw (``--draw 4``, ids ri-0777 …) tests the REM that also learns from the SP turns
of the trained policies (``sp_turns.jsonl``) and embeds with the multilingual encoder, both
chosen on ``turns_dev`` without reading any draw: the same recipe as draw 3 on the records
of ``f4fcdd2`` (the policies whose non-test SP turns ``sp_turns.jsonl`` holds), seed 44,
leaving out every turn text of draws 1–3: up to 20 held-out turns per policy (the policies
not retrained since draw 3 have fewer than 20 new ones) and up to 140 distinct SP turns of
the test cases (fewer are left).
A drawn turn whose text ``sp_turns.jsonl`` holds (the same words in another case's history,
which the REM trains on) is left out after the ids are given, so the ids keep a gap. It was
labelled while a stage-03 run was under way and kept in its own file until the next cold run;
its rows now follow draw 3's in the committed file, and stage 03 scores it as set
``independent_4``.

A fifth draw (``--draw 5``, ids ri-0963 …) tests the REM that also trains on the
``foreign_question`` construction (a real question of another dialogue, chosen on
``turns_dev``; the idea came from reading draw 4's rule-A errors, so draw 4 is no longer a
test nobody read): the same recipe as draw 4 on the records of ``91cd359`` (the policies of
the cold run of ``d8a243f``), seed 45, leaving out every turn text of draws 1–4 and of
``sp_turns.jsonl``. It was labelled while a stage-03 run was under way and kept in its own
file until the next stage-03 run; its rows now follow draw 4's in the committed file, and
stage 03 scores it as set ``independent_5``.

    python scripts/rem_independent_items.py --check   # the committed items are these draws
    python scripts/rem_independent_items.py --blind OUT.jsonl [--draw 2]
    python scripts/rem_independent_items.py --merge l1=A.jsonl l1=B.jsonl l2=C.jsonl --draw N
                                           # a new draw's labels, written to the draw's own
                                           # file (its ``file`` in DRAWS) until a stage-03
                                           # run reads it with the others
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
#: the SP cases whose model turns stay test items (``rem.turns.sp_test_cases`` in
#: params.yaml, read there by stage 03): 8 of the 17 embedded cases, seeded
#: (``sorted(random.Random(42).sample(cases, 8))``); the other cases' SP turns of draws 1
#: and 2 are the REM's training and development rows
TEST_CASES = ("sp-0001", "sp-0002", "sp-0003", "sp-0004", "sp-0005", "sp-0012", "sp-0013",
              "sp-0017")
#: the draws: records commit, seed, model turns per policy (held out), SP turns, first id
DRAWS = {1: dict(rev=RECORDS_REV, seed=40, heldout=20, sp=80, start=1),
         2: dict(rev="a6483c4", seed=41, heldout=20, sp=80, start=301),
         3: dict(rev="a6483c4", seed=42, heldout=20, sp=120, start=537, human=0,
                 sp_cases=TEST_CASES),
         4: dict(rev="f4fcdd2", seed=44, heldout=20, sp=140, start=777, human=0,
                 sp_cases=TEST_CASES, not_in=("data/embedded/rem/sp_turns.jsonl",)),
         5: dict(rev="91cd359", seed=45, heldout=20, sp=140, start=963, human=0,
                 sp_cases=TEST_CASES, not_in=("data/embedded/rem/sp_turns.jsonl",))}
COMMITTED = ROOT / "data/embedded/rem/independent.jsonl"
POLICIES = ("base", "sft", "gpt4_rank", "cai_avg", "cai_dep", "agent")
SEED = 40


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _records(name: str, rev: str = RECORDS_REV) -> list[dict]:
    """A stage-06 record file as commit ``rev`` committed it."""
    shown = subprocess.run(["git", "show", f"{rev}:{RECORDS}/{name}"], cwd=ROOT,
                           capture_output=True, text=True)
    if shown.returncode:
        raise SystemExit(f"{RECORDS}/{name} at {rev}: {shown.stderr.strip()} (the "
                         "draw needs the repository's history; a shallow clone lacks it)")
    return [json.loads(line) for line in shown.stdout.splitlines() if line]


def draw(number: int = 1, taken: list[dict] = ()) -> list[dict]:
    """The items of one draw with their sources, in the labelled order (ids from the
    draw's start); ``taken`` (the earlier draws' items) are left out by turn text and by
    human turn."""
    spec = DRAWS[number]
    rng = random.Random(spec["seed"])
    dial = {d["id"]: d for d in _jsonl(ROOT / "data/embedded/dialogues.jsonl")}
    split = yaml.safe_load((ROOT / "data/embedded/dialogue_split.yaml").read_text())
    seen = {it["turn"] for it in taken}
    human_taken = {(it["source"].get("dialogue"), it["source"].get("turn_index"))
                   for it in taken if it["source"]["kind"] == "human_eval"}
    heldout = _records("heldout_turns.jsonl", spec["rev"])
    items = []
    for pol in POLICIES:
        rows = [r for r in heldout if r["policy"] == pol and r["turn"] and not r.get("error")
                and (number == 1 or r["turn"] not in seen)]
        for r in rng.sample(rows, min(spec["heldout"], len(rows))):
            seen.add(r["turn"])
            items.append((dict(kind="model_heldout", policy=pol, dialogue=r["dialogue"],
                               cut=r["cut"], key=r["key"]),
                          dial[r["dialogue"]]["turns"][:r["cut"]], r["turn"]))
    sp = [(c, i) for c in _records("consultations.jsonl", spec["rev"]) if c["kind"] == "model"
          for i, t in enumerate(c["turns"]) if t["role"] == "doctor" and t["text"].strip()
          and (number == 1 or (c["doctor"] in POLICIES and t["text"] not in seen))
          and c["case"] in spec.get("sp_cases", (c["case"],))]
    if number == 1:
        picked = rng.sample(sp, spec["sp"])
    else:   # distinct texts (a policy can say the same turn in two consultations)
        picked = []
        for c, i in rng.sample(sp, len(sp)):
            if len(picked) < spec["sp"] and c["turns"][i]["text"] not in seen:
                seen.add(c["turns"][i]["text"])
                picked.append((c, i))
    for c, i in picked:
        items.append((dict(kind="model_sp", policy=c["doctor"], case=c["case"], turn_index=i,
                           key=c["key"]), c["turns"][:i], c["turns"][i]["text"]))
    human = [(d, i) for d in split["eval"] for i, t in enumerate(dial[d]["turns"])
             if t["role"] == "doctor" and (d, i) not in human_taken]
    for d, i in rng.sample(human, min(spec.get("human", 100), len(human))):
        items.append((dict(kind="human_eval", dialogue=d, turn_index=i),
                      dial[d]["turns"][:i], dial[d]["turns"][i]["text"]))
    rng.shuffle(items)
    if number > 1:
        for source, _, _ in items:
            source["draw"] = number
    out = [{"id": f"ri-{n:04d}", "history": hist, "turn": turn, "source": source}
           for n, (source, hist, turn) in enumerate(items, start=spec["start"])]
    # a text the REM trains on, in another history, is not a test item (ids keep their gap)
    trained = {json.loads(line)["turn"] for name in spec.get("not_in", ())
               for line in (ROOT / name).read_text(encoding="utf-8").splitlines() if line}
    return [it for it in out if it["turn"] not in trained]


def all_draws() -> list[dict]:
    """Every draw's items in order, each leaving out what the earlier ones took."""
    items: list[dict] = []
    for number in sorted(DRAWS):
        items += draw(number, items)
    return items


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed items")
    ap.add_argument("--blind", type=Path, help="write the labellers' view (history, turn)")
    ap.add_argument("--draw", type=int, choices=sorted(DRAWS),
                    help="only this draw (--blind, --merge)")
    ap.add_argument("--merge", nargs="+", metavar="WHO=FILE",
                    help="write the labellers' sheets into the draw's own file (--draw)")
    args = ap.parse_args(argv)
    items = all_draws()
    if args.merge:
        if not args.draw or "file" not in DRAWS[args.draw]:
            ap.error("--merge needs --draw N of a draw with its own file")
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from rem_sp_turns import merge

        sheets = [(who, Path(path)) for who, _, path in (m.partition("=") for m in args.merge)]
        mine = [it for it in items if it["source"].get("draw", 1) == args.draw]
        out = ROOT / DRAWS[args.draw]["file"]
        tmp = out.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n"
                               for row in merge(mine, sheets)), encoding="utf-8")
        tmp.replace(out)
        print(f"{out}: {len(mine)} items with their labels")
    if args.blind:
        if args.draw:
            items = [it for it in items if it["source"].get("draw", 1) == args.draw]
        args.blind.write_text("".join(json.dumps({k: it[k] for k in ("id", "history", "turn")},
                                                 ensure_ascii=False) + "\n" for it in items))
    if args.check:
        for path in dict.fromkeys(_file(it) for it in items):
            mine = [it for it in items if _file(it) == path]
            committed = [{k: r[k] for k in ("id", "history", "turn", "source")}
                         for r in _jsonl(path)]
            if committed != mine:
                print(f"{path}: differs from the seeded draw", file=sys.stderr)
                return 1
            print(f"{path}: {len(mine)} items, the seeded draw")
    return 0


def _file(item: dict) -> Path:
    """The committed file an item lives in (its draw's own file, else the shared one)."""
    spec = DRAWS[item["source"].get("draw", 1)]
    return ROOT / spec["file"] if "file" in spec else COMMITTED


if __name__ == "__main__":
    raise SystemExit(main())
