"""Doctor turns of several policies (one base model, one LoRA adapter each): one adapter
at a time vs all of them in shared batches (``medpref.llm.hf.AdapterSet``).

The SP test asks every policy the same cases each round. Asked one policy at a time that
is one batch of 17 (the ``policy`` role's ``batch_size`` is 24) per policy and round;
``AdapterSet`` batches the rows of all policies together (peft's mixed-adapter batch:
the base model once per batch, each adapter's LoRA on its own rows). This script builds
``--adapters`` random LoRA adapters of the embedded model in the shape of the policies'
(the ``tiny`` recipe: r 8 on q_proj and v_proj, seeded, B scaled small so the text stays
fluent), asks each the doctor's opening turn of the 17 SP cases (``policy_doctor``
prompt, the case's first ``--script-rounds`` scripted rounds as history), greedily with
the SP test's decoding (``simulation.doctor_decoding``), and times the two ways in turn
(A B A B ...), in one process, models loaded before the clock starts. Prints each
repeat, the medians, the ratio and whether every answer is the same text both ways.
``--merged`` adds a third way: a merged copy of each adapter, one at a time (no LoRA
arithmetic at all).

Usage: PYTHONPATH=src .venv/bin/python benchmarks/bench_adapter_batch.py
       [--adapters 4] [--repeats 3] [--tokens 48] [--batch-size 24] [--script-rounds 2]
       [--merged]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from medpref.contracts import SPCase, Turn, read_jsonl
from medpref.llm.hf import AdapterSet, HFBackend
from medpref.llm.types import ChatRequest, GenerationParams
from medpref.params import load_params, repo_path
from medpref.prompts import load_prompt
from medpref.simulation.consult import doctor_messages


def make_adapters(base: Path, n: int, out: Path) -> list[Path]:
    """``n`` seeded random LoRA adapters (r 8, q_proj and v_proj) of ``base``."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    folders = []
    for k in range(n):
        torch.manual_seed(100 + k)
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(base), LoraConfig(
            r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "lora_B" in name:
                    param.mul_(0.05)
        model.save_pretrained(out / f"policy{k}")
        folders.append(out / f"policy{k}")
    return folders


def requests(params, rounds: int) -> list[ChatRequest]:
    sim = params.simulation
    template = load_prompt(sim.doctor_prompt)
    dec = sim.doctor_decoding
    gen = GenerationParams(max_new_tokens=sim.call("consult").max_new_tokens, temperature=0.0,
                           repetition_penalty=dec.repetition_penalty,
                           no_repeat_ngram_size=dec.no_repeat_ngram_size)
    out = []
    for case in read_jsonl(repo_path(sim.cases), SPCase):
        turns = [Turn(role="patient", text=case.chief_complaint)]
        for step in case.script[:rounds]:
            turns += [Turn(role="doctor", text=step["doctor"]),
                      Turn(role="patient", text=step["patient"])]
        out.append(ChatRequest.of(doctor_messages(template, turns), gen))
    return out


def merged(base: Path, adapter: Path, batch_size: int) -> HFBackend:
    """A backend whose model is ``base`` with ``adapter`` merged into its weights."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    b = HFBackend(str(base), batch_size=batch_size, device="cpu")
    tok, _ = b._ensure_loaded()
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), str(adapter))
    b._model = model.merge_and_unload().eval()
    return b


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--adapters", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokens", type=int, help="max new tokens (default: the SP test's)")
    ap.add_argument("--batch-size", type=int, help="default: the policy role's batch_size")
    ap.add_argument("--script-rounds", type=int, default=2)
    ap.add_argument("--merged", action="store_true", help="also merged copies, one at a time")
    args = ap.parse_args()

    params = load_params()
    role = params.shared.llm.roles[params.training.base_role]
    base = repo_path(role.model)
    batch = args.batch_size or role.batch_size
    reqs = requests(params, args.script_rounds)
    if args.tokens:
        reqs = [ChatRequest.of(list(r.messages), GenerationParams(
            **{**r.params.__dict__, "max_new_tokens": args.tokens})) for r in reqs]
    work = Path(tempfile.mkdtemp(prefix="bench-adapters-"))
    adapters = make_adapters(base, args.adapters, work)
    one = [HFBackend(str(base), adapter=str(a), batch_size=batch, device="cpu")
           for a in adapters]
    both = AdapterSet(one)
    ways = {"one adapter at a time": lambda: [b.generate(reqs) for b in one],
            "all adapters batched": lambda: both.generate_parts([reqs] * len(one))}
    if args.merged:
        copies = [merged(base, a, batch) for a in adapters]
        ways["merged copies, one at a time"] = lambda: [b.generate(reqs) for b in copies]
    for b in one:
        b._ensure_loaded()
    tok = one[0]._tok
    lens = sorted(len(tok(b.render(r.messages), add_special_tokens=False)["input_ids"])
                  for r, b in zip(reqs, one))
    print(f"{len(reqs)} prompts ({lens[0]}-{lens[-1]} tokens, median "
          f"{statistics.median(lens):.0f}) x {len(one)} adapters, greedy, "
          f"max_new_tokens {reqs[0].params.max_new_tokens}, batch {batch}", flush=True)
    times: dict[str, list[float]] = {w: [] for w in ways}
    cpu: dict[str, list[float]] = {w: [] for w in ways}
    texts: dict[str, list[list[str]]] = {}
    for rep in range(args.repeats):
        for way, run in ways.items():
            t0, c0 = time.perf_counter(), time.process_time()
            out = run()
            times[way].append(time.perf_counter() - t0)
            cpu[way].append(time.process_time() - c0)
            texts[way] = [[c.text for c in part] for part in out]
            tokens = sum(c.tokens_out for part in out for c in part)
            print(f"  repeat {rep + 1} {way:<30} wall {times[way][-1]:7.1f} s  cpu "
                  f"{cpu[way][-1]:7.1f} s  {tokens} tokens", flush=True)
    ref = "one adapter at a time"
    med = {w: statistics.median(t) for w, t in times.items()}
    for way in ways:
        same = sum(a == b for pa, pb in zip(texts[way], texts[ref]) for a, b in zip(pa, pb))
        ratios = [t / r for t, r in zip(times[way], times[ref])]
        cpu_ratio = statistics.median(t / r for t, r in zip(cpu[way], cpu[ref]))
        each = ", ".join(f"{x:.2f}" for x in ratios)
        print(f"{way:<30} median wall {med[way]:7.1f} s, cpu {statistics.median(cpu[way]):.1f}"
              f" s; ratio vs one at a time: wall {statistics.median(ratios):.2f} (per repeat "
              f"{each}), cpu {cpu_ratio:.2f}; same text {same}/{len(reqs) * len(one)}")


if __name__ == "__main__":
    main()
