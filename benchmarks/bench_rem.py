"""Benchmark of the REM scorers, printed in one run (no timed asserts in tests).

On the embedded SmolLM2-135M (no cache, so every scoring is computed):

1. throughput (scorings/s) of the ``expected`` mode (Σ s·p(s) of the score token, one
   forward pass) vs the ``sampled`` mode with k samples (default 5, as in PLPF), same
   in-context prompt (stage params: rule with criteria, ``rem.n_examples`` examples).
   Goal: ≥ 10× faster. Wall and CPU seconds are both given: CPU seconds do not depend on
   how busy the machine is.
2. agreement on which of two candidates is better: pairs of test-split states judged
   under the same rule (their gold scores differ); a pair agrees when both modes prefer
   the same state (or both call it a tie). Goal: ≥ 90%. Agreement with the gold order is
   shown too.

Usage: .venv/bin/python benchmarks/bench_rem.py [--pairs-per-rule 1] [--k 5]
       [--n-examples N] [--max-new-tokens T]
"""

from __future__ import annotations

import argparse
import itertools
import random
import time

from medpref.llm import LLMSession
from medpref.params import load_params
from medpref.rem.build_rem import load_inputs, make_scorer, score_annotations


def candidate_pairs(inputs, per_rule: int, seed: int):
    """Per rule, ``per_rule`` seeded pairs of test states with different gold scores."""
    rng = random.Random(seed)
    test = inputs.split("test")
    pairs = []
    for rule in inputs.flowchart.ids:
        rows = [a for a in test if a.rule == rule]
        combos = [(a, b) for a, b in itertools.combinations(rows, 2) if a.score != b.score]
        rng.shuffle(combos)
        pairs += combos[:per_rule]
    return pairs


def agreement(pairs, left: dict, right: dict) -> int:
    """Pairs on which two score maps prefer the same candidate (or both tie)."""
    return sum(prefers(left[a.id], left[b.id]) == prefers(right[a.id], right[b.id])
               for a, b in pairs)


def timed_scores(mode, llm, p, inputs, states, seed):
    scorer = make_scorer(mode, llm, p, inputs, seed)
    c0, t0 = time.process_time(), time.perf_counter()
    judged = score_annotations(scorer, states, inputs.flowchart)
    return [j.score for j in judged], time.perf_counter() - t0, time.process_time() - c0


def prefers(x: float | None, y: float | None, eps: float = 1e-9) -> int | None:
    if x is None or y is None:
        return None
    return 0 if abs(x - y) <= eps else (1 if x > y else -1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs-per-rule", type=int, default=1)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--n-examples", type=int, default=None)
    ap.add_argument("--max-new-tokens", type=int, default=None)
    args = ap.parse_args()

    params = load_params()
    common = {}  # rem.scorers' sampled and expected settings, changed alike
    if args.n_examples is not None:
        common["n_examples"] = args.n_examples
    calls = dict(params.rem.calls)   # the REM's one call: every scorer's budget
    if args.max_new_tokens is not None:
        calls["score"] = calls["score"].model_copy(update={"max_new_tokens": args.max_new_tokens})
    scorers = dict(params.rem.scorers)
    scorers["sampled"] = scorers["sampled"].model_copy(update={**common, "k": args.k})
    scorers["expected"] = scorers["expected"].model_copy(update=common)
    p = params.rem.model_copy(update={"scorers": scorers, "calls": calls})
    k = args.k
    n_examples, max_new = scorers["sampled"].n_examples, p.call("score").max_new_tokens
    seed = params.shared.seed
    inputs = load_inputs(p)
    pairs = candidate_pairs(inputs, args.pairs_per_rule, seed)
    states = list({a.id: a for pair in pairs for a in pair}.values())
    llm = LLMSession.for_stage("bench_rem", params, use_cache=False)
    warm = make_scorer("expected", llm, p, inputs, seed)      # load the model, untimed
    score_annotations(warm, states[:1], inputs.flowchart)

    results = {}
    for mode in ("expected", "sampled"):
        scores, wall, cpu = timed_scores(mode, llm, p, inputs, states, seed)
        results[mode] = {"scores": dict(zip((a.id for a in states), scores)), "wall": wall,
                         "cpu": cpu}
        print(f"{mode:>8}: {len(states)} scorings in {wall:7.1f} s wall ({cpu:7.1f} s CPU) "
              f"-> {len(states) / wall:.3f} scorings/s", flush=True)

    replica_seed = seed + 1000 * k    # its seeds are disjoint from the first run's
    replica, _, _ = timed_scores("sampled", llm, p, inputs, states, replica_seed)
    replica_scores = dict(zip((a.id for a in states), replica))

    ratio_wall = results["sampled"]["wall"] / results["expected"]["wall"]
    ratio_cpu = results["sampled"]["cpu"] / results["expected"]["cpu"]
    exp_s, smp_s = results["expected"]["scores"], results["sampled"]["scores"]
    agree = agreement(pairs, exp_s, smp_s)
    decisive = agree_decisive = gold_exp = gold_smp = 0
    for a, b in pairs:
        pe, ps = prefers(exp_s[a.id], exp_s[b.id]), prefers(smp_s[a.id], smp_s[b.id])
        gold = prefers(float(a.score), float(b.score))
        if ps not in (0, None):
            decisive += 1
            agree_decisive += pe == ps
        gold_exp += pe == gold
        gold_smp += ps == gold
    n = len(pairs)
    print(f"\nsettings: k={k}, in-context examples/rule={n_examples}, "
          f"max_new_tokens={max_new}, pairs={n}, states={len(states)}")
    print(f"speed-up of expected over sampled: {ratio_wall:.1f}x wall, {ratio_cpu:.1f}x CPU "
          "(goal >= 10x)")
    print(f"agreement on the better candidate: {agree}/{n} = {100 * agree / n:.0f}% "
          f"(goal >= 90%); on the {decisive} pairs where sampled is not tied: "
          f"{agree_decisive}/{decisive or 1}")
    print(f"agreement with the gold order: expected {gold_exp}/{n}, sampled {gold_smp}/{n}")
    self_agree = agreement(pairs, smp_s, replica_scores)
    print(f"ceiling: sampled (k={k}) agrees with a second sampled run on "
          f"{self_agree}/{n} = {100 * self_agree / n:.0f}%; expected agrees with that "
          f"second run on {agreement(pairs, exp_s, replica_scores)}/{n}")
    llm.close()


if __name__ == "__main__":
    main()
