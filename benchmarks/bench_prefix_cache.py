"""Benchmark: option scoring with and without the shared-prefix KV cache (hf backend).

The REM's expected mode scores many states under one rule; their prompts share the rule
and its in-context examples (~90 % of the tokens). The hf backend runs that shared
beginning once per batch. This prints the wall time of one batch of ``--n`` test states
of one rule both ways and the largest difference between their probabilities.

Usage: .venv/bin/python benchmarks/bench_prefix_cache.py [--rule A] [--n 8]
"""

from __future__ import annotations

import argparse
import time

from medpref.llm import LLMSession
from medpref.llm.hf import HFBackend
from medpref.params import load_params
from medpref.rem import build_rem as b03
from medpref.remscore.task import SCORE_OPTIONS, SCORE_PREFIX


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rule", default="A")
    ap.add_argument("--n", type=int, default=8)
    args = ap.parse_args()

    params = load_params()
    p = params.rem
    inputs = b03.load_inputs(p)
    llm = LLMSession.for_stage("bench_prefix_cache", params, use_cache=False)
    scorer = b03.make_scorer("expected", llm, p, inputs, params.shared.seed)
    states = [a for a in inputs.split("test") if a.rule == args.rule][:args.n]
    prompts = [scorer.messages_for(a.history, inputs.flowchart[args.rule]) for a in states]
    backend = HFBackend(params.shared.llm.roles[p.role].model, batch_size=len(prompts))
    backend.option_probs(prompts[:1], SCORE_OPTIONS, [SCORE_PREFIX])   # load, untimed
    lengths = [len(backend._tok(backend.render(m, SCORE_PREFIX),
                                add_special_tokens=False)["input_ids"]) for m in prompts]

    results, times = {}, {}
    for name, minimum in (("shared prefix", HFBackend.shared_prefix_min), ("plain", 10**9)):
        backend.shared_prefix_min = minimum
        t0 = time.perf_counter()
        results[name] = backend.option_probs(prompts, SCORE_OPTIONS, [SCORE_PREFIX] * len(prompts))
        times[name] = time.perf_counter() - t0
        print(f"{name:>13}: {len(prompts)} prompts in {times[name]:6.2f} s")
    diff = max(abs(a[0][o] - b[0][o]) for a, b in zip(results["shared prefix"], results["plain"])
               for o in SCORE_OPTIONS)
    print(f"prompt tokens {min(lengths)}-{max(lengths)}; speed-up "
          f"{times['plain'] / times['shared prefix']:.1f}x; largest probability "
          f"difference {diff:.1e}")
    llm.close()


if __name__ == "__main__":
    main()
