"""Stage 06's outputs declared once: its per-item records, and every table, the radar and
the transcripts page built from them alone — byte for byte as the run wrote them, with a
hand edit caught and a record edit moving a table by the amount computed by hand; PLPF
Table 3's grid cells not SP-tested by default, and saying why (issues 31, 33, 34)."""

from __future__ import annotations

import copy
import json
import re
import shutil

import numpy as np
import pandas as pd
import pytest
import yaml

from medpref import REPO_ROOT
from medpref.contracts import SPCase, write_jsonl
from medpref.params import load_params, parse_params
from medpref.remscore.base import RuleJudgement
from medpref.simulation import grading_outputs as graded_outputs
from medpref.simulation import nextturn_stage
from medpref.simulation import outputs as sim_outputs
from medpref.simulation.grading_outputs import OUTPUTS as GRADING
from medpref.simulation.heldout_stage import OUTPUTS as HELDOUT
from medpref.simulation.nextturn_stage import OUTPUTS as NEXT_TURN
from medpref.simulation.outputs import OUTPUTS
from test_simulation import case, client, keyword_judge, toy_encode

#: stage 06's four outputs lists, each with its folder under reports/
FOUR = (OUTPUTS, NEXT_TURN, HELDOUT, GRADING)


def four_symptom_case(cid: str, dept: str) -> SPCase:
    c = case(cid, dept)
    return c.model_copy(update={"checklist": c.checklist.model_copy(update={
        "symptoms": ["fever", "phlegm", "wheeze", "rash"]})})


class RuleCounter:
    """A REM stand-in: every rule scores 2 when the last doctor turn asks, else 0."""

    client = None

    def score_states(self, states, rules):
        return [{r.id: RuleJudgement(r.id, 2.0 if s[-1].text.endswith("?") else 0.0)
                 for r in rules} for s in states]


def run_stage(root, monkeypatch, grid_cases=0, heavy=True):
    """Stage 06 on two four-symptom cases with scripted models, its reports under
    ``root/reports/06_simulation`` (where ``medpref tables`` reads them); ``heavy``: with
    next turn, the REM radar, held-out compliance and the grader's validation."""
    from medpref import embedding
    from medpref.rules import load_rules
    from medpref.simulation import heldout_stage, whole
    from medpref.simulation import stage as sim_stage
    from medpref.stagekit import Stage

    write_jsonl(root / "cases.jsonl", [four_symptom_case("sp-a", "internal_medicine"),
                                       four_symptom_case("sp-b", "surgery")])
    raw = copy.deepcopy(load_params().raw)      # the committed params, its grid included
    raw["simulation"].update({
        "cases": str(root / "cases.jsonl"), "rounds": 2, "trained_policies": False,
        "grid_cases": grid_cases, "rem_radar": heavy, "controls": ["control_lecture"],
        "doctors": [{"name": "base", "role": "policy"}, {"name": "sft", "role": "sft"},
                    {"name": "grid_avg_1", "role": "sft",
                     "cell": {"weighting": "avg", "trajectory": 1}},
                    {"name": "grid_dep_1", "role": "policy",
                     "cell": {"weighting": "dep", "trajectory": 1}}]})
    # heavy: every hand-graded item (data/embedded/sp_graded.jsonl), graded twice (seconds)
    raw["simulation"]["grader"].update(bootstrap_rounds=200,
                                       **({} if heavy else {"graded_items": None}))
    raw["simulation"]["next_turn"].update(enabled=heavy, n_dialogues=3)
    raw["simulation"]["heldout"].update(enabled=heavy, n_states=6, states_per_dialogue=2)
    params = parse_params(raw)
    assert params.annotation.grid.weightings == ["avg", "dep"]

    def asker(req):
        n = sum(m["role"] == "assistant" for m in req.messages)
        return ["Do you have a fever?", "Any wheeze? Please get a chest X-ray."][min(n, 1)]

    clients = {"policy": client(asker, "policy"),
               "sft": client(lambda r: "Do you have a rash?", "sft"),
               "judge": client(keyword_judge, "judge")}

    class RootStage(Stage):
        data_dir = property(lambda self: root / "data" / "06_simulation")
        reports_dir = property(lambda self: root / "reports" / "06_simulation")

        def role(self, name, **overrides):
            return clients[name]

    monkeypatch.setattr(embedding, "load_encoder", lambda *a, **k: toy_encode)
    for module in (sim_stage, heldout_stage):
        monkeypatch.setattr(module, "rem_scorer", lambda stage, p: (
            RuleCounter(), load_rules("configs/rules/plpf_flowchart.yaml"), "counter"))
    (root / "params.yaml").write_text(yaml.safe_dump(raw, allow_unicode=True))
    return whole.run(RootStage(name="06_simulation", params=params)), params


@pytest.fixture(scope="module")
def committed(tmp_path_factory):
    """One full scripted run (records, tables, radar, page), as a fresh clone holds it."""
    root = tmp_path_factory.mktemp("run")
    with pytest.MonkeyPatch.context() as mp:
        out, params = run_stage(root, mp)
    return root, out, params


def reports_of(root):
    return root / "reports" / "06_simulation"


def graded_of(root):
    """The grading stage's folder beside the doctors'."""
    return root / "reports" / "06_sp_grading"


def all_differences(root, params, scratch):
    """Every difference of stage 06's four stages' files from their rebuilds."""
    return [d for o in FOUR
            for d in o.differences(o.reports_dir(root), params, scratch / o.stage)]


def test_every_declared_record_is_written_one_row_per_item_with_its_key(committed):
    root, out, _ = committed
    records = {**HELDOUT.load_records(HELDOUT.reports_dir(root)),
               **GRADING.load_records(graded_of(root))}    # their own and those they read
    assert set(records) == {r.name for o in FOUR for r in o.records}
    assert set(GRADING.own_records(graded_of(root))) == {"grades", "grader_verdicts"}
    assert set(HELDOUT.own_records(HELDOUT.reports_dir(root))) == {"heldout_cuts",
                                                                 "heldout_turns"}
    for name, rows in records.items():
        assert all(re.fullmatch(r"[0-9a-f]{16}", r["key"]) for r in rows), name
    sizes = {name: len(rows) for name, rows in records.items()}
    # base, sft and the control on both cases; the grid cells are not SP-tested
    assert sizes["consultations"] == 3 * 2 and sizes["cases"] == 2
    assert [d["sp_cases"] for d in records["sp_doctors"]] == [2, 2, 0, 0, 2]
    assert sizes["grades"] == 3 * 2 * (4 + 1 + 1)          # 4 symptoms, a test, a disease
    for name in ("consultations", "grades", "patient_sentences", "compliance_judgements",
                 "next_turn_predictions", "heldout_turns", "grader_verdicts"):
        keys = [r["key"] for r in records[name]]
        assert len(set(keys)) == len(keys), f"{name}: two items with one key"
    # the consultation keeps each doctor turn's raw answer and where each reply came from
    first = records["consultations"][0]
    steps = first["steps"]
    assert [s["speaker"] for s in steps] == ["doctor", "patient"] * 2
    # the completion is kept where the turn cut it (at its first question), not twice
    assert first["turns"][1]["text"] == "Do you have a fever?" and "raw" not in steps[0]
    assert first["turns"][3]["text"] == "Any wheeze?"
    assert steps[2]["raw"] == "Any wheeze? Please get a chest X-ray." and "fallback" in steps[1]
    assert all(set(a) == {"from", "score"} for s in steps[1::2] for a in s["answered_from"])
    # 4 models predicted 3 items each; the REM judged the spoken transcripts per rule
    assert sizes["next_turn_predictions"] == 4 * 3 and sizes["next_turn_items"] == 3
    assert {r["doctor"] for r in records["compliance_judgements"]} == {"base", "sft"}
    graded = (REPO_ROOT / "data/embedded/sp_graded.jsonl").read_text().splitlines()
    assert len(records["grader_verdicts"]) == len([g for g in graded if g.strip()]) and set(
        records["grader_verdicts"][0]["graders"]) == {"echo_aware", "embedding"}
    assert out.records == records


def test_the_tables_rebuild_byte_for_byte_and_a_hand_edit_is_caught(committed, tmp_path):
    root, out, params = committed
    assert all_differences(root, params, tmp_path / "s1") == []
    for declared in FOUR:
        reports = declared.reports_dir(root)
        written = {p.name for p in reports.iterdir() if p.is_file()}
        assert {f.name for o in declared.built for f in o.files(reports)} <= written
    shutil.copytree(root / "reports", tmp_path / "copy" / "reports")
    edited = graded_of(tmp_path / "copy")
    table = (edited / "table2.md").read_text()
    (edited / "table2.md").write_text(table.replace("50.0", "51.0", 1))
    html = (edited / "transcripts.html").read_text()
    (edited / "transcripts.html").write_text(html.replace("✓ pass", "✗ fail", 1))
    assert GRADING.differences(edited, params, tmp_path / "s2") == [
        f"{edited / 'table2.md'}: differs from its rebuild from the records",
        f"{edited / 'transcripts.html'}: differs from its rebuild from the records"]


def test_medpref_tables_checks_the_stage_from_its_committed_records(committed, capsys):
    from medpref.cli import main

    root, _, _ = committed
    assert main(["--root", str(root), "tables", "--check", "06_simulation", "06_next_turn",
                 "06_heldout", "06_sp_grading"]) == 0
    assert ("0 difference(s) in 06_simulation, 06_next_turn, 06_heldout, 06_sp_grading"
            in capsys.readouterr().out)


def test_a_flipped_grade_moves_table2_by_the_amount_computed_by_hand(committed, tmp_path):
    """base asks about fever and wheeze of each case's 4 symptoms: 50 %. Crediting it
    with rash on sp-a moves sp-a's c/m by 1/4 and the mean over the 2 cases by
    100 · (1/4) / 2 = 12.5 points; nothing else of Table 2 moves."""
    root, _, params = committed
    shutil.copytree(root / "reports", tmp_path / "reports")
    reports = graded_of(tmp_path)
    path = reports / "records" / "grades.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    (flip,) = [r for r in rows if (r["doctor"], r["case"], r["item"]) == ("base", "sp-a", "rash")]
    assert flip["passed"] is False and flip["category"] == "symptoms"
    before = pd.read_csv(reports / "table2.csv").set_index("doctor")
    flip["passed"] = True
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    diffs = GRADING.differences(reports, params, tmp_path / "scratch")
    assert f"{reports / 'table2.csv'}: differs from its rebuild from the records" in diffs
    after = pd.read_csv(tmp_path / "scratch" / "table2.csv").set_index("doctor")
    assert before.loc["base", "ALL Sym."] == 50.0
    assert after.loc["base", "ALL Sym."] - before.loc["base", "ALL Sym."] == pytest.approx(12.5)
    assert after.loc["base", "internal_medicine Sym."] == 75.0      # sp-a: 3 of 4
    # the toy run's credits are not hand-graded: the grader column counts one more
    reading = [t.loc["base", "grader"] for t in (before, after)]
    n = int(reading[0].split("/")[1].split(" ")[0])
    assert reading == [f"grader not validated on these doctors (0/{k} credits hand-graded, "
                       "< 50%)" for k in (n, n + 1)]
    before, after = before.drop(columns="grader"), after.drop(columns="grader")
    moved = (after != before) & ~(after.isna() & before.isna())
    assert set(moved.stack()[lambda s: s].index) == {("base", "internal_medicine Sym."),
                                                    ("base", "ALL Sym.")}
    per_case = pd.read_csv(tmp_path / "scratch" / "per_case.csv").set_index(["doctor", "case"])
    assert per_case.loc[("base", "sp-a"), "symptoms"] == 0.75


def test_table3_says_its_cells_were_not_sp_tested_and_stage_09_shows_why(committed):
    from medpref import REPO_ROOT
    from medpref.papertables.build import build_table, render_built
    from medpref.papertables.spec import load_registry

    root, out, _ = committed
    grid = pd.read_csv(graded_of(root) / "table3_grid.csv")
    assert list(grid.columns) == ["weighting", "metric", "k=1", "k=2", "k=3", "note"]
    assert list(zip(grid["weighting"], grid["metric"])) == [
        (w, m) for w in ("avg", "dep") for m in ("Dis.", "Sym.", "Test")]
    assert grid[["k=1", "k=2", "k=3"]].isna().all().all()
    assert set(grid["note"]) == {graded_outputs.GRID_NOT_RUN}
    assert pd.read_csv(graded_of(root) / "table3_grid_ci.csv").empty
    assert not {"grid_avg_1", "grid_dep_1"} & set(out.per_case["doctor"])
    # stage 09's PLPF Table 3: our cells empty, the reason under the table
    spec = next(a for a in load_registry(REPO_ROOT / "configs" / "paper_tables.yaml").artefacts
                if a.id == "plpf_table3")
    built = build_table(spec.model_copy(update={"source": "reports/06_sp_grading/"
                                                          "table3_grid.csv"}), root)
    ours = built.table[built.table["source"] == "ours"]
    assert len(ours) == 6 and ours[["k=1", "k=2", "k=3"]].isna().all().all()
    assert built.note == graded_outputs.GRID_NOT_RUN
    assert f"Our rows: {graded_outputs.GRID_NOT_RUN}." in render_built(built)["plpf_table3.md"]


@pytest.mark.parametrize("grid_cases,note", [
    (None, "SP test on all 2 cases"),
    (1, "SP test on 1 of the 2 cases (simulation.grid_cases); read table3_grid_ci's mde "
        "before comparing cells")])
def test_grid_cells_run_on_the_cases_asked_for(tmp_path, monkeypatch, grid_cases, note):
    out, params = run_stage(tmp_path, monkeypatch, grid_cases=grid_cases, heavy=False)
    n = 2 if grid_cases is None else 1
    assert (out.per_case["doctor"] == "grid_avg_1").sum() == n
    grid = out.grid.set_index(["weighting", "metric"])
    assert list(grid.columns) == ["k=1", "note"] and set(grid["note"]) == {note}
    assert grid.loc[("dep", "Sym."), "k=1"] == 50.0       # asks fever and wheeze of 4
    assert grid.loc[("avg", "Sym."), "k=1"] == 25.0       # asks about the rash only
    assert all_differences(tmp_path, params, tmp_path / "s") == []


def test_no_grid_policy_keeps_table3s_cells_with_the_reason(committed):
    _, _, params = committed
    records = {r.name: [] for o in FOUR for r in o.records}
    records["sp_doctors"] = [{"doctor": "base", "kind": "model", "role": "policy",
                              "adapter": None, "model_id": "m", "sp_cases": 0}]
    grid = graded_outputs.grid_table(records, params)
    assert len(grid) == 6 and set(grid["note"]) == {graded_outputs.NO_GRID_POLICY}
    bare = parse_params({"simulation": {}})                  # no annotation grid to lay out
    assert graded_outputs.grid_table(records, bare).to_dict("records") == [
        {"weighting": "", "metric": "", "note": graded_outputs.NO_GRID_POLICY}]


def test_the_hand_grading_queue_reads_the_stage_records(committed):
    from medpref.simulation import handgrading as hg

    root, _, _ = committed
    records = reports_of(root) / "records"
    queue = hg.grading_queue(records / "consultations.jsonl",
                             graded_of(root) / "records" / "grades.jsonl",
                             doctors=["base"])
    assert len(queue) == 2 * 6 and {w.case for w in queue} == {"sp-a", "sp-b"}


def test_a_prediction_of_an_unknown_item_is_named_with_both_record_files():
    records = {"next_turn_items": [{"item": "d1@2", "reference": "Any fever?"}],
               "next_turn_predictions": [{"item": "d9@4", "doctor": "base"}]}
    with pytest.raises(ValueError, match=r"records/next_turn_predictions\.jsonl: item 'd9@4' "
                                         r"of doctor 'base' is not in records/next_turn_items"):
        nextturn_stage.next_turn_rows(records)


def test_a_page_output_is_written_as_built_and_compared_byte_for_byte(tmp_path):
    from medpref.outputs import Page, Records, StageOutputs

    toy = StageOutputs("97_toy", (
        Records("items"),
        Page("index", lambda rec, params: f"<p>{len(rec['items'])} items</p>\n"),
    ))
    reports = toy.reports_dir(tmp_path)
    assert toy.write(reports, {"items": [{"a": 1}, {"a": 2}]}, None) == {
        "index": "<p>2 items</p>\n"}
    assert (reports / "index.html").read_text() == "<p>2 items</p>\n"
    assert toy.differences(reports, None, tmp_path / "s1") == []
    (reports / "index.html").write_text("<p>3 items</p>\n")
    assert toy.differences(reports, None, tmp_path / "s2") == [
        f"{reports / 'index.html'}: differs from its rebuild from the records"]


def test_the_gates_fail_the_run_before_a_record_is_written(tmp_path, monkeypatch):
    """A control that passes what it must not stops the grading with none of its records
    written (the doctors' consultations, a stage before, are kept)."""
    from medpref.stagekit import StageFailed

    monkeypatch.setattr(sim_outputs.tables, "controls_gate", lambda *a, **k: pd.DataFrame(
        [{"control": "control_lecture", "polarity": "negative", "metric": "Sym.", "cases": 2,
          "score": 50.0, "rule": "≤", "limit": 10.0, "expected_coverage": np.nan,
          "passed": False}]))
    with pytest.raises(StageFailed, match=r"control_lecture Sym\. 50\.0 \(must be ≤ 10\.0"):
        run_stage(tmp_path, monkeypatch, heavy=False)
    assert not graded_of(tmp_path).exists()
    assert (reports_of(tmp_path) / "records" / "consultations.jsonl").exists()
