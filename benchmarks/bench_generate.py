"""Benchmark: stop strings ending generation inside ``generate`` vs cutting afterwards.

A fixed prompt set: NoteChat's doctor-turn prompt (``configs/prompts/notechat_doctor``)
on the first ``--n`` embedded notes at the start of the visit, answered by the embedded
model with the answer started as ``Doctor:`` and the other speaker's tag as stop strings
(what the role-play asks). Both ways run greedily in one batch; the script prints wall
and CPU seconds, tokens generated, the speed-up ratio and whether the texts are equal
(they must be: the criterion stops where the cut would cut).

Usage: PYTHONPATH=src .venv/bin/python benchmarks/bench_generate.py [--n 8] [--max-new-tokens 48]
"""

from __future__ import annotations

import argparse
import resource
import time

from medpref.contracts import ClinicalNote, read_jsonl
from medpref.llm.hf import HFBackend
from medpref.llm.types import ChatRequest, GenerationParams
from medpref.notechat.roleplay import PREFIX, STOP
from medpref.params import load_params, repo_path
from medpref.prompts import load_prompt


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def prompt_set(n: int) -> list[list[dict[str, str]]]:
    template = load_prompt("notechat_doctor")
    notes = read_jsonl(repo_path("data/embedded/notes.jsonl"), ClinicalNote)[:n]
    return [template.render(note=note.note, history="(The visit is just starting.)",
                            keywords="the main complaint") for note in notes]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--role", default="doctor")
    args = ap.parse_args()

    model = load_params().shared.llm.roles[args.role].model
    backend = HFBackend(str(repo_path(model)), batch_size=args.n)
    params = GenerationParams(max_new_tokens=args.max_new_tokens, stop=STOP["doctor"])
    requests = [ChatRequest.of(m, params, prefix=PREFIX["doctor"]) for m in prompt_set(args.n)]
    backend._ensure_loaded()
    results = {}
    for label, inside in (("cut after", False), ("stop inside", True)):
        backend.stop_in_generate = inside
        w0, c0 = time.perf_counter(), cpu_s()
        comps = backend.generate(requests)
        results[label] = (time.perf_counter() - w0, cpu_s() - c0, comps)
    print(f"{len(requests)} doctor-turn prompts, max_new_tokens {args.max_new_tokens}, "
          f"stop {list(STOP['doctor'])}")
    print(f"{'':<12}{'wall s':>8}{'cpu s':>8}{'tokens':>8}{'stopped':>9}")
    for label, (wall, cpu, comps) in results.items():
        print(f"{label:<12}{wall:>8.1f}{cpu:>8.1f}{sum(c.tokens_out for c in comps):>8}"
              f"{sum(c.finish_reason == 'stop' for c in comps):>9}")
    (w_cut, c_cut, a), (w_in, c_in, b) = results["cut after"], results["stop inside"]
    print(f"speed-up: wall {w_cut / w_in:.2f}x, cpu {c_cut / c_in:.2f}x; "
          f"same texts: {[x.text for x in a] == [y.text for y in b]}")


if __name__ == "__main__":
    main()
