"""bench_repro's record of a cold run (benchmarks/bench_repro.py): the per-stage wall
seconds it measured, joined to each stage's reports, as JSON and as the Markdown table
the docs include."""

from __future__ import annotations

import json

from medpref import REPO_ROOT
from script_module import script_module


def bench():
    return script_module("benchmarks/bench_repro.py")


def test_a_cold_run_is_written_per_stage_with_its_total(tmp_path):
    b = bench()
    rem = tmp_path / "reports" / "03_rem"
    rem.mkdir(parents=True)
    (rem / "timings.json").write_text(json.dumps({"wall_s": 900.0, "steps_s": {"train": 800.0}}))
    (rem / "ledger.json").write_text(json.dumps({"total": {
        "calls": 296, "cache_hits": 0, "tokens_in": 445000, "tokens_out": 5000,
        "latency_s": 60.0}}))
    rows = b.stage_rows(tmp_path)
    measured = {"rem": 950.5, "annotation_grid@avg-1": 30.0}
    meta = {"commit": "abc1234", "date": "2026-01-01 00:00 UTC", "cores": 2,
            "load_before": 0.1, "load_after": 1.9, "complete": True, "target": None}
    record = b.timings_record(measured, 980.5, 1900.0, rows, meta)
    assert [s["stage"] for s in record["stages"]] == ["rem", "annotation_grid@avg-1"]
    rem_row, grid_row = record["stages"]
    assert (rem_row["wall_s"], rem_row["report"], rem_row["calls"]) == (950.5, "03_rem", 296)
    assert rem_row["steps_s"] == {"train": 800.0}
    assert grid_row["report"] is None and grid_row["calls"] is None
    assert (record["total_wall_s"], record["total_wall_min"], record["cpu_s"]) == (
        980.5, 16.3, 1900.0)
    js, md = b.write_timings(tmp_path / "out", record)
    assert json.loads(js.read_text()) == record
    table = md.read_text()
    assert "commit `abc1234`" in table and "load average 0.10 before and 1.90 after" in table
    assert "| rem | 950.5 | 15.8 | 296 | 445,000 / 5,000 |" in table
    assert "| annotation_grid@avg-1 | 30.0 | 0.5 |  |  |" in table
    assert "| **total** | **980.5** | **16.3** | | |" in table


def test_a_run_made_in_place_is_read_from_its_stamped_stage_starts(tmp_path):
    """``--starts``: each stage from its start to the next one's, the last to ``--end``; a
    line that is not a stamped stage start is an error naming file and line."""
    import pytest

    b = bench()
    log = tmp_path / "starts.log"
    log.write_text("1000 Running stage 'sampling'\n1010.5 Running stage 'rem'\n"
                   "1910 Running stage 'tables'\n")
    per_stage, total = b.in_place(b.starts_of(log), 1930.0)
    assert per_stage == {"sampling": 10.5, "rem": 899.5, "tables": 20.0}
    assert total == 930.0
    record = b.timings_record(per_stage, total, None, [], {
        "commit": "abc1234", "date": "2026-01-01 00:00 UTC", "cores": 2, "load_before": 1.0,
        "load_after": 2.0, "complete": True, "target": None, "how": "in place"})
    assert record["cpu_s"] is None
    table = b.timings_markdown(record)
    assert "CPU time" not in table and "How: in place." in table
    log.write_text("1000 Running stage 'sampling'\nsomething else\n")
    with pytest.raises(SystemExit, match="starts.log:2"):
        b.starts_of(log)


def test_two_runs_are_set_side_by_side_stage_by_stage():
    """``--compare``: every stage of either run, the later run's order first, with the
    saving and the ratio; a stage one run lacks says so instead of a number."""
    b = bench()
    before = {"commit": "aaa1111", "date": "d1", "how": "in place", "total_wall_s": 1000.0,
              "stages": [{"stage": "rem", "wall_s": 600.0}, {"stage": "old", "wall_s": 400.0}]}
    after = {"commit": "bbb2222", "date": "d2", "how": "fresh clone", "total_wall_s": 500.0,
             "stages": [{"stage": "models", "wall_s": 20.0}, {"stage": "rem", "wall_s": 480.0}]}
    table = b.compare_markdown(before, after).splitlines()
    rows = [line for line in table if line.startswith("| ") and "---" not in line][1:]
    assert rows == ["| models | not run | 20.0 |  |  |",
                    "| rem | 600.0 | 480.0 | 120.0 | 0.80 |",
                    "| old | 400.0 | not run |  |  |",
                    "| **total** | **1,000.0** | **500.0** | **500.0** | **0.50** |"]
    assert "commit `aaa1111` (d1) against commit `bbb2222` (d2)" in table[0]
    assert table[-1] == "How, before: in place. After: fresh clone."


def test_a_comparison_with_a_revision_that_has_no_record_names_it():
    import pytest

    b = bench()
    with pytest.raises(SystemExit, match="--compare 0000000: no benchmarks/repro_timings.json"):
        b.record_at("0000000")


def test_a_run_is_dated_by_its_start():
    """The record's date is when the run began, not when its record was written."""
    meta = bench().run_meta(REPO_ROOT, None, 0.5, 0.0)
    assert meta["date"] == "1970-01-01 00:00 UTC" and meta["complete"] is True


# -- the utilisation table (no model is loaded: a fake record, fake rates) -----------------
PEAK = {"gflops": 100.0, "gflops_by_n": {"1024": 90.0, "2048": 100.0}}
RATES = {"threads": 2, "torch": "2.9.0+cpu", "peak": PEAK,
         "attempts": [{"date": "2026-01-01 01:00 UTC", "load": 3.5, "peak": PEAK},
                      {"date": "2026-01-01 01:10 UTC", "load": 0.5, "peak": PEAK}],
         "batched": {"tokens_per_s": 50.0, "batch": 16, "new_tokens": 64,
                     "tokens_per_s_by_batch": {"16": 50.0, "1": 12.5}}}
TIMINGS = {"commit": "abc1234", "date": "2026-01-01 00:00 UTC", "cores": 2, "how": "fresh",
           "total_wall_s": 1000.0,
           "stages": [{"stage": "models", "wall_s": 10.0, "tokens_in": None, "tokens_out": None},
                      {"stage": "sampling", "wall_s": 400.0, "tokens_in": 9000,
                       "tokens_out": 1000},
                      {"stage": "training_sft", "wall_s": 500.0, "tokens_in": None,
                       "tokens_out": None},
                      {"stage": "tables", "wall_s": 90.0, "tokens_in": 0, "tokens_out": 0}]}


def test_model_work_is_two_n_per_read_or_generated_token_and_six_n_per_trained_one():
    """By hand, N = 1e8: sampling reads 9,000 and writes 1,000 tokens = 2e12 FLOP in 400 s
    = 5 GFLOP/s = 5 % of a 100 GFLOP/s peak, 2.5 tokens/s = 5 % of 50; the SFT trains
    10,000 tokens = 6e12 FLOP in 500 s = 12 GFLOP/s; the run 8e12 in 1,000 s = 8 GFLOP/s.
    Stage 04 of the issue: 516,766 prompt tokens of the 135M model in 749 s = 146.5."""
    b = bench()
    rec = b.utilisation_record(TIMINGS, {"training_sft": (10_000, "log")}, 100_000_000, RATES,
                               "commit `abc1234`")
    rows = {r["stage"]: r for r in rec["stages"]}
    s = rows["sampling"]
    assert (s["tflop"], s["gflops"], s["peak_pct"]) == (2.0, 5.0, 5.0)
    assert (s["gen_tokens_per_s"], s["batched_pct"]) == (2.5, 5.0)
    t = rows["training_sft"]
    assert (t["tokens_trained"], t["tflop"], t["gflops"], t["peak_pct"]) == (10_000, 6.0, 12.0,
                                                                           12.0)
    assert t["gen_tokens_per_s"] is None and t["batched_pct"] is None
    total = rec["total"]
    assert (total["tflop"], total["gflops"], total["wall_s"]) == (8.0, 8.0, 1000.0)
    assert (total["gen_tokens_per_s"], total["batched_pct"]) == (1.0, 2.0)
    big = b.stage_work({"stage": "x", "wall_s": 749.0, "tokens_in": 516_766, "tokens_out": 0},
                       0, 106_203_456)
    assert big["gflops"] == 146.5 and big["gen_tokens_per_s"] is None


def test_stages_without_model_work_have_empty_cells():
    b = bench()
    rec = b.utilisation_record(TIMINGS, {}, 1_000_000, RATES, "commit `abc1234`")
    rows = {r["stage"]: r for r in rec["stages"]}
    for name in ("models", "tables", "training_sft"):
        r = rows[name]
        assert (r["tflop"], r["gflops"], r["peak_pct"], r["batched_pct"]) == (0, None, None,
                                                                               None)
    table = b.utilisation_markdown(rec)
    assert "| models | 10.0 |  |  |  |  |  |  |  |  |" in table
    assert "| tables | 90.0 |  |  |  |  |  |  |  |  |" in table


def test_the_table_has_its_columns_rates_and_sources(tmp_path):
    b = bench()
    rec = b.utilisation_record(TIMINGS, {"training_sft": (10_000, "sft log: num_tokens")},
                               100_000_000, RATES, "commit `abc1234`")
    js, md = b.write_utilisation(tmp_path, rec)
    assert json.loads(js.read_text()) == rec
    lines = md.read_text().splitlines()
    assert lines[2] == ("| dvc stage | wall s | prompt tokens | generated tokens | trained tokens "
                        "| TFLOP | GFLOP/s | % of peak | generated tokens/s | % of batched |")
    assert "| sampling | 400.0 | 9,000 | 1,000 |  | 2.00 | 5.0 | 5.0 | 2.5 | 5.0 |" in lines
    assert "| training_sft | 500.0 |  |  | 10,000 | 6.00 | 12.0 | 12.0 |  |  |" in lines
    assert "| **total** | 1,000.0 | 9,000 | 1,000 | 10,000 | 8.00 | 8.0 | 8.0 | 1.0 | 2.0 |" \
        in lines
    head = lines[0]
    assert "commit `abc1234`" in head and "on 2 threads, the best of 2 attempts from " \
        "2026-01-01 01:00 UTC to 2026-01-01 01:10 UTC (load average 0.50 to 3.50)" in head
    assert "peak 100.0 GFLOP/s (float32, n = 1024, 2048)" in head
    assert ("batched generation 50.0 tokens/s (batch 16, 64 new tokens each; one row at a "
            "time 12.5 tokens/s), torch 2.9.0+cpu") in head
    assert "N = 100,000,000 non-embedding parameters" in head
    assert "- training_sft: sft log: num_tokens" in lines
    assert not any("Every attempt ran under a load" in line for line in lines)
    assert not any("not recorded" in line for line in lines)


def test_a_training_stage_whose_tokens_are_not_recorded_says_so_and_counts_its_reading():
    """The REM's trained tokens unknown (None): its cell says so, its FLOP are its reading
    and writing only (N = 1e8: 9,000 + 1,000 tokens = 2e12 FLOP in 400 s = 5 GFLOP/s), and
    the total counts the SFT's 10,000 trained tokens alone (2e12 + 6e12 in 1,000 s)."""
    b = bench()
    timings = {**TIMINGS, "stages": [{**TIMINGS["stages"][1], "stage": "rem"},
                                     *TIMINGS["stages"][2:]]}
    rec = b.utilisation_record(timings, {"rem": (None, "not recorded: no counts"),
                                         "training_sft": (10_000, "log")},
                               100_000_000, RATES, "commit `abc1234`")
    rem = rec["stages"][0]
    assert (rem["tokens_trained"], rem["tflop"], rem["gflops"]) == (None, 2.0, 5.0)
    assert (rec["total"]["tokens_trained"], rec["total"]["tflop"]) == (10_000, 8.0)
    lines = b.utilisation_markdown(rec).splitlines()
    assert "| rem | 400.0 | 9,000 | 1,000 | not recorded | 2.00 | 5.0 | 5.0 | 2.5 | 5.0 |" \
        in lines
    assert "- rem: not recorded: no counts" in lines
    assert any(line.startswith("Trained tokens not recorded count for nothing") for line in lines)


def test_rates_measured_on_a_busy_machine_are_flagged():
    """When even the quietest attempt ran with more runnable work than threads, the table
    says its rates are low and its shares too high."""
    b = bench()
    busy = {**RATES, "attempts": [{**a, "load": a["load"] + 2.0} for a in RATES["attempts"]]}
    table = b.utilisation_markdown(b.utilisation_record(TIMINGS, {}, 100_000_000, busy, "x"))
    assert "**Every attempt ran under a load average of at least 2.50 on 2 threads:**" in table


def test_n_is_the_parameters_less_the_tied_embedding_counted_by_hand(tmp_path):
    """A two-layer Llama built from its config: per layer q, o (8 × 8 each), k, v (8 × 4
    each: 1 of 2 heads' width), gate, up, down (8 × 16 each) and two norms (8 each); a
    final norm; the 50 × 8 embedding (its tied head) left out."""
    from transformers import LlamaConfig

    LlamaConfig(hidden_size=8, intermediate_size=16, num_hidden_layers=2,
                num_attention_heads=2, num_key_value_heads=1, vocab_size=50,
                tie_word_embeddings=True).save_pretrained(tmp_path)
    per_layer = 2 * 8 * 8 + 2 * 8 * 4 + 3 * 8 * 16 + 2 * 8
    assert bench().non_embedding_params(tmp_path) == 2 * per_layer + 8


def test_trained_tokens_come_from_the_trainer_log_and_a_reused_run_trained_none(tmp_path):
    """The last step's num_tokens of the log dvc.lock lists as the stage's output; a run
    whose timings have no train step reused an adapter; a log without counts is an error."""
    import pytest
    import yaml

    b = bench()
    for name, steps in (("a", {"load": 0.1, "train": 9.0}), ("b", {"load": 0.1, "reuse": 1.0})):
        d = tmp_path / "reports" / name
        d.mkdir(parents=True)
        (d / "log_history.json").write_text(json.dumps(
            [{"step": 1, "num_tokens": 300.0}, {"step": 2, "num_tokens": 650.0},
             {"step": 2, "train_runtime": 9.0}]))
        (d / "timings.json").write_text(json.dumps({"steps_s": steps}))
    lock = {"stages": {s: {"outs": [{"path": f"reports/{s}/log_history.json"},
                                    {"path": f"reports/{s}/timings.json"}]} for s in "ab"}}
    lock["stages"]["plain"] = {"outs": [{"path": "reports/plain/x.csv"}]}
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(lock))
    found = b.trained_by_stage(tmp_path, ["a", "b", "plain", "not_in_lock"])
    assert found["a"][0] == 650 and found["b"][0] == 0 and "reused" in found["b"][1]
    assert set(found) == {"a", "b"}
    (tmp_path / "reports/a/log_history.json").write_text(json.dumps([{"step": 1}]))
    with pytest.raises(SystemExit, match="log_history.json: no num_tokens"):
        b.trained_by_stage(tmp_path, ["a"])


def test_trained_tokens_are_read_at_the_commit_that_holds_the_record(tmp_path):
    """A record committed with its run's trainer log: a later run's log in the working tree
    (or a later commit of it alone) is not the one read; an uncommitted record reads the
    working tree."""
    import subprocess

    import yaml

    b = bench()

    def git(*cmd):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *cmd],
                       cwd=tmp_path, check=True, capture_output=True)

    def log(tokens):
        (tmp_path / "reports/s/log_history.json").write_text(json.dumps([{"num_tokens": tokens}]))

    (tmp_path / "reports/s").mkdir(parents=True)
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(
        {"stages": {"s": {"outs": [{"path": "reports/s/log_history.json"}]}}}))
    record = tmp_path / "repro_timings.json"
    record.write_text("{}")
    log(100)
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "run")
    log(250)
    git("commit", "-qam", "a later run of the stage")
    log(400)
    rev = b.record_revision(record)
    assert rev and b.trained_by_stage(tmp_path, ["s"], rev)["s"][0] == 100
    assert b.trained_by_stage(tmp_path, ["s"])["s"][0] == 400
    record.write_text('{"commit": "new"}')
    assert b.record_revision(record) is None


def test_the_generation_rates_keep_each_batch_sizes_best():
    got = bench().batched_summary([{"16": 90.0, "1": 30.0}, {"16": 120.0, "1": 25.0}])
    assert got == {"tokens_per_s": 120.0, "batch": 16, "new_tokens": 64,
                   "tokens_per_s_by_batch": {"16": 120.0, "1": 30.0}}


def test_the_rates_keep_the_best_attempt_with_each_attempts_time_and_load(monkeypatch):
    """Attempts on a shared machine: each records when and under what load it ran; the
    best peak is kept with its sizes; without a model folder no batched rate is made."""
    b = bench()
    peaks = iter([{"gflops": 50.0, "gflops_by_n": {"1024": 50.0}},
                  {"gflops": 80.0, "gflops_by_n": {"1024": 80.0}},
                  {"gflops": 60.0, "gflops_by_n": {"1024": 60.0}}])
    monkeypatch.setattr(b, "matmul_peak", lambda threads: next(peaks))
    rates = b.machine_rates(None, 2, 3)
    assert rates["peak"] == {"gflops": 80.0, "gflops_by_n": {"1024": 80.0}}
    assert [a["peak"]["gflops"] for a in rates["attempts"]] == [50.0, 80.0, 60.0]
    assert all({"date", "load"} <= set(a) for a in rates["attempts"])
    assert "batched" not in rates and rates["threads"] == 2
    assert rates["torch"] == __import__("torch").__version__


def test_the_peak_is_two_n_cubed_over_the_best_time(monkeypatch):
    b = bench()
    monkeypatch.setattr(b, "PEAK_SIZES", (64, 128))
    # n = 64: 524,288 FLOP, best 1e-5 s = 52.4 GFLOP/s; n = 128: 4,194,304 FLOP, best 2e-5 s
    times = iter([2e-5, 1e-5, 3e-5, 4e-5, 2e-5, 8e-5])
    monkeypatch.setattr(b, "_timed", lambda fn: next(times))
    peak = b.matmul_peak(1)
    assert peak["gflops_by_n"] == {"64": 52.4, "128": 209.7}
    assert peak["gflops"] == max(peak["gflops_by_n"].values())


def test_disk_usage_counts_each_file_once_and_per_part(tmp_path):
    import os

    b = bench()
    root, venv = tmp_path / "clone", tmp_path / "venv"
    (root / "data").mkdir(parents=True)
    (root / "models").mkdir()
    venv.mkdir()
    (root / "data" / "a.bin").write_bytes(b"x" * 3000)
    os.link(root / "data" / "a.bin", root / "data" / "b.bin")   # a hard link: counted once
    (root / "models" / "m.bin").write_bytes(b"y" * 1000)
    (root / "data" / "ln").symlink_to(root / "models" / "m.bin")  # a link: not followed
    (venv / "v.bin").write_bytes(b"z" * 500)
    assert b.folder_bytes(root / "data") == 3000 + len(str(root / "models" / "m.bin"))
    got = b.disk_usage(root, venv)
    assert set(got) == {"data", "models", "checkout", "venv"}
    assert got["checkout"] >= got["data"] + got["models"] and got["venv"] >= 0


def test_the_readme_block_shows_the_records_cost(tmp_path):
    inc = script_module("scripts/docs_includes.py")
    (tmp_path / "benchmarks").mkdir()
    record = {"commit": "abc1234", "date": "2026-12-02 00:47 UTC", "cores": 2,
              "total_wall_min": 150.2, "cpu_s": 600.0, "load_before": 1.2, "load_after": 2.0}
    (tmp_path / "benchmarks" / "repro_timings.json").write_text(json.dumps(record))
    row = inc.render_cold_run(tmp_path, tmp_path / "README.md").splitlines()[2]
    assert "`abc1234`" in row and "150.2 min" in row and "10.0 min" in row
    assert "not measured" in row
    record["disk_gib"] = {"checkout": 3.5, "data": 2.0, "models": 0.6, "venv": 2.3}
    (tmp_path / "benchmarks" / "repro_timings.json").write_text(json.dumps(record))
    row = inc.render_cold_run(tmp_path, tmp_path / "README.md").splitlines()[2]
    assert "checkout 3.5 (data 2.0, models 0.6), venv 2.3" in row
