"""Stage 04's tables rebuild from its records alone (medpref.annotation.outputs): hand-made
records give hand-counted tables, a changed record changes the rebuilt tables, and a
written strategy whose pair records are missing is an error."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from medpref.annotation import outputs

OUT = outputs.OUTPUTS


def _decision(strategy, item, outcome, margin=None, winner=None, **detail):
    return {"strategy": strategy, "item_id": item, "outcome": outcome, "margin": margin,
            "winner_source": winner, "detail": detail}


def _pair(strategy, item, margin=None):
    return {"id": f"p-{strategy}-{item}", "strategy": strategy, "item_id": item,
            "prompt_turns": 3, "patient": "It hurts.", "chosen": "Where?",
            "rejected": "Take this.", "chosen_source": "sampled",
            "rejected_source": "generated", "margin": margin, "meta": {}}


def records():
    """Three items: the judge prefers the sampled turn on u-1, cannot read u-2, prefers the
    generated turn on u-3; the CAI margins are 2.0 (u-1, sampled), 0.4 (u-2, a tie at 1.0)
    and 1.5 (u-3, generated); gpt4_rank's other reading is shown only (one pair)."""
    return {
        "strategies": [{"strategy": "gpt4_rank", "written": True, "pairs": 2},
                       {"strategy": "gpt4_rank (both orders: ours)", "written": False,
                        "pairs": 1},
                       {"strategy": "cai_dep", "written": True, "pairs": 2}],
        "decisions": [
            _decision("gpt4_rank", "u-1", "1", winner="sampled", order="ab"),
            _decision("gpt4_rank", "u-2", "unparsable", order="ba"),
            _decision("gpt4_rank", "u-3", "2", winner="generated", order="ab"),
            _decision("gpt4_rank (both orders: ours)", "u-1", "1", winner="sampled"),
            _decision("gpt4_rank (both orders: ours)", "u-2", "unparsable"),
            _decision("gpt4_rank (both orders: ours)", "u-3", "tie"),
            _decision("cai_dep", "u-1", "1", 2.0, "sampled"),
            _decision("cai_dep", "u-2", "tie", 0.4),
            _decision("cai_dep", "u-3", "2", 1.5, "generated")],
        "pairs": [_pair("gpt4_rank", "u-1"), _pair("gpt4_rank", "u-3"),
                  _pair("cai_dep", "u-1", 2.0), _pair("cai_dep", "u-3", 1.5)],
        "state_scores": [{"item_id": "u-1", "candidate": 1, "source": "sampled", "state": 0,
                          "state_key": "s", "rule_scores": {"A": 2.0}, "unparsable": 0,
                          "avg_score": 2.0, "dep_score": 1.0}],
        "answers": [{"strategy": "gpt4_rank", "step": "judge", "item_id": "u-1",
                     "order": "ab", "raw": "Response 1", "parsed": "1"},
                    {"strategy": "gpt4_rank", "step": "judge", "item_id": "u-2",
                     "order": "ba", "raw": "I think ...", "parsed": None}]}


@pytest.fixture(scope="module")
def params():
    """What the builders read of the params: the tie threshold (1.0, the papers')."""
    return SimpleNamespace(annotation=SimpleNamespace(scoring=SimpleNamespace(
        tie_threshold=1.0)))


def test_the_tables_count_what_the_hand_made_records_say(params):
    built = OUT.build(records(), params)
    summary = built["summary"].set_index("strategy")
    assert list(summary.index) == ["gpt4_rank", "gpt4_rank (both orders: ours)", "cai_dep",
                                   "PLPF reported (App. C, cai_dep)"]
    judge = summary.loc["gpt4_rank"]
    assert (judge["items"], judge["decisive"], judge["ties"], judge["unusable"],
            judge["pairs"], judge["sampled_wins"], judge["generated_wins"]) == (3, 2, 0, 1,
                                                                                2, 1, 1)
    other = summary.loc["gpt4_rank (both orders: ours)"]
    assert (other["decisive"], other["ties"], other["pairs"], other["tie_ratio"]) == (
        1, 1, 1, 0.5)
    cai = summary.loc["cai_dep"]
    assert (cai["decisive"], cai["ties"], cai["margin_mean"], cai["margin_median"]) == (
        2, 1, round((2.0 + 0.4 + 1.5) / 3, 3), 1.5)
    margins = built["margins"].set_index("strategy")
    assert list(margins.index) == ["cai_dep"]
    assert (margins.loc["cai_dep", "above_threshold"], margins.loc["cai_dep", "max"]) == (2, 2.0)
    sweep = built["threshold_sweep"].set_index("strategy").loc["cai_dep"]
    assert (sweep["t=1"], sweep["t=0.25"], sweep["t=0"]) == (2, 3, 3)
    prefs = built["source_preferences"].set_index("strategy").loc["gpt4_rank"]
    assert (prefs["sampled"], prefs["generated"], prefs["unusable"]) == (0.3333, 0.3333,
                                                                        0.3333)
    lines = built["unparsable"].splitlines()
    assert [json.loads(line)["item_id"] for line in lines] == ["u-2"]


def test_a_changed_record_changes_the_rebuilt_tables(params, tmp_path):
    reports = tmp_path / "reports/04_annotation"
    OUT.write(reports, records(), params)
    assert (reports / "records/decisions.jsonl").read_text().count('"key"') == 9
    assert OUT.differences(reports, params, tmp_path / "s1") == []
    path = reports / "records/decisions.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[-1]["outcome"], rows[-1]["winner_source"] = "1", "sampled"   # u-3: now sampled wins
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    diffs = OUT.differences(reports, params, tmp_path / "s2")
    assert f"{reports / 'summary.csv'}: differs from its rebuild from the records" in diffs
    assert f"{reports / 'source_preferences.md'}: differs from its rebuild from the records" \
        in diffs
    assert not any("margins" in d or "threshold_sweep" in d for d in diffs)  # same margins


def test_a_written_strategy_without_its_pair_records_is_an_error(params):
    recs = records()
    recs["pairs"] = recs["pairs"][:-1]
    with pytest.raises(ValueError, match="'cai_dep' gave 2 pairs but 1 pair records"):
        OUT.build(recs, params)


def test_the_records_of_a_run_name_each_shown_strategy(params):
    from medpref.annotation.pairs import Decision
    from medpref.annotation.strategies import StrategyResult
    from medpref.contracts import PreferencePair, Turn

    pair = PreferencePair(id="p-cai_dep-u-1", prompt=[Turn(role="patient", text="Ow.")],
                          chosen="Where?", rejected="Rest.", strategy="cai_dep", margin=2.0,
                          chosen_source="sampled", rejected_source="generated",
                          meta={"item_id": "u-1"})
    written = StrategyResult("cai_dep", [Decision("u-1", "cai_dep", "1", 2.0, "sampled")],
                             [pair], [{"strategy": "cai_dep", "raw": "x", "parsed": None}])
    other = StrategyResult("shown", [Decision("u-1", "cai_dep", "tie")], [])
    recs = outputs.records_of([written, other], {"cai_dep": written}, [])
    assert recs["strategies"] == [{"strategy": "cai_dep", "written": True, "pairs": 1},
                                  {"strategy": "shown", "written": False, "pairs": 0}]
    assert [d["strategy"] for d in recs["decisions"]] == ["cai_dep", "shown"]
    assert recs["pairs"][0]["patient"] == "Ow." and recs["pairs"][0]["item_id"] == "u-1"
    assert "prompt" not in recs["pairs"][0]
    assert OUT.build(recs, params)["summary"]["pairs"].tolist()[:2] == [1, 0]


# -- the grid table (annotation_grid_table) ------------------------------------------------

def grid_records():
    """Two cells of three items: avg_1 decides u-1 (sampled, 2.0) and u-2 (generated, 1.0)
    and ties u-3 (0.5); dep_1 ties all three."""
    from medpref.annotation import grid_outputs  # noqa: F401

    def cell(w, pairs):
        return {"weighting": w, "trajectory": 1, "pairs": pairs, "states_scored": 6,
                "full_length_share": 1.0, "model_calls": 6, "cache_hits": 0}

    def dec(w, item, outcome, margin, winner=None):
        return {"weighting": w, "trajectory": 1, "item_id": item, "strategy": f"cai_{w}",
                "outcome": outcome, "margin": margin, "winner_source": winner,
                "detail": {"scores": [1.0, 1.0]}}

    return {"cells": [cell("avg", 2), cell("dep", 0)],
            "decisions": [dec("avg", "u-1", "1", 2.0, "sampled"),
                          dec("avg", "u-2", "2", 1.0, "generated"),
                          dec("avg", "u-3", "tie", 0.5)]
            + [dec("dep", f"u-{i}", "tie", 0.1) for i in (1, 2, 3)],
            "references": [{"strategy": "gpt4_rank", "decisive": 2, "ties": 0,
                            "tie_ratio": 0.0, "pairs": 2, "sampled_wins": 1,
                            "generated_wins": 1, "margin_mean": None}]}


def test_the_grid_table_counts_each_cells_decisions(tmp_path):
    from medpref.annotation.grid_outputs import OUTPUTS as GRID

    table = GRID.build(grid_records(), None)["grid_annotation_stats"]
    rows = table.set_index("weighting")
    assert list(table.columns[:4]) == ["weighting", "trajectory", "items",
                                       "full_length_share"]
    assert (rows.loc["avg", "decisive"], rows.loc["avg", "ties"], rows.loc["avg", "pairs"],
            rows.loc["avg", "sampled_wins"], rows.loc["avg", "margin_mean"]) == (
        2, 1, 2, 1, round((2.0 + 1.0 + 0.5) / 3, 3))
    assert (rows.loc["dep", "decisive"], rows.loc["dep", "tie_ratio"],
            rows.loc["dep", "model_calls"]) == (0, 1.0, 6)
    reports = GRID.reports_dir(tmp_path)
    assert reports == tmp_path / "reports/04_annotation/grid_table"
    GRID.write(reports, grid_records(), None)
    assert GRID.differences(reports, None, tmp_path / "s1") == []
    path = reports / "records/decisions.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[2]["outcome"], rows[2]["winner_source"] = "1", "sampled"   # avg's tie on u-3 → win
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert GRID.differences(reports, None, tmp_path / "s2") == [
        f"{reports / 'grid_annotation_stats.csv'}: differs from its rebuild from the records",
        f"{reports / 'grid_annotation_stats.md'}: differs from its rebuild from the records"]


def test_a_grid_cell_without_decisions_is_an_error():
    from medpref.annotation.grid_outputs import OUTPUTS as GRID

    recs = grid_records()
    recs["decisions"] = [d for d in recs["decisions"] if d["weighting"] == "avg"]
    with pytest.raises(ValueError, match="cell dep_1 has no decision records"):
        GRID.build(recs, None)
