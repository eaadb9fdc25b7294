"""Does a trained doctor ask? Question share of base vs trained adapters, paired, with intervals.

The probe stage 05's recipe was chosen with (issue 32). Each doctor (the base model, and
each ``--adapter name=folder``) writes one turn, greedy, with the SP test's own doctor
settings (``simulation.doctor_decoding``: repetition penalty, no-repeat n-gram size, the
turn kept up to its first question; ``--tokens`` overrides the token budget), through
the SP test's own code (``simulation.consult.doctor_messages`` with the policies' prompt
``simulation.doctor_prompt``, ``parse_doctor_answer``), on two sets:

- ``states``: every doctor turn of the split's ``--part`` dialogues (default ``eval``:
  never trained or tuned on) that answers a patient, the history its last
  ``simulation.heldout.history_max_turns`` turns; the real doctor turn is the reference;
- ``openings``: each SP case's first patient turn (its chief complaint), the SP test's
  first round.

A turn asks when one of its sentences is a question (``simulation.nextturn.asks_question``,
the SP test's speech-act check). Printed per doctor, set and budget: the question share
with its Wilson 95 % interval, the median words of a turn; and each doctor against
each ``--vs`` doctor (default base) on the same items: the pairs where only one asks, the difference
of shares with a bootstrap interval clustered by dialogue (the states of one dialogue
share it) and the sign-flip p on dialogue totals. Generations go to ``--out`` (JSONL) to
be read. Generation runs to the token budget with no stop string, as in the SP test: a
stop string is cut from the text (the OpenAI convention the ``hf`` backend follows), so
stopping at "?" would drop the very mark that makes a turn a question (an earlier version
did, and undercounted every doctor's questions).

    nice -n 10 .venv/bin/python scripts/sft_probe.py --tokens 48 96 \\
        --adapter sft=data/05_training/sft/adapter \\
        --adapter control=data/05_training/dpo/control_process/adapter \\
        --out benchmarks/results/probe.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from medpref.contracts import Dialogue, Turn, read_jsonl
from medpref.data.split import load_split
from medpref.llm.hf import HFBackend
from medpref.llm.types import ChatRequest, GenerationParams
from medpref.metrics.intervals import paired_difference, proportion_ci
from medpref.params import load_params, repo_path
from medpref.prompts import load_prompt
from medpref.simulation.consult import doctor_messages, parse_doctor_answer
from medpref.simulation.nextturn import asks_question, cut_points


@dataclass(frozen=True)
class Item:
    set: str            # states | openings
    id: str
    cluster: str        # the dialogue (states) or the case (openings)
    history: tuple[Turn, ...]
    reference: str | None = None


def state_items(dialogues: list[Dialogue], history_max_turns: int) -> list[Item]:
    items = []
    for d in dialogues:
        for i in cut_points(d, len(d.turns), random.Random(0)):  # every one
            items.append(Item("states", f"{d.id}@{i}", d.id,
                              tuple(d.turns[max(0, i - history_max_turns):i]), d.turns[i].text))
    return items


def opening_items(params) -> list[Item]:
    from medpref.simulation.common import load_cases

    return [Item("openings", c.id, c.id, (Turn(role="patient", text=c.chief_complaint),))
            for c in load_cases(params.simulation)]


def generate(backend: HFBackend, template, items: list[Item], decoding, tokens: int
             ) -> list[str]:
    # no stop string: the backend cuts it from the text, and the "?" is what asks
    greedy = decoding.model_copy(update={"temperature": 0.0})   # the probe reads greedily
    gen = GenerationParams(max_new_tokens=tokens, **greedy.overrides(0))
    requests = [ChatRequest.of(doctor_messages(template, list(it.history)), gen) for it in items]
    return [c.text for c in backend.generate(requests)]


def summary_rows(rows: list[dict], doctors: list[str], refs: list[str], seed: int
                 ) -> list[dict]:
    """Per set and budget: each doctor's share, then its comparison with each of ``refs``
    (one row per reference; a doctor is not compared with itself)."""
    out = []
    keys = sorted({(r["set"], r["tokens"]) for r in rows})
    for set_, tokens in keys:
        part = [r for r in rows if r["set"] == set_ and r["tokens"] == tokens]
        by = {d: sorted((r for r in part if r["doctor"] == d), key=lambda r: r["item"])
              for d in doctors}
        for d in doctors:
            got = by[d]
            asks = [int(r["asks"]) for r in got]
            ci = proportion_ci(sum(asks), len(asks))
            row = {"set": set_, "tokens": tokens, "doctor": d, "n": len(asks),
                   "asks": sum(asks), "share": ci.estimate, "lo": ci.lo, "hi": ci.hi,
                   "words": statistics.median(len(r["turn"].split()) for r in got)}
            compared = [ref for ref in refs if ref != d and ref in by]
            for ref in compared or [None]:
                out.append(row if ref is None else {**row, **compare(asks, by[ref], got,
                                                                       ref, seed)})
    return out


def compare(asks: list[int], ref_rows: list[dict], rows: list[dict], ref: str,
            seed: int) -> dict:
    """A doctor's asking turns against a reference doctor's on the same items."""
    if [r["item"] for r in ref_rows] != [r["item"] for r in rows]:
        raise ValueError(f"{ref}: not the same items")
    base = [int(r["asks"]) for r in ref_rows]
    cmp = paired_difference(asks, base, seed=seed, clusters=[r["cluster"] for r in rows])
    return {"vs": ref, "only_this": sum(a > b for a, b in zip(asks, base)),
            "only_vs": sum(b > a for a, b in zip(asks, base)),
            "diff": cmp.diff, "diff_lo": cmp.lo, "diff_hi": cmp.hi, "p": cmp.p_value}


def reference_rows(items: list[Item]) -> list[dict]:
    refs = [it for it in items if it.reference is not None]
    asks = sum(bool(asks_question(it.reference)) for it in refs)
    ci = proportion_ci(asks, len(refs))
    return [{"set": "states", "tokens": "-", "doctor": "reference (real turn)", "n": len(refs),
             "asks": asks, "share": ci.estimate, "lo": ci.lo, "hi": ci.hi,
             "words": statistics.median(len(it.reference.split()) for it in refs)}]


def print_table(rows: list[dict]) -> None:
    print(f"{'set':<9}{'tok':>4} {'doctor':<22}{'n':>4}{'asks':>5} {'share [95% CI]':<20}"
          f"{'words':>6}  {'vs':<8}{'+/-':>7}  {'diff [95% CI]':<22}{'p':>7}")
    for r in rows:
        line = (f"{r['set']:<9}{r['tokens']!s:>4} {r['doctor']:<22}{r['n']:>4}{r['asks']:>5} "
                f"{r['share']:.2f} [{r['lo']:.2f}, {r['hi']:.2f}]    {r['words']:>6.0f}")
        if "vs" in r:
            line += (f"  {r['vs']:<8}{r['only_this']:>3}/{r['only_vs']:<3}  "
                     f"{r['diff']:+.2f} [{r['diff_lo']:+.2f}, {r['diff_hi']:+.2f}]    "
                     f"{r['p']:.3f}")
        print(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--adapter", action="append", default=[], metavar="NAME=FOLDER")
    ap.add_argument("--tokens", type=int, nargs="+", default=None,
                    help="token budgets (default: simulation.calls.consult.max_new_tokens)")
    ap.add_argument("--part", default="eval", choices=["train", "dev", "eval"])
    ap.add_argument("--sets", nargs="+", default=["states", "openings"])
    ap.add_argument("--vs", nargs="+", default=["base"],
                    help="the doctors each one is paired against (default: base)")
    ap.add_argument("--from-jsonl", type=Path, default=None,
                    help="summarise the turns of an earlier --out instead of generating")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=24)
    ap.add_argument("--out", type=Path, default=None, help="JSONL of every generated turn")
    ap.add_argument("--csv", type=Path, default=None, help="the printed table as CSV")
    args = ap.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    params = load_params(args.params)
    sim = params.simulation
    decoding = sim.doctor_decoding
    template = load_prompt(sim.doctor_prompt)
    split = load_split(repo_path(params.shared.split))
    dialogues = split.select(read_jsonl(repo_path(sim.heldout.dialogues), Dialogue), args.part)
    items = []
    if "states" in args.sets:
        items += state_items(dialogues, sim.heldout.history_max_turns)
    if "openings" in args.sets:
        items += opening_items(params)
    model = repo_path(params.shared.llm.roles[params.training.base_role].model)
    doctors = {"base": None} | dict(a.split("=", 1) for a in args.adapter)
    rows = []
    if args.from_jsonl:
        rows = [json.loads(line) for line in args.from_jsonl.read_text().splitlines() if line]
        doctors = dict.fromkeys(dict.fromkeys(r["doctor"] for r in rows))
    for name, adapter in doctors.items() if not args.from_jsonl else []:
        backend = HFBackend(str(model), str(repo_path(adapter)) if adapter else None,
                            batch_size=args.batch_size)
        for tokens in args.tokens or [sim.call("consult").max_new_tokens]:
            t0 = time.perf_counter()
            raws = generate(backend, template, items, decoding, tokens)
            print(f"{name} @ {tokens} tokens: {len(items)} turns in "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
            for it, raw in zip(items, raws, strict=True):
                turn = parse_doctor_answer(raw, decoding.stop_after_question)
                rows.append({"doctor": name, "tokens": tokens, "set": it.set, "item": it.id,
                             "cluster": it.cluster, "raw": raw, "turn": turn,
                             "asks": bool(asks_question(turn)),
                             "patient": it.history[-1].text, "reference": it.reference})
    table = summary_rows(rows, list(doctors), args.vs, params.shared.seed)
    if "states" in args.sets:
        table += reference_rows(items)
    print(f"\n{args.part} dialogues: {len(dialogues)}; items: "
          f"{sum(it.set == 'states' for it in items)} states, "
          f"{sum(it.set == 'openings' for it in items)} SP openings")
    print_table(table)
    if args.out and not args.from_jsonl:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    if args.csv:
        import pandas as pd

        pd.DataFrame(table).to_csv(args.csv, index=False)


if __name__ == "__main__":
    main()
