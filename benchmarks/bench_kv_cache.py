"""Benchmark of the local backend's two savings on long prompts, printed in one run: the
growing key/value cache (medpref.llm.hf.growing_cache) against transformers'
DynamicCache, and the k seeds of one prompt reading it once (HFBackend.reuse_prefill),
on the REM's sampled row (stage 03's longest step: in-context prompts of about 1,700
tokens, k sampled comments each).

Three ways score the same states with no LLM cache: as before both (DynamicCache, each
seed reads the prompts), the growing cache alone, and both savings. The script prints
each way's wall and CPU seconds and whether every raw answer is the same text in all three
(it should be: the numbers are the same). The decoding steps alone are timed by
``--steps-only`` (a batch of ROWS rows over a context of CTX tokens, 40 greedy steps).

Usage: PYTHONPATH=src .venv/bin/python benchmarks/bench_kv_cache.py [--states 12] [--k 2]
       PYTHONPATH=src .venv/bin/python benchmarks/bench_kv_cache.py --steps-only 10 1800
"""

from __future__ import annotations

import argparse
import time

from medpref.llm import LLMSession, hf
from medpref.params import load_params
from medpref.rem.build_rem import load_inputs, make_scorer, score_annotations


def rem_sampled(n_states: int, k: int) -> None:
    params = load_params()
    p = params.rem
    scorers = dict(p.scorers)
    scorers["sampled"] = scorers["sampled"].model_copy(update={"k": k})
    p = p.model_copy(update={"scorers": scorers})
    inputs = load_inputs(p)
    dev = inputs.split("dev")
    # the first states of each rule, so that every rule's prompt is in the run
    by_rule: dict[str, list] = {}
    for a in dev:
        by_rule.setdefault(a.rule, []).append(a)
    per = max(1, n_states // max(1, len(by_rule)))
    states = [a for rows in by_rule.values() for a in rows[:per]]
    llm = LLMSession.for_stage("bench_kv_cache", params, use_cache=False)
    score_annotations(make_scorer("expected", llm, p, inputs, params.shared.seed), states[:1],
                      inputs.flowchart)                      # load the model, untimed
    runs = {}
    plain = hf.growing_cache
    for name, cache_of, reuse in (("before", lambda cache=None: cache, False),
                                  ("growing", plain, False),
                                  ("growing+once", plain, True)):
        hf.growing_cache = cache_of
        hf.HFBackend.reuse_prefill = reuse
        scorer = make_scorer("sampled", llm, p, inputs, params.shared.seed)
        c0, t0 = time.process_time(), time.perf_counter()
        judged = score_annotations(scorer, states, inputs.flowchart)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        runs[name] = [j.comments for j in judged]
        print(f"{name:>13}: {len(states)} states x k={k} in {wall:7.1f} s wall "
              f"({cpu:7.1f} s CPU)", flush=True)
    hf.growing_cache = plain
    hf.HFBackend.reuse_prefill = True
    same = runs["before"] == runs["growing"] == runs["growing+once"]
    print(f"every raw answer the same text in all three: {same}")
    llm.close()


def steps_only(rows: int, ctx: int, steps: int = 40) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    params = load_params()
    model = AutoModelForCausalLM.from_pretrained(
        params.shared.llm.roles["rem"].model, dtype=torch.float32).eval()
    torch.manual_seed(0)
    ids = torch.randint(100, 40000, (1, ctx))
    for name, cache_of in (("DynamicCache", lambda c: c), ("growing", hf.growing_cache)):
        with torch.inference_mode():
            out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
            cache = out.past_key_values
            for layer in cache.layers:
                layer.batch_repeat_interleave(rows)
            cache = cache_of(cache)
            nxt = out.logits[:, -1].argmax(-1, keepdim=True).repeat(rows, 1)
            t0 = time.perf_counter()
            for _ in range(steps):
                nxt = model(input_ids=nxt, past_key_values=cache,
                            use_cache=True).logits[:, -1].argmax(-1, keepdim=True)
            dt = time.perf_counter() - t0
        print(f"{name:>12}: {rows} rows over {ctx} tokens: {1000 * dt / steps:.0f} ms a step, "
              f"{rows * steps / dt:.1f} tokens/s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--states", type=int, default=12)
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--steps-only", nargs=2, type=int, metavar=("ROWS", "CTX"))
    args = ap.parse_args()
    if args.steps_only:
        steps_only(*args.steps_only)
    else:
        rem_sampled(args.states, args.k)


if __name__ == "__main__":
    main()
