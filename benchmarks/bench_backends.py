"""Benchmark of the model layer, printed in one run (rerunnable; no timed asserts in tests).

1. hf backend: generation tokens/s of the embedded SmolLM2-135M, batched (batch 8) vs
   unbatched (batch 1), greedy, same prompts and token budget. Goal: ≥ 3×.
2. openai backend against a local stub server with fixed latency: calls/s with bounded
   concurrency vs one call at a time. Goal: ≥ 10×.

Usage: .venv/bin/python benchmarks/bench_backends.py [--prompts 8] [--tokens 64] [--calls 48]
"""

from __future__ import annotations

import argparse
import os
import time

from medpref import REPO_ROOT
from medpref.llm.client import LLMClient
from medpref.llm.hf import HFBackend
from medpref.llm.openai_backend import OpenAIBackend
from medpref.llm.stub_server import StubServer
from medpref.llm.types import CallSpec, GenerationParams

QUESTIONS = [
    "I have had a dry cough for two weeks and a mild fever. What should I do?",
    "My ankle is swollen after I twisted it playing football yesterday.",
    "I get a burning pain in my chest after meals, worse when lying down.",
    "My blood pressure reading at the pharmacy was 150 over 95. Is that bad?",
    "I feel tired all the time and I have gained weight this year.",
    "My child has had diarrhoea for three days and is drinking less.",
    "I have a headache on one side with flashing lights before it starts.",
    "There is an itchy red rash on both my elbows that keeps coming back.",
    "I wake up at night needing to urinate three or four times.",
    "My knee hurts when I climb stairs and it clicks sometimes.",
    "I have been feeling low and not enjoying things for a month.",
    "After starting a new tablet my ankles have started to swell.",
]


def bench_hf(n_prompts: int, tokens: int) -> dict:
    path = REPO_ROOT / "models" / "smollm2-135m-instruct"
    prompts = [[{"role": "user", "content": q}] for q in (QUESTIONS * 4)[:n_prompts]]
    call = CallSpec("policy", "", tokens)
    out = {}
    for label, batch in (("unbatched", 1), ("batched", 8)):
        client = LLMClient("policy", HFBackend(str(path), batch_size=batch), GenerationParams())
        client.chat(prompts[0], call.but(max_new_tokens=4))  # load + warm up, not timed
        t0 = time.perf_counter()
        comps = client.chat_many(prompts, call)
        wall = time.perf_counter() - t0
        n_tokens = sum(c.tokens_out for c in comps)
        out[label] = {"batch": batch, "tokens": n_tokens, "wall_s": wall,
                      "tokens_per_s": n_tokens / wall}
    out["ratio"] = out["batched"]["tokens_per_s"] / out["unbatched"]["tokens_per_s"]
    return out


def bench_openai(n_calls: int, latency_s: float, concurrency: int) -> dict:
    out = {}
    prompts = [[{"role": "user", "content": f"question {i}"}] for i in range(n_calls)]
    with StubServer(latency_s=latency_s) as server:
        os.environ["MEDPREF_BENCH_URL"] = server.base_url
        for label, conc in (("sequential", 1), ("concurrent", concurrency)):
            backend = OpenAIBackend("stub", base_url_env="MEDPREF_BENCH_URL",
                                    api_key_env="MEDPREF_BENCH_NO_KEY", max_concurrency=conc)
            client = LLMClient("judge", backend, GenerationParams())
            t0 = time.perf_counter()
            comps = client.chat_many(prompts, CallSpec("judge", "", 16))
            wall = time.perf_counter() - t0
            assert all(c.ok for c in comps)
            out[label] = {"concurrency": conc, "calls": n_calls, "wall_s": wall,
                          "calls_per_s": n_calls / wall}
        out["peak_in_flight"] = server.peak_in_flight
    out["ratio"] = out["concurrent"]["calls_per_s"] / out["sequential"]["calls_per_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--calls", type=int, default=48)
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--skip-hf", action="store_true")
    args = ap.parse_args()
    if not args.skip_hf:
        hf = bench_hf(args.prompts, args.tokens)
        print(f"hf ({args.prompts} prompts, ≤{args.tokens} new tokens, greedy, CPU threads "
              f"{__import__('torch').get_num_threads()}):")
        for k in ("unbatched", "batched"):
            r = hf[k]
            print(f"  {k:<10} batch {r['batch']}: {r['tokens']} tokens in {r['wall_s']:.1f} s "
                  f"= {r['tokens_per_s']:.1f} tokens/s")
        print(f"  batched / unbatched = {hf['ratio']:.2f}×  (goal ≥ 3×)")
    oa = bench_openai(args.calls, args.latency, args.concurrency)
    print(f"openai backend vs local stub ({args.calls} calls, {args.latency * 1000:.0f} ms each):")
    for k in ("sequential", "concurrent"):
        r = oa[k]
        print(f"  {k:<10} concurrency {r['concurrency']}: {r['calls_per_s']:.1f} calls/s "
              f"({r['wall_s']:.2f} s)")
    print(f"  concurrent / sequential = {oa['ratio']:.2f}×  (goal ≥ 10×; peak in flight "
          f"{oa['peak_in_flight']})")


if __name__ == "__main__":
    main()
