"""Benchmark: the cold ``dvc repro`` per stage — wall time, model calls, tokens/s, total.

Without ``--run`` it reads what the last run left in ``reports/NN_name/`` of ``--root``:
``timings.json`` (wall time and steps, written by ``Stage.finish``) when present, else
the wall times older stages put in ``metrics.json``; ``ledger.json`` for model calls,
cache hits, tokens and model seconds. A warm rerun's ledger shows cache hits, not calls:
the cold cost is the one to read.

With ``--run`` it first makes a cold run: ``git clone`` of this checkout's HEAD into a
scratch folder (no LLM caches, no DVC outputs; ``models/`` prepared by its stage),
``dvc repro --force`` there under ``nice``, each stage's start time read from dvc's
"Running stage" lines, and the CPU time of all its processes from ``getrusage``. Then
the table is read from the scratch copy, with the measured per-stage wall times beside
the reports' own.

``--starts FILE --end EPOCH`` reads a run made in place instead (``dvc repro`` in this
checkout, each "Running stage" line of its log stamped with the epoch second it appeared,
one ``<epoch> Running stage '<name>'`` per line): the same record, its ``how`` saying so
and no CPU time (the processes were not this script's children).

A cold run writes what it measured to ``benchmarks/repro_timings.json`` and
``benchmarks/repro_timings.md`` (``--timings-dir`` elsewhere): per dvc stage the wall
seconds and the reports' model calls, the total wall and CPU seconds, and the commit,
date, cores and load average around the run (a busy machine's run says so), and the
disk the clone and the venv hold afterwards (``disk_gib``; ``--disk DIR`` adds it to a
record for a run's checkout ``DIR``). The
Markdown table is what docs include as the cold run's generated table. They sit beside
this script, committed, because they measure ``dvc repro`` rather than being one of its
outputs: ``reports/`` holds only what a stage declares (tests/test_dvc_contract.py), and
``benchmarks/results/`` is ignored by git. A run of one ``--stage`` writes them too,
with ``complete: false``.

``--compare REV`` sets the record committed at git revision ``REV`` beside the current
``repro_timings.json`` (or the one this run just wrote), stage by stage: before, after,
the difference and the ratio, written to ``benchmarks/repro_compare.md`` for the docs.

The utilisation table (``repro_utilisation.json`` and ``.md`` beside the record) sets each
stage's model work against two rates of the machine: GFLOP/s (prompt and generated tokens
at 2N FLOP, trained tokens at 6N, N the model's non-embedding parameters from its config)
against a float32 matrix product's peak on the record's cores, and generated tokens/s
against the embedded model generating in a batch of 16 (one row at a time beside it).
Trained tokens are trl's ``num_tokens`` in the trainer logs ``dvc.lock`` lists as each
stage's outputs (the REM's, which its log lacks, derived from its examples' lengths while
this checkout's data is the one it trained on; else not recorded). ``--run`` measures the
peak before the run and writes the table with the record; ``--utilisation`` writes it for
the record already in ``--timings-dir``, from the trainer logs committed with it (the
checkout's while it is not committed), both rates measured now (``--repeats``: the best
of that many). docs/speed.md says what the count leaves out.

Usage:
  PYTHONPATH=src .venv/bin/python benchmarks/bench_repro.py [--root .]
  PYTHONPATH=src .venv/bin/python benchmarks/bench_repro.py --run [--scratch DIR]
      [--stage notechat] [--timings-dir benchmarks] [--compare a4f554c]
  PYTHONPATH=src .venv/bin/python benchmarks/bench_repro.py --utilisation [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_RUNNING = re.compile(r"Running stage '([^']+)'")


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def _metric_wall_s(metrics: dict) -> float | None:
    """A stage's own wall time from older metrics files (before timings.json)."""
    found = []

    def walk(obj):
        if isinstance(obj, dict):
            for k, v in obj.items():
                if k in ("wall_s", "runtime_s") and isinstance(v, (int, float)):
                    found.append(float(v))
                elif k == "wall_s" and isinstance(v, dict):
                    found.extend(float(x) for x in v.values() if isinstance(x, (int, float)))
                else:
                    walk(v)

    walk(metrics)
    return round(sum(found), 1) if found else None


def stage_rows(root: Path) -> list[dict]:
    """One row per ``reports/NN_name`` folder of ``root``."""
    rows = []
    for folder in sorted((root / "reports").glob("[0-9][0-9]_*")):
        timings = read_json(folder / "timings.json")
        total = read_json(folder / "ledger.json").get("total", {})
        wall = timings.get("wall_s")
        source = "timings.json"
        if wall is None:
            wall, source = _metric_wall_s(read_json(folder / "metrics.json")), "metrics.json"
        tokens, model_s = total.get("tokens_out", 0), total.get("latency_s", 0.0)
        rows.append({"stage": folder.name, "wall_s": wall, "from": source if wall else "-",
                     "calls": total.get("calls", 0), "cache_hits": total.get("cache_hits", 0),
                     "tokens_in": total.get("tokens_in", 0), "tokens_out": tokens,
                     "model_s": round(model_s, 1),
                     "tok_per_s": round(tokens / model_s, 1) if model_s else None,
                     "steps": timings.get("steps_s", {})})
    return rows


def print_table(rows: list[dict], measured: dict[str, float] | None = None) -> None:
    head = (f"{'stage':<16}{'report wall_s':>14}{'calls':>7}{'hits':>6}{'tok_in':>9}"
            f"{'tok_out':>9}{'model_s':>9}{'tok/s':>7}")
    print(head)
    for r in rows:
        wall = f"{r['wall_s']:.1f}" if r["wall_s"] is not None else "-"
        rate = f"{r['tok_per_s']:.1f}" if r["tok_per_s"] is not None else "-"
        print(f"{r['stage']:<16}{wall:>14}{r['calls']:>7}{r['cache_hits']:>6}"
              f"{r['tokens_in']:>9}{r['tokens_out']:>9}{r['model_s']:>9.1f}{rate:>7}")
        for step, s in r["steps"].items():
            print(f"    {step:<28}{s:>8.1f} s")
    known = [r["wall_s"] for r in rows if r["wall_s"] is not None]
    print(f"{'total (reports)':<16}{sum(known):>14.1f}")
    if measured:
        print("\nmeasured by this run (dvc stage: wall s from its start to the next's):")
        for name, s in measured.items():
            print(f"  {name:<36}{s:>8.1f}")
        print(f"  {'total':<36}{sum(measured.values()):>8.1f}")


def scratch_clone(scratch: Path) -> Path:
    """A fresh clone of HEAD: what a reviewer gets. Its ``models/`` is written by the
    pipeline's own ``models`` stage (from the installed model wheels), as on a fresh
    clone; a link to this checkout's folder would not do: dvc refuses an output that
    resolves outside the repository, and the stage would rewrite this checkout's models."""
    if scratch.exists():
        shutil.rmtree(scratch)
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(scratch)],
                   check=True)
    return scratch


def run_repro(root: Path, stage: str | None) -> tuple[dict[str, float], float, float]:
    """``dvc repro --force`` (one stage with its upstream, or all) under nice; returns
    the wall seconds per dvc stage, the total wall and the CPU seconds of its processes."""
    env = dict(os.environ)
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = f"{venv_bin}:{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(root / "src")
    cmd = ["nice", "-n", "10", "dvc", "repro", "--force"] + ([stage] if stage else [])
    starts: list[tuple[str, float]] = []
    t0 = time.perf_counter()
    with subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            m = _RUNNING.search(line)
            if m:
                starts.append((m.group(1), time.perf_counter() - t0))
                print(f"[bench_repro] {starts[-1][1]:8.1f} s  {m.group(1)}", flush=True)
    total = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"dvc repro failed with exit code {proc.returncode}")
    ends = [t for _, t in starts[1:]] + [total]
    per_stage = {name: round(end - start, 1) for (name, start), end in zip(starts, ends)}
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return per_stage, total, ru.ru_utime + ru.ru_stime


def _stage_folder(dvc_stage: str, rows: list[dict]) -> dict | None:
    """The reports row of a dvc stage (``rem`` → ``03_rem``; a matrix cell
    ``annotation_grid@avg-1`` has none of its own)."""
    for r in rows:
        if r["stage"].split("_", 1)[1] == dvc_stage:
            return r
    return None


def timings_record(measured: dict[str, float], total: float, cpu: float, rows: list[dict],
                   meta: dict) -> dict:
    """The machine-readable record of one cold run: per dvc stage its measured wall
    seconds (start to the next stage's start) with the model calls and the stage's own
    step times from its reports, the total, and where and when it ran."""
    stages = []
    for name, wall in measured.items():
        r = _stage_folder(name, rows) or {}
        stages.append({"stage": name, "wall_s": wall, "report": r.get("stage"),
                       "calls": r.get("calls"), "tokens_in": r.get("tokens_in"),
                       "tokens_out": r.get("tokens_out"), "steps_s": r.get("steps", {})})
    return {**meta, "stages": stages, "total_wall_s": round(total, 1),
            "total_wall_min": round(total / 60, 1),
            "cpu_s": round(cpu, 1) if cpu is not None else None}


def timings_markdown(record: dict) -> str:
    """The record as the Markdown table docs include (every number from the record)."""
    lines = [f"Cold `dvc repro` of commit `{record['commit']}` on {record['date']}: "
             f"{record['cores']} cores, load average {record['load_before']:.2f} before and "
             f"{record['load_after']:.2f} after; "
             + ("every stage." if record["complete"] else f"stage `{record['target']}` "
                                                          "and its upstream only."),
             "", "| dvc stage | wall s | min | model calls | tokens in / out |",
             "|---|---:|---:|---:|---|"]
    for st in record["stages"]:
        tokens = (f"{st['tokens_in']:,} / {st['tokens_out']:,}" if st["tokens_in"] is not None
                  else "")
        calls = f"{st['calls']:,}" if st["calls"] is not None else ""
        lines.append(f"| {st['stage']} | {st['wall_s']:,.1f} | {st['wall_s'] / 60:.1f} | "
                     f"{calls} | {tokens} |")
    lines.append(f"| **total** | **{record['total_wall_s']:,.1f}** | "
                 f"**{record['total_wall_min']:.1f}** | | |")
    lines.append("")
    if record.get("cpu_s") is not None:
        lines.append(f"CPU time of all processes: {record['cpu_s']:,.1f} s.")
    lines.append(f"How: {record.get('how', 'dvc repro --force in a fresh clone of HEAD')}.")
    return "\n".join(lines) + "\n"


def write_timings(out_dir: Path, record: dict) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    js, md = out_dir / "repro_timings.json", out_dir / "repro_timings.md"
    js.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    md.write_text(timings_markdown(record), encoding="utf-8")
    return js, md


def record_at(rev: str, rel: str = "benchmarks/repro_timings.json") -> dict:
    """The cold-run record committed at git revision ``rev``."""
    shown = subprocess.run(["git", "show", f"{rev}:{rel}"], cwd=REPO, text=True,
                           capture_output=True)
    if shown.returncode:
        raise SystemExit(f"--compare {rev}: no {rel} at that revision ({shown.stderr.strip()})")
    return json.loads(shown.stdout)


def compare_markdown(before: dict, after: dict) -> str:
    """Two cold-run records stage by stage (every stage either has, in the later run's
    order, then the earlier run's others): wall seconds before and after, the saving,
    the ratio; the totals last."""
    b = {s["stage"]: s["wall_s"] for s in before["stages"]}
    a = {s["stage"]: s["wall_s"] for s in after["stages"]}
    names = list(a) + [n for n in b if n not in a]
    lines = [f"Cold `dvc repro`, commit `{before['commit']}` ({before['date']}) against "
             f"commit `{after['commit']}` ({after['date']}), wall seconds per dvc stage.",
             "", f"| dvc stage | `{before['commit']}` | `{after['commit']}` | saved "
                 "| after / before |",
             "|---|---:|---:|---:|---:|"]

    def cell(x):
        return f"{x:,.1f}" if x is not None else "not run"

    for n in names:
        x, y = b.get(n), a.get(n)
        saved = f"{x - y:,.1f}" if x is not None and y is not None else ""
        ratio = f"{y / x:.2f}" if x and y is not None else ""
        lines.append(f"| {n} | {cell(x)} | {cell(y)} | {saved} | {ratio} |")
    tb, ta = before["total_wall_s"], after["total_wall_s"]
    lines.append(f"| **total** | **{tb:,.1f}** | **{ta:,.1f}** | **{tb - ta:,.1f}** | "
                 f"**{ta / tb:.2f}** |")
    lines.append("")
    lines.append(f"How, before: {before.get('how')}. After: {after.get('how')}.")
    return "\n".join(lines) + "\n"


def run_meta(root: Path, stage: str | None, load_before: float, started: float) -> dict:
    """Where and when a run was made; ``date`` is its start (``started``, epoch s)."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, text=True,
                            capture_output=True, check=True).stdout.strip()
    return {"commit": commit, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
            "cores": os.cpu_count(), "load_before": round(load_before, 2),
            "load_after": round(os.getloadavg()[0], 2), "complete": stage is None,
            "target": stage, "how": "dvc repro --force in a fresh clone of HEAD"}


def folder_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (links not followed; a file seen twice by a hard
    link counted once), as ``du`` counts apparent sizes."""
    seen, total = set(), 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            st = os.lstat(os.path.join(dirpath, name))
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            total += st.st_size
    return total


def disk_usage(root: Path, venv: Path) -> dict[str, float]:
    """GiB a run's checkout holds after the run, per top-level part, and the venv's."""
    gib = 1024 ** 3
    parts = {name: round(folder_bytes(root / name) / gib, 2)
             for name in ("data", "models", "reports", ".dvc", ".git") if (root / name).exists()}
    return {**parts, "checkout": round(folder_bytes(root) / gib, 2),
            "venv": round(folder_bytes(venv) / gib, 2)}


def starts_of(path: Path) -> list[tuple[str, float]]:
    """``(stage, epoch s)`` from a stamped log (``<epoch> Running stage '<name>'``)."""
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = _RUNNING.search(line)
        if not m:
            raise SystemExit(f"{path}:{n}: not '<epoch> Running stage <name>': {line!r}")
        out.append((m.group(1), float(line.split()[0])))
    return out


def in_place(starts: list[tuple[str, float]], end: float) -> tuple[dict[str, float], float]:
    """Per-stage wall seconds (a stage's start to the next's, the last to ``end``) and
    the total, from a stamped in-place run."""
    ends = [t for _, t in starts[1:]] + [end]
    per_stage = {name: round(e - t, 1) for (name, t), e in zip(starts, ends)}
    return per_stage, end - starts[0][1]


# -- utilisation: each stage's model work against the machine's measured rates -------------
FLOP_PER_TOKEN = {"prompt": 2, "generated": 2, "trained": 6}  # × N (forward 2N, backward 4N)
PEAK_SIZES = (1024, 1536, 2048)   # float32 matrix products n × n × n
BATCH, BATCH_TOKENS = 16, 64      # the batched generation rate: 16 rows, 64 new tokens each
GEN_BATCHES = (BATCH, 1)          # generation rates measured: batched and one row at a time
MODEL = Path("models/smollm2-135m-instruct")


def non_embedding_params(model_dir: Path) -> int:
    """N: the model's parameters less its token embedding (and the LM head tied to it), as
    transformers counts them; built from ``config.json`` on the meta device, no weights."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    return model.num_parameters(exclude_embeddings=True)


def matmul_peak(threads: int, repeats: int = 3) -> dict:
    """The machine's float32 matrix-product rate on ``threads`` torch threads: for each
    size the best of ``repeats`` timed products (after one untimed), the best size's GFLOP/s."""
    import torch

    torch.set_num_threads(threads)
    by_n = {}
    for n in PEAK_SIZES:
        product = partial(torch.mm, torch.randn(n, n), torch.randn(n, n))
        product()
        best = min(_timed(product) for _ in range(repeats))
        by_n[str(n)] = round(2 * n ** 3 / best / 1e9, 1)
    return {"gflops": max(by_n.values()), "gflops_by_n": by_n}


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def generation_timer(model_dir: Path, threads: int):
    """A function that times the embedded model's greedy generation of one batch of each
    size in ``GEN_BATCHES`` (bench_backends.py's short patient questions), each row made to
    generate exactly ``BATCH_TOKENS`` tokens (the short prompts' prefill included), and
    returns tokens/s by batch size; the model is loaded and each batch run untimed first."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    sys.path.insert(0, str(Path(__file__).parent))
    from bench_backends import QUESTIONS

    torch.set_num_threads(threads)
    tok = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    texts = [tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                     add_generation_prompt=True)
             for q in (QUESTIONS * 2)[:max(GEN_BATCHES)]]
    runs = {}
    for size in GEN_BATCHES:
        enc = tok(texts[:size], return_tensors="pt", padding=True, add_special_tokens=False)
        runs[size] = partial(model.generate, **enc, do_sample=False,
                             min_new_tokens=BATCH_TOKENS, max_new_tokens=BATCH_TOKENS,
                             pad_token_id=tok.pad_token_id)

    def timed(size: int) -> float:
        with torch.inference_mode():
            return _timed(runs[size])

    for size in GEN_BATCHES:
        timed(size)
    return lambda: {str(size): round(size * BATCH_TOKENS / timed(size), 1)
                    for size in GEN_BATCHES}


def machine_rates(model_dir: Path | None, threads: int, attempts: int,
                  gap_s: float = 0.0) -> dict:
    """The peak and (with a ``model_dir``) the generation rates, measured ``attempts`` times
    ``gap_s`` seconds apart, each attempt with its time and load average; the best of each
    rate is kept (on a shared machine every attempt is low, and the loads say so)."""
    import torch

    generate = generation_timer(model_dir, threads) if model_dir else None
    runs = []
    for i in range(attempts):
        if i:
            time.sleep(gap_s)
        run = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "load": round(os.getloadavg()[0], 2), "peak": matmul_peak(threads)}
        if generate:
            run["generation_tokens_per_s"] = generate()
        runs.append(run)
        print(f"[bench_repro] rates, attempt {i + 1}: {run}", flush=True)
    best = max(runs, key=lambda r: r["peak"]["gflops"])
    out = {"threads": threads, "torch": torch.__version__, "attempts": runs,
           "peak": best["peak"]}
    if generate:
        out["batched"] = batched_summary([r["generation_tokens_per_s"] for r in runs])
    return out


def batched_summary(attempts: list[dict[str, float]]) -> dict:
    """The best generation rate of each batch size over ``attempts``; ``tokens_per_s`` is
    the batched one (``BATCH`` rows), the one the stages are set against."""
    best = {size: max(a[size] for a in attempts) for size in attempts[0]}
    return {"tokens_per_s": best[str(BATCH)], "batch": BATCH, "new_tokens": BATCH_TOKENS,
            "tokens_per_s_by_batch": best}


def reader(root: Path, rev: str | None):
    """A function giving a file of ``root`` by its relative path, as text (None when
    absent): the working tree's, or with ``rev`` the one committed at that git revision."""
    def read(rel: str) -> str | None:
        if rev is None:
            path = root / rel
            return path.read_text(encoding="utf-8") if path.exists() else None
        shown = subprocess.run(["git", "show", f"{rev}:{rel}"], cwd=root, text=True,
                               capture_output=True)
        return None if shown.returncode else shown.stdout
    return read


def _json(read, rel: str):
    text = read(rel)
    return json.loads(text) if text else {}


def lock_outs(read) -> dict[str, list[str]]:
    """Each dvc stage's outputs as ``dvc.lock`` records them (matrix cells expanded)."""
    import yaml

    lock = yaml.safe_load(read("dvc.lock") or "") or {}
    return {name: [o["path"] for o in st.get("outs", [])]
            for name, st in lock.get("stages", {}).items()}


def trainer_tokens(read, outs: list[str]) -> tuple[int, str] | None:
    """Tokens a stage's trainer processed, from its ``log_history.json`` (trl's
    ``num_tokens`` at the last step: the non-padding tokens of every batch, a DPO pair's
    prompt counted with each answer) and how they were read; 0 for a run that reused
    another's adapter (its ``timings.json`` has no ``train`` step); None: no trainer log."""
    log = next((o for o in outs if o.endswith("log_history.json")), None)
    if log is None:
        return None
    steps = _json(read, str(Path(log).parent / "timings.json")).get("steps_s", {})
    if steps and "train" not in steps:
        return 0, f"{log}: reused another run's adapter ({', '.join(steps)})"
    counts = [r["num_tokens"] for r in _json(read, log) if "num_tokens" in r]
    if not counts:
        raise SystemExit(f"{log}: no num_tokens in any logged step")
    return int(counts[-1]), f"{log}: num_tokens at the last step"


def rem_trained_tokens(root: Path, read) -> tuple[int | None, str]:
    """The REM's training tokens, which stage 03's loss record does not log: the tokens of
    each training example in the model's chat template (prompt and answer, as the stage
    measures them to drop the too long; the ``rem.train.max_rows`` rows the stage trains on),
    summed, times the examples the trainer saw per example (the epochs; fewer when the step
    cap cut them). Derived from ``root``'s data and params, so only when the run's
    ``metrics.json`` (``read``) counts as many training examples as they give; else None,
    not recorded."""
    from transformers import AutoTokenizer

    from medpref.finetune.hardware import load_hardware
    from medpref.finetune.sft import drop_too_long, token_length
    from medpref.params import load_params, repo_path
    from medpref.rem import build_rem as b03
    from medpref.rem.eval_sets import stratified_subset

    params = load_params(root / "params.yaml")
    p, t = params.rem, params.rem.train
    inputs = b03.load_inputs(p, repo_path(params.shared.split))
    rows = stratified_subset(inputs.split("train"), t.max_rows, params.shared.seed)  # as trained
    examples = b03.sft_examples(rows, inputs.flowchart, p.prompt, t.rule_detail,
                                t.answer_order)
    tok = AutoTokenizer.from_pretrained(repo_path(params.shared.llm.roles[p.role].model))
    kept, _ = drop_too_long(tok, examples, t.recipe.max_length, ("completion",))
    fit = _json(read, "reports/03_rem/metrics.json").get("training", {})
    if fit.get("n_train") != len(kept):
        return None, (f"not recorded: the loss record has no token counts, and the run's "
                      f"{fit.get('n_train')} training examples are not the {len(kept)} this "
                      "checkout's data gives")
    hw = load_hardware(t.hardware).rem
    seen = min(fit["steps"] * hw.per_device_train_batch_size * hw.gradient_accumulation_steps,
               len(kept) * t.recipe.num_train_epochs)
    total = sum(token_length(tok, ex["prompt"] + ex["completion"]) for ex in kept)
    return round(total * seen / len(kept)), (
        f"derived: {len(kept)} training examples, {total:,} tokens in the chat template, "
        f"seen {seen / len(kept):g} times ({fit['steps']} steps of "
        f"{hw.per_device_train_batch_size} × {hw.gradient_accumulation_steps})")


def trained_by_stage(root: Path, stages: list[str],
                     rev: str | None = None) -> dict[str, tuple[int | None, str]]:
    """Training tokens of every stage that trains, read from the logs ``dvc.lock`` names
    as its outputs, in ``root``'s working tree or at git revision ``rev`` (the REM's
    derived: its loss record has no token counts)."""
    read = reader(root, rev)
    outs, found = lock_outs(read), {}
    for name in stages:
        got = trainer_tokens(read, outs.get(name, []))
        if got is None and any(o.endswith("records/training_loss.jsonl")
                               for o in outs.get(name, [])):
            got = rem_trained_tokens(root, read)
        if got is not None:
            found[name] = got
    return found


def stage_work(st: dict, trained: int | None, n_params: int) -> dict:
    """A stage's model FLOP: prompt and generated tokens at 2N each, trained tokens at
    6N (None: not recorded, left out); its GFLOP/s over the stage's wall time and its
    generated tokens/s."""
    tin, tout = st.get("tokens_in") or 0, st.get("tokens_out") or 0
    flop = n_params * (FLOP_PER_TOKEN["prompt"] * tin + FLOP_PER_TOKEN["generated"] * tout
                       + FLOP_PER_TOKEN["trained"] * (trained or 0))
    wall = st["wall_s"]
    return {"stage": st["stage"], "wall_s": wall, "tokens_in": tin, "tokens_out": tout,
            "tokens_trained": trained, "tflop": round(flop / 1e12, 2),
            "gflops": round(flop / wall / 1e9, 1) if flop else None,
            "gen_tokens_per_s": round(tout / wall, 1) if tout else None}


def utilisation_record(timings: dict, trained: dict[str, tuple[int | None, str]],
                       n_params: int,
                       rates: dict, logs: str) -> dict:
    """Every stage of a cold-run record with its model work, GFLOP/s and share of the
    measured peak, generated tokens/s and share of the batched rate; the whole run too."""
    peak, batched = rates["peak"]["gflops"], rates["batched"]["tokens_per_s"]
    rows = [stage_work(st, trained.get(st["stage"], (0, ""))[0], n_params)
            for st in timings["stages"]]
    total = stage_work({"stage": "total", "wall_s": timings["total_wall_s"],
                        "tokens_in": sum(r["tokens_in"] for r in rows),
                        "tokens_out": sum(r["tokens_out"] for r in rows)},
                       sum(r["tokens_trained"] or 0 for r in rows), n_params)
    for r in [*rows, total]:
        r["peak_pct"] = round(100 * r["gflops"] / peak, 1) if r["gflops"] else None
        r["batched_pct"] = (round(100 * r["gen_tokens_per_s"] / batched, 1)
                            if r["gen_tokens_per_s"] else None)
    return {"run": {k: timings.get(k) for k in ("commit", "date", "cores", "how")},
            "logs": logs, "n_params": n_params, "flop_per_token": FLOP_PER_TOKEN,
            "rates": rates, "trained_from": {k: v[1] for k, v in trained.items()},
            "stages": rows, "total": total}


def _num(x, fmt: str = ",.1f") -> str:
    return "" if not x else format(x, fmt)


def utilisation_markdown(rec: dict) -> str:
    """The utilisation record as the Markdown table docs include."""
    run, rates = rec["run"], rec["rates"]
    peak, bat = rates["peak"], rates["batched"]
    runs = rates["attempts"]
    loads = sorted(r["load"] for r in runs)
    lines = [f"Model work of the cold run of commit `{run['commit']}` ({run['date']}) per dvc "
             f"stage, against this machine's rates on {rates['threads']} threads, the best of "
             f"{len(runs)} attempts from {runs[0]['date']} to {runs[-1]['date']} (load "
             f"average {loads[0]:.2f} to {loads[-1]:.2f}): matrix-product peak "
             f"{peak['gflops']:,.1f} GFLOP/s (float32, n = {', '.join(peak['gflops_by_n'])}), "
             f"batched generation {bat['tokens_per_s']:,.1f} tokens/s (batch {bat['batch']}, "
             f"{bat['new_tokens']} new tokens each; one row at a time "
             f"{bat['tokens_per_s_by_batch']['1']:,.1f} tokens/s), torch {rates['torch']}. "
             f"N = {rec['n_params']:,} non-embedding "
             f"parameters; a prompt or generated token counts "
             f"{rec['flop_per_token']['prompt']}N FLOP, a trained token "
             f"{rec['flop_per_token']['trained']}N.",
             "", "| dvc stage | wall s | prompt tokens | generated tokens | trained tokens | "
             "TFLOP | GFLOP/s | % of peak | generated tokens/s | % of batched |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in [*rec["stages"], rec["total"]]:
        name = f"**{r['stage']}**" if r is rec["total"] else r["stage"]
        trained = ("not recorded" if r["tokens_trained"] is None
                   else _num(r["tokens_trained"], ","))
        lines.append(f"| {name} | {r['wall_s']:,.1f} | {_num(r['tokens_in'], ',')} | "
                     f"{_num(r['tokens_out'], ',')} | {trained} | "
                     f"{_num(r['tflop'], ',.2f')} | {_num(r['gflops'])} | "
                     f"{_num(r['peak_pct'])} | {_num(r['gen_tokens_per_s'])} | "
                     f"{_num(r['batched_pct'])} |")
    lines += ["", f"Prompt and generated tokens: the run's ledgers; trained tokens: the "
              f"trainer logs of {rec['logs']}:", ""]
    lines += [f"- {stage}: {how}" for stage, how in rec["trained_from"].items()]
    if any(r["tokens_trained"] is None for r in rec["stages"]):
        lines += ["", "Trained tokens not recorded count for nothing in their stage's "
                  "FLOP and the total's: those rows understate the work done."]
    if loads[0] >= rates["threads"]:
        lines += ["", f"**Every attempt ran under a load average of at least {loads[0]:.2f} "
                  f"on {rates['threads']} threads:** the rates are far below this machine's "
                  "idle ones, and the shares of them above are too high by as much; rerun "
                  "`bench_repro.py --utilisation` on an idle machine."]
    lines += ["", "Not counted: attention over the context, the LM head, DPO's reference "
              "pass, the MiniLM encoder (the fitted REM scorers' and iMAP's embeddings, "
              "outside the ledgers). A LoRA run takes no gradient of the frozen weights, so "
              "a trained token costs nearer 4N than 6N: the training rows overstate the work "
              "done (docs/speed.md)."]
    return "\n".join(lines) + "\n"


def write_utilisation(out_dir: Path, rec: dict) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    js, md = out_dir / "repro_utilisation.json", out_dir / "repro_utilisation.md"
    js.write_text(json.dumps(rec, indent=2) + "\n", encoding="utf-8")
    md.write_text(utilisation_markdown(rec), encoding="utf-8")
    return js, md


def utilisation(root: Path, timings: dict, rates: dict, out_dir: Path, logs: str,
                rev: str | None = None) -> None:
    """Build and write the utilisation table of a cold-run record, its trained tokens read
    from ``root``'s trainer logs (at git revision ``rev`` if given; ``logs`` says which
    run wrote them) and N from ``root``'s model config."""
    trained = trained_by_stage(root, [s["stage"] for s in timings["stages"]], rev)
    rec = utilisation_record(timings, trained, non_embedding_params(root / MODEL), rates, logs)
    for path in write_utilisation(out_dir, rec):
        print(f"wrote {path}")
    print(utilisation_markdown(rec))


def record_revision(path: Path) -> str | None:
    """The commit that last changed the record at ``path``: the one that holds the reports
    of the run it records, committed with it. None when the record in the working tree is
    not committed as it stands (a run just made: its reports are the checkout's)."""
    git = partial(subprocess.run, cwd=path.parent, text=True, capture_output=True, check=True)
    if git(["git", "status", "--porcelain", "--", path.name]).stdout.strip():
        return None
    return git(["git", "log", "-1", "--format=%h", "--", path.name]).stdout.strip() or None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=REPO, help="checkout whose reports to read")
    ap.add_argument("--run", action="store_true", help="make a cold run in a scratch clone")
    ap.add_argument("--scratch", type=Path, help="folder for the clone (default: a temp dir)")
    ap.add_argument("--stage", help="with --run: this dvc stage and its upstream only")
    ap.add_argument("--json", type=Path, help="also write the numbers to this JSON file")
    ap.add_argument("--timings-dir", type=Path, default=REPO / "benchmarks",
                    help="with --run: where repro_timings.json/.md go (default: benchmarks/)")
    ap.add_argument("--starts", type=Path, help="a run made in place: its stamped stage starts")
    ap.add_argument("--end", type=float, help="with --starts: the epoch second the run ended")
    ap.add_argument("--how", default="dvc repro in the working checkout (no LLM caches)",
                    help="with --starts: how the run was made, for the record")
    ap.add_argument("--load-before", type=float, default=float("nan"),
                    help="with --starts: the load average before the run")
    ap.add_argument("--compare", metavar="REV",
                    help="set the record committed at REV beside the current one "
                         "(writes repro_compare.md beside repro_timings.json)")
    ap.add_argument("--utilisation", action="store_true",
                    help="the utilisation table of the record in --timings-dir (its "
                         "repro_timings.json), the machine's rates measured now")
    ap.add_argument("--repeats", type=int, default=3,
                    help="attempts at the peak and the batched rate (the best is kept)")
    ap.add_argument("--disk", type=Path, metavar="DIR",
                    help="add the disk a run's checkout DIR holds (and this venv's) to the "
                         "record in --timings-dir (--run does it for its scratch clone)")
    ap.add_argument("--gap", type=float, default=0.0,
                    help="with --utilisation: seconds between two attempts (a shared "
                         "machine's quieter moment)")
    args = ap.parse_args()

    measured, total, cpu = None, None, None
    root = args.root
    if args.run:
        root = scratch_clone(args.scratch or Path(tempfile.mkdtemp(prefix="medpref-repro-")))
        print(f"cold run in {root}", flush=True)
        weights = (REPO / MODEL / "model.safetensors").exists()
        rates = machine_rates(REPO / MODEL if weights else None, os.cpu_count(), args.repeats)
        load_before, started = os.getloadavg()[0], time.time()
        measured, total, cpu = run_repro(root, args.stage)
        if not weights:  # a fresh checkout: the run's own models stage wrote the weights
            generate = generation_timer(root / MODEL, os.cpu_count())
            rates["batched"] = batched_summary([generate() for _ in range(args.repeats)])
    if args.starts:
        if args.end is None:
            raise SystemExit("--starts needs --end (the epoch second the run ended)")
        measured, total = in_place(starts_of(args.starts), args.end)
        meta = {**run_meta(root, None, args.load_before, starts_of(args.starts)[0][1]),
                "how": args.how}
    rows = stage_rows(root)
    print_table(rows, measured)
    if total is not None:
        print(f"\ncold dvc repro: wall {total:.1f} s ({total / 60:.1f} min), "
              + (f"CPU {cpu:.1f} s, " if cpu is not None else "") + f"cores {os.cpu_count()}")
        meta = meta if args.starts else run_meta(root, args.stage, load_before, started)
        record = timings_record(measured, total, cpu, rows, meta)
        if args.run:
            record["disk_gib"] = disk_usage(root, Path(sys.executable).parents[1])
        for path in write_timings(args.timings_dir, record):
            print(f"wrote {path}")
        if args.run:
            utilisation(root, record, rates, args.timings_dir, "this run")
    if args.disk:
        path = args.timings_dir / "repro_timings.json"
        record = read_json(path)
        if not record:
            raise SystemExit(f"--disk: no {path}")
        record["disk_gib"] = disk_usage(args.disk, Path(sys.executable).parents[1])
        path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        print(f"disk (GiB): {record['disk_gib']}; wrote {path}")
    if args.utilisation:
        record = read_json(args.timings_dir / "repro_timings.json")
        if not record:
            raise SystemExit(f"--utilisation: no {args.timings_dir / 'repro_timings.json'}")
        rates = machine_rates(root / MODEL, record["cores"], args.repeats, args.gap)
        rev = record_revision(args.timings_dir / "repro_timings.json")
        logs = (f"commit `{rev}`, where the record was committed" if rev
                else "the checkout's reports/ (the record is not committed)")
        utilisation(root, record, rates, args.timings_dir, logs, rev)
    if args.compare:
        current = args.timings_dir / "repro_timings.json"
        if not current.exists():
            raise SystemExit(f"--compare: {current} does not exist; make a run first")
        table = compare_markdown(record_at(args.compare), read_json(current))
        out = args.timings_dir / "repro_compare.md"
        out.write_text(table, encoding="utf-8")
        print(f"\n{table}wrote {out}")
    if args.json:
        args.json.write_text(json.dumps({"root": str(root), "stages": rows,
                                         "measured_s": measured, "total_wall_s": total,
                                         "cpu_s": cpu}, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
