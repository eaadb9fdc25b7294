"""Benchmark: stage 02's generation (NoteChat + single-prompt baselines), cold, on N notes.

Runs the NoteChat pipeline and the baselines on the first ``--notes`` notes of the
params' source with no response cache (every call reaches the model) and prints, per
step, the batched calls, requests, tokens generated, model seconds and tokens/s, then
wall and CPU time of the steps around them (concept extractor, generation, baselines,
evaluation). The machine may be shared: CPU time (this process, all threads) is the
steadier number; wall time is what a user waits.

``--cut-after`` generates ``max_new_tokens`` and cuts at stop strings afterwards (the
behaviour before stop strings ended generation inside ``generate``), for a before/after.

Usage: PYTHONPATH=src .venv/bin/python benchmarks/bench_notechat.py [--notes 2] [--cut-after]
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from contextlib import contextmanager

from medpref.llm import LLMSession
from medpref.llm.hf import HFBackend
from medpref.notechat import evaluate
from medpref.notechat import stage as nc
from medpref.params import load_params


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


@contextmanager
def timed(label: str, rows: list[dict]):
    w0, c0 = time.perf_counter(), cpu_s()
    yield
    rows.append({"step": label, "wall_s": round(time.perf_counter() - w0, 1),
                 "cpu_s": round(cpu_s() - c0, 1)})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--notes", type=int, default=2)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--cut-after", action="store_true",
                    help="generate max_new_tokens, cut at stop strings afterwards")
    ap.add_argument("--json", help="also write the numbers to this JSON file")
    args = ap.parse_args()
    HFBackend.stop_in_generate = not args.cut_after

    params = load_params(args.params)
    p = params.notechat.model_copy(update={"n_notes": args.notes})
    session = LLMSession("02_notechat", params.shared, cache=None)  # cold: no cache
    steps: list[dict] = []
    with timed("load extractor", steps):
        extractor = nc.load_extractor(p)
    clients = nc.make_clients(session, p)
    run = nc.StageRun(nc.load_notes(p, params.shared.seed))
    with timed("load model", steps):
        clients["planner"].backend._ensure_loaded()
    with timed("notechat generation", steps):
        nc.run_notechat(run, clients, p, params.shared.seed, extractor)
    with timed("baselines", steps):
        nc.run_baselines(run, clients, p, params.shared.seed)
    with timed("evaluation", steps):
        evaluate.score_systems(nc.systems(run), run.notes, extractor)

    print(f"notes: {len(run.notes)}  stop inside generate: {not args.cut_after}")
    print(f"{'method':<22}{'step':<15}{'batches':>8}{'reqs':>6}{'tok_out':>9}"
          f"{'model_s':>9}{'tok/s':>7}")
    calls = run.log.rows()
    for r in calls:
        rate = r["tokens_out"] / r["model_s"] if r["model_s"] else 0.0
        print(f"{r['method']:<22}{r['step']:<15}{r['batches']:>8}{r['requests']:>6}"
              f"{r['tokens_out']:>9}{r['model_s']:>9.1f}{rate:>7.1f}")
    for s in steps:
        print(f"{s['step']:<24} wall {s['wall_s']:>7.1f} s   cpu {s['cpu_s']:>7.1f} s")
    total_w = sum(s["wall_s"] for s in steps)
    total_c = sum(s["cpu_s"] for s in steps)
    print(f"{'total':<24} wall {total_w:>7.1f} s   cpu {total_c:>7.1f} s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"notes": len(run.notes), "stop_in_generate": not args.cut_after,
                       "calls": calls, "steps": steps}, fh, indent=2)


if __name__ == "__main__":
    main()
