"""Benchmark: stop strings ending generation inside ``generate`` vs cutting afterwards.

A fixed prompt set: NoteChat's doctor-turn prompt (``configs/prompts/notechat_doctor``)
on the first ``--n`` embedded notes at the start of the visit, answered by the embedded
model with the answer started as ``Doctor:`` and the other speaker's tag as stop strings
(what the role-play asks), sampled at the stage's temperature with a fixed seed (greedy
with ``--greedy``: the 135M model then often opens with the patient's line, so every
row stops within a few tokens). Both ways run in one batch; the script prints wall
and CPU seconds, tokens generated, the speed-up ratio and whether the texts are equal
(they must be: the criterion stops where the cut would cut).

``--rem`` measures the other saving instead: ``--n`` REM judge prompts of one rule
(the rule and its in-context examples, ~900 tokens, shared), one sampled answer each,
with the shared beginning run once on a key/value cache vs each prompt left-padded
whole (stage 03's sampled scorer).

Usage: PYTHONPATH=src .venv/bin/python benchmarks/bench_generate.py [--n 8] [--max-new-tokens 48]
       PYTHONPATH=src .venv/bin/python benchmarks/bench_generate.py --rem [--rule A] [--n 8]
"""

from __future__ import annotations

import argparse
import resource
import time

from medpref.contracts import ClinicalNote, read_jsonl
from medpref.llm.hf import HFBackend
from medpref.llm.types import ChatRequest, GenerationParams
from medpref.notechat.config import TURN_PREFIX
from medpref.notechat.roleplay import STOP
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


def rem_requests(rule: str, n: int) -> list[ChatRequest]:
    """Sampled REM judgements of ``n`` test states of one rule (stage 03's settings)."""
    from medpref.llm import LLMSession
    from medpref.rem import build_rem
    from medpref.remscore.task import COMMENT_PREFIX

    params = load_params()
    p = params.rem
    inputs = build_rem.load_inputs(p)
    scorer = build_rem.make_scorer("sampled", LLMSession("bench", params.shared), p, inputs,
                                   params.shared.seed)
    states = [a for a in inputs.split(p.eval_split) if a.rule == rule][:n]
    sampled = p.scorers["sampled"]
    gp = GenerationParams(max_new_tokens=p.call("score").max_new_tokens,
                          temperature=sampled.temperature, seed=params.shared.seed)
    return [ChatRequest.of(scorer.messages_for(a.history, inputs.flowchart[rule]), gp,
                           prefix=COMMENT_PREFIX) for a in states]


def compare(backend: HFBackend, requests, variants) -> dict:
    results = {}
    for label, setup in variants:
        setup(backend)
        w0, c0 = time.perf_counter(), cpu_s()
        comps = backend.generate(requests)
        results[label] = (time.perf_counter() - w0, cpu_s() - c0, comps)
    print(f"{'':<14}{'wall s':>8}{'cpu s':>8}{'tokens':>8}{'stopped':>9}")
    for label, (wall, cpu, comps) in results.items():
        print(f"{label:<14}{wall:>8.1f}{cpu:>8.1f}{sum(c.tokens_out for c in comps):>8}"
              f"{sum(c.finish_reason == 'stop' for c in comps):>9}")
    (w_a, c_a, a), (w_b, c_b, b) = results.values()
    print(f"speed-up: wall {w_a / w_b:.2f}x, cpu {c_a / c_b:.2f}x; "
          f"same texts: {[x.text for x in a] == [y.text for y in b]}")
    return results


def _set(**attrs):
    def setup(backend):
        for k, v in attrs.items():
            setattr(backend, k, v)
    return setup


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--role", default="doctor")
    ap.add_argument("--greedy", action="store_true")
    ap.add_argument("--rem", action="store_true", help="shared-prefix generation, REM prompts")
    ap.add_argument("--rule", default="A")
    args = ap.parse_args()

    all_params = load_params()
    model = all_params.shared.llm.roles[args.role].model
    backend = HFBackend(str(repo_path(model)), batch_size=args.n)
    backend._ensure_loaded()
    if args.rem:
        requests = rem_requests(args.rule, args.n)
        print(f"{len(requests)} sampled REM prompts of rule {args.rule}")
        compare(backend, requests, [("whole prompts", _set(shared_prefix_min=10**9)),
                                    ("shared prefix", _set(shared_prefix_min=32))])
        return
    params = GenerationParams(max_new_tokens=args.max_new_tokens, stop=STOP["doctor"],
                              temperature=0.0 if args.greedy else all_params.notechat.temperature,
                              seed=all_params.shared.seed)
    requests = [ChatRequest.of(m, params, prefix=TURN_PREFIX["doctor"]) for m in prompt_set(args.n)]
    print(f"{len(requests)} doctor-turn prompts, max_new_tokens {args.max_new_tokens}, "
          f"temperature {params.temperature}, stop {list(STOP['doctor'])}")
    compare(backend, requests, [("cut after", _set(stop_in_generate=False)),
                                ("stop inside", _set(stop_in_generate=True))])


if __name__ == "__main__":
    main()
