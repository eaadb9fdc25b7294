"""The REM scoring several candidate turns of one state on every rule: one policy at a
time, all candidates in one call, and all in one call on the prefix tree.

Held-out compliance (stage 06) scores each held-out state plus each policy's next turn on
every rule; stage 04 scores each item's candidates likewise. The REM's prompt gives the
consultation first and the rule after it, so the prompts of one state share the history
up to the candidate, and the six rules' prompts of one candidate share that candidate
too. This script builds such prompts from the embedded dialogues (the held-out states'
way: a dialogue cut before one of its doctor turns, at most ``history_max_turns`` turns;
the candidates are that turn and the doctor turns of other dialogues, standing in for the
policies' turns) and scores them with the ``finetuned`` scorer's prompt (short rule,
score first, one forward pass; ``--adapter`` the REM adapter, else the base model, which
costs the same), no cache, three ways in turn:

* ``one policy at a time``: one ``score_states`` call per candidate index;
* ``one call, one level``: every candidate in one call, the shared beginning run once per
  batch (the backend before the prefix tree: ``shared_middle_min = 0``);
* ``one call, prefix tree``: the same call with the tree (the default).

Prints wall and process-CPU seconds per repeat, the medians, the ratios to the first way
and the largest difference of any probability from the first way's.

Usage: PYTHONPATH=src .venv/bin/python benchmarks/bench_rem_candidates.py
       [--states 4] [--candidates 5] [--repeats 3] [--adapter DIR]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from medpref.contracts import Dialogue, Turn, read_jsonl
from medpref.llm import LLMClient
from medpref.llm.hf import HFBackend
from medpref.llm.types import GenerationParams
from medpref.params import load_params, repo_path
from medpref.remscore.scorers import build_scorer
from medpref.rules import load_rules


def states_and_candidates(dialogues: list[Dialogue], n_states: int, n_cand: int,
                          max_turns: int, seed: int):
    """``n_states`` histories ending with a patient turn, each with ``n_cand`` doctor
    turns: its own next one first, then other dialogues' (seeded)."""
    rng = random.Random(seed)
    doctor_turns = [t.text for d in dialogues for t in d.turns if t.role == "doctor"]
    out = []
    for d in rng.sample(dialogues, len(dialogues)):
        cuts = [i for i, t in enumerate(d.turns)
                if t.role == "doctor" and i >= 3 and d.turns[i - 1].role == "patient"]
        if not cuts:
            continue
        i = rng.choice(cuts)
        others = rng.sample([t for t in doctor_turns if t != d.turns[i].text], n_cand - 1)
        out.append((list(d.turns[max(0, i - max_turns):i]), [d.turns[i].text, *others]))
        if len(out) == n_states:
            return out
    raise SystemExit(f"only {len(out)} dialogues have a doctor turn after 3 turns")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--states", type=int, default=4)
    ap.add_argument("--candidates", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--adapter", help="the REM adapter folder (default: the base model)")
    args = ap.parse_args()

    params = load_params()
    rem = params.rem
    role = params.shared.llm.roles[rem.role]
    flowchart = load_rules(repo_path(rem.rules))
    h = params.simulation.heldout
    dialogues = read_jsonl(repo_path(h.dialogues), Dialogue)
    cases = states_and_candidates(dialogues, args.states, args.candidates,
                                  h.history_max_turns, params.shared.seed)
    backend = HFBackend(str(repo_path(role.model)), adapter=args.adapter,
                        batch_size=role.batch_size, device="cpu")
    client = LLMClient(rem.role, backend, GenerationParams())  # no cache: every call runs
    settings = rem.scorers["finetuned"]
    scorer = build_scorer("finetuned", client, flowchart, [], call=rem.call("score"),
                          comment=False, detail="short", state_value=settings.state_value)
    full = [[[*hist, Turn(role="doctor", text=c)] for hist, cands in cases for c in [cands[k]]]
            for k in range(args.candidates)]                   # full[k]: policy k's states

    def per_policy():
        return [scorer.score_states(states, flowchart.rules) for states in full]

    def one_call():
        flat = [s for k in range(args.candidates) for s in full[k]]
        judged = scorer.score_states(flat, flowchart.rules)
        n = len(full[0])
        return [judged[k * n:(k + 1) * n] for k in range(args.candidates)]

    default_middle = backend.shared_middle_min

    def flat_levels(middle: int):
        def run():
            backend.shared_middle_min = middle
            try:
                return one_call()
            finally:
                backend.shared_middle_min = default_middle
        return run

    ways = {"one policy at a time": per_policy, "one call, one level": flat_levels(0),
            "one call, prefix tree": flat_levels(default_middle)}
    n_prompts = args.states * args.candidates * len(flowchart.rules)
    print(f"{args.states} states x {args.candidates} candidates x {len(flowchart.rules)} "
          f"rules = {n_prompts} prompts; batch {role.batch_size}; "
          f"{'adapter ' + args.adapter if args.adapter else 'base model'}", flush=True)
    backend._ensure_loaded()
    wall: dict[str, list[float]] = {w: [] for w in ways}
    cpu: dict[str, list[float]] = {w: [] for w in ways}
    probs: dict[str, list[float]] = {}
    for rep in range(args.repeats):
        for way, run in ways.items():
            t0, c0 = time.perf_counter(), time.process_time()
            out = run()
            wall[way].append(time.perf_counter() - t0)
            cpu[way].append(time.process_time() - c0)
            probs[way] = [j[r.id].probs[s] for part in out for state in part
                          for r, j in ((r, state) for r in flowchart.rules) for s in "012"]
            print(f"  repeat {rep + 1} {way:<24} wall {wall[way][-1]:7.1f} s  "
                  f"cpu {cpu[way][-1]:7.1f} s", flush=True)
    ref = "one policy at a time"
    for way in ways:
        wr = statistics.median(a / b for a, b in zip(wall[way], wall[ref]))
        cr = statistics.median(a / b for a, b in zip(cpu[way], cpu[ref]))
        diff = max(abs(a - b) for a, b in zip(probs[way], probs[ref]))
        print(f"{way:<24} median wall {statistics.median(wall[way]):7.1f} s, cpu "
              f"{statistics.median(cpu[way]):7.1f} s; ratio to one policy at a time: wall "
              f"{wr:.2f}, cpu {cr:.2f}; max |p - p_ref| {diff:.1e}")


if __name__ == "__main__":
    main()
