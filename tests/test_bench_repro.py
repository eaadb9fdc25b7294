"""bench_repro's record of a cold run (benchmarks/bench_repro.py): the per-stage wall
seconds it measured, joined to each stage's reports, as JSON and as the Markdown table
the docs include."""

from __future__ import annotations

import importlib.util
import json

from medpref import REPO_ROOT


def bench():
    spec = importlib.util.spec_from_file_location("bench_repro",
                                                  REPO_ROOT / "benchmarks" / "bench_repro.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
