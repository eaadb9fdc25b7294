#!/usr/bin/env python
"""Model-written doctor turns on training-split states, for the REM to learn from (issue 40).

The REM's constructed rows teach it the rubric's shapes; on turns the trained policies
actually write (fluent questions that do not build on what the patient said, word salad,
off-topic chatter) it read a question as information gathering (docs/rem.md, "The
independent test"). This script writes the labelled-turn source that closes that gap
without touching an evaluation dialogue: the held-out states' recipe
(``simulation.heldout``: up to four seeded cuts per dialogue before its diagnosis turn,
the last ``history_max_turns`` turns read) applied to the split's ``train`` dialogues,
and each of the six policies (the base model, SFT and the four DPO runs of a finished
``dvc repro``; ``--run`` names its checkout) writing its greedy next turn on its own
seeded sample of ``--per-policy`` states, as stage 06 writes a held-out turn (greedy, the
``heldout_turn`` call's token budget, no decoding controls).
Turn texts are kept once (first policy in order).

The rows go to ``--out`` (``data/embedded/rem/train_turns.jsonl``) in the labelled-turn
shape of ``real_turns.jsonl`` (``id``, ``part``, ``history``, ``turn``, ``source``; the
labels are added after blind labelling); ``part`` is ``train`` or ``dev`` by dialogue
(``--dev-share`` of the dialogues, seeded), so the development rows share no dialogue
with the training rows. ``--blind`` writes the labellers' view (id, history, turn).

    PYTHONPATH=src python scripts/rem_train_turns.py --run /path/to/repro/checkout --run-rev REV \\
        --out data/embedded/rem/train_turns.jsonl --blind /tmp/train_turns_blind.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from medpref.contracts import Dialogue, read_jsonl
from medpref.data.split import load_split
from medpref.llm.hf import HFBackend
from medpref.llm.types import ChatRequest, GenerationParams
from medpref.params import load_params, repo_path
from medpref.prompts import load_prompt
from medpref.simulation.consult import doctor_messages, parse_doctor_answer
from medpref.simulation.heldout import select_states

POLICIES = ("base", "sft", "gpt4_rank", "cai_avg", "cai_dep", "agent")


def adapter_of(run: Path, policy: str) -> str | None:
    if policy == "base":
        return None
    sub = "sft/adapter" if policy == "sft" else f"dpo/{policy}/adapter"
    return str(run / "data/05_training" / sub)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, required=True, help="a checkout after dvc repro")
    ap.add_argument("--run-rev", required=True,
                    help="the commit that checkout's dvc repro ran (kept in each row's source)")
    ap.add_argument("--per-policy", type=int, default=40)
    ap.add_argument("--dev-share", type=float, default=0.3)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--blind", type=Path)
    ap.add_argument("--batch-size", type=int, default=16)
    args = ap.parse_args(argv)
    params = load_params()
    sim, seed = params.simulation, params.shared.seed
    hp = sim.heldout
    split = load_split(repo_path(params.shared.split))
    dialogues = split.select(read_jsonl(repo_path(hp.dialogues), Dialogue), "train")
    states = select_states(dialogues, 10 ** 6, hp.states_per_dialogue, seed,
                           hp.history_max_turns, hp.bad_turn_template)
    names = sorted({s.dialogue for s in states})
    dev = set(random.Random(f"{seed}:remturns:dev").sample(
        names, round(args.dev_share * len(names))))
    full = {d.id: d for d in dialogues}
    template = load_prompt(sim.doctor_prompt)
    call = sim.call("heldout_turn")
    gen = GenerationParams(max_new_tokens=call.max_new_tokens, temperature=0.0)
    model = repo_path(params.shared.llm.roles[params.training.base_role].model)
    rows, seen = [], set()
    for pol in POLICIES:
        picked = random.Random(f"{seed}:remturns:{pol}").sample(states, args.per_policy)
        backend = HFBackend(str(model), adapter_of(args.run, pol), batch_size=args.batch_size)
        t0 = time.perf_counter()
        out = backend.generate([ChatRequest.of(doctor_messages(template, list(s.history)), gen)
                                for s in picked])
        print(f"{pol}: {len(picked)} turns in {time.perf_counter() - t0:.0f} s", flush=True)
        for s, c in zip(picked, out, strict=True):
            turn = parse_doctor_answer(c.text)     # as stage 06's held-out turns
            if not turn.strip() or turn in seen:
                continue
            seen.add(turn)
            rows.append({"part": "dev" if s.dialogue in dev else "train",
                         "history": [t.model_dump() for t in full[s.dialogue].turns[:s.cut]],
                         "turn": turn,
                         "source": {"kind": "model_train", "policy": pol,
                                    "dialogue": s.dialogue, "cut": s.cut,
                                    "run": args.run_rev}})
    rng = random.Random(f"{seed}:remturns:order")
    rng.shuffle(rows)
    rows = [{"id": f"tt-{n:04d}", **r} for n, r in enumerate(rows, start=1)]
    args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                        encoding="utf-8")
    if args.blind:
        args.blind.write_text("".join(json.dumps({k: r[k] for k in ("id", "history", "turn")},
                                                 ensure_ascii=False) + "\n" for r in rows),
                              encoding="utf-8")
    print(f"{len(rows)} turns ({sum(r['part'] == 'dev' for r in rows)} dev) from "
          f"{len(states)} states of {len(names)} train dialogues -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
