"""Stage 09: paper tables assembled from stage files, published rows labelled, traceable."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from medpref import REPO_ROOT
from medpref.papertables.build import OURS, PAPER, MissingSource, build_table, to_latex, write_built
from medpref.papertables.index import render_index
from medpref.papertables.spec import ArtefactSpec, load_registry


def _spec(**kw) -> ArtefactSpec:
    base = dict(id="t5", paper="PLPF", label="Table 5", stage="rem", source="r/table5.csv",
                row="scorer", columns={"Exact Match": "exact", "Fuzzy Match": "fuzzy"},
                published={"rows": {"ChatGPT": [56.2, 79.5]}})
    base.update(kw)
    return ArtefactSpec.model_validate(base)


def _write_source(root, rows):
    (root / "r").mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(root / "r" / "table5.csv", index=False)


def test_ours_then_paper_under_the_paper_headers(tmp_path):
    _write_source(tmp_path, [{"scorer": "finetuned", "exact": 47.69, "fuzzy": 84.6, "x": 1}])
    built = build_table(_spec(), tmp_path)
    assert list(built.table.columns) == ["source", "row", "Exact Match", "Fuzzy Match"]
    assert built.table["source"].tolist() == [OURS, PAPER]
    assert built.table.iloc[0]["Exact Match"] == pytest.approx(47.69)
    assert built.table.iloc[1].tolist() == [PAPER, "ChatGPT", 56.2, 79.5]


def test_trace_names_file_row_column_and_scale_is_applied(tmp_path):
    _write_source(tmp_path, [{"scorer": "a", "exact": 0.25, "fuzzy": 0.5}])
    built = build_table(_spec(scale={"Exact Match": 100}), tmp_path)
    assert built.table.iloc[0]["Exact Match"] == pytest.approx(25.0)
    assert built.table.iloc[0]["Fuzzy Match"] == pytest.approx(0.5)
    assert [(c.file, c.row, c.column, c.value) for c in built.trace] == [
        ("r/table5.csv", "a", "exact", 0.25), ("r/table5.csv", "a", "fuzzy", 0.5)]


def test_filter_and_missing_values(tmp_path):
    _write_source(tmp_path, [{"scorer": "a", "exact": 1.0, "fuzzy": None, "dept": "ALL"},
                             {"scorer": "b", "exact": 2.0, "fuzzy": 3.0, "dept": "surgery"}])
    built = build_table(_spec(filter={"dept": "ALL"}, published=None), tmp_path)
    assert built.table["row"].tolist() == ["a"]
    assert math.isnan(built.table.iloc[0]["Fuzzy Match"])
    assert len(built.trace) == 1


def test_missing_source_and_missing_column_are_named(tmp_path):
    with pytest.raises(MissingSource, match="r/table5.csv not found .*stage 'rem'"):
        build_table(_spec(), tmp_path)
    _write_source(tmp_path, [{"scorer": "a", "exact": 1.0}])
    with pytest.raises(ValueError, match=r"no column\(s\) \['fuzzy'\]"):
        build_table(_spec(), tmp_path)


def test_published_row_length_is_checked():
    with pytest.raises(ValueError, match="published row 'ChatGPT' has 1 values for 2 columns"):
        _spec(published={"rows": {"ChatGPT": [56.2]}})


def test_outputs_csv_markdown_latex_without_minus_zero(tmp_path):
    _write_source(tmp_path, [{"scorer": "a_b", "exact": -0.01, "fuzzy": 50.0}])
    paths = write_built(build_table(_spec(), tmp_path), tmp_path / "out")
    assert [p.suffix for p in paths] == [".csv", ".md", ".tex"]
    tex = paths[2].read_text()
    assert r"\toprule" in tex and r"a\_b" in tex and "-0.0" not in tex and " 0.0 " in tex
    md = paths[1].read_text()
    assert md.startswith("**PLPF — Table 5**") and "paper (published)" in md


def test_latex_escapes_percent():
    df = pd.DataFrame([{"source": OURS, "row": "x", "Exact %": 1.25}])
    assert r"Exact \%" in to_latex(df, "c", digits=2) and "1.25" in to_latex(df, "c", 2)


def test_the_repository_registry_is_valid_and_sources_are_stage_reports():
    registry = load_registry(REPO_ROOT / "configs" / "paper_tables.yaml")
    assert len(registry.artefacts) >= 10
    for spec in registry.artefacts:
        assert spec.source.startswith("reports/0"), spec.id


def test_index_lists_artefacts_and_stage_provenance(tmp_path):
    folder = tmp_path / "03_rem"
    folder.mkdir()
    (folder / "provenance.json").write_text(
        '{"params_hash": "abc", "params_sections": ["rem"], "git_commit": "deadbeef", '
        '"seed": 13, "models": {"rem": "hf:smol"}}')
    (folder / "table5.md").write_text("x")
    status = pd.DataFrame([{"paper": "PLPF", "artefact": "Table 5", "status": "made"}])
    text = render_index(tmp_path, status)
    assert "| PLPF" in text and "## 03_rem" in text and "`abc`" in text
    assert "[table5.md](03_rem/table5.md)" in text and "rem: `hf:smol`" in text


def _committed_specs():
    registry = load_registry(REPO_ROOT / "configs" / "paper_tables.yaml")
    return [s for s in registry.artefacts if (REPO_ROOT / s.source).exists()]


@pytest.mark.parametrize("spec", _committed_specs(), ids=lambda s: s.id)
def test_every_made_artefact_exists_with_the_papers_headers(spec):
    """What the stages wrote is in reports/09_tables/paper under the paper's headers. That
    every file there equals its rebuild from the stage files, byte for byte (no number
    typed by hand or gone stale), is test_tables_from_records' check of stage 09."""
    out = REPO_ROOT / "reports" / "09_tables" / "paper"
    if spec.kind == "figure":
        assert (out / "figures" / f"{spec.id}.png").exists()
        return
    written = pd.read_csv(out / f"{spec.id}.csv")
    assert list(written.columns) == ["source", "row", *spec.columns]


def test_a_row_label_from_two_columns_and_an_empty_stage_table(tmp_path):
    (tmp_path / "r").mkdir()
    pd.DataFrame([{"w": "dep", "m": "Sym.", "1": 0.5}]).to_csv(tmp_path / "r" / "g.csv",
                                                                 index=False)
    spec = _spec(source="r/g.csv", row="w+m", columns={"k=1": "1"}, published=None)
    assert build_table(spec, tmp_path).table["row"].tolist() == ["dep Sym."]
    pd.DataFrame(columns=["w", "m"]).to_csv(tmp_path / "r" / "g.csv", index=False)
    assert build_table(spec, tmp_path).table.empty


# -- headline metrics: the one metrics file dvc prints --------------------------------------

def test_headlines_read_nested_keys_and_give_none_for_a_missing_stage(tmp_path):
    import json

    from medpref.papertables.spec import Headline
    from medpref.papertables.stage import headline_value

    (tmp_path / "m.json").write_text(json.dumps({"sp/sft": {"Sym.": 12.3456}, "n": 4,
                                                 "flag": True, "none": None}))
    assert headline_value(Headline(name="a", source="m.json", key=["sp/sft", "Sym."]),
                          tmp_path) == 12.346
    assert headline_value(Headline(name="a", source="m.json", key=["n"]), tmp_path) == 4
    assert headline_value(Headline(name="a", source="m.json", key=["none"]), tmp_path) is None
    assert headline_value(Headline(name="a", source="m.json", key=["sp/sft", "Test"]),
                          tmp_path) is None
    assert headline_value(Headline(name="a", source="gone.json", key=["n"]), tmp_path) is None
    with pytest.raises(ValueError, match="headline 'a'.*not a number"):
        headline_value(Headline(name="a", source="m.json", key=["flag"]), tmp_path)


def test_a_headline_name_too_wide_for_the_metrics_table_is_refused(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("artefacts: []\nheadlines:\n"
                    "  - {name: a_name_far_too_long_for_a_column, source: x.json, key: [a]}\n")
    with pytest.raises(ValueError, match="r.yaml.*headlines.0.name"):
        load_registry(path)
    path.write_text("artefacts: []\nheadlines:\n  - {name: a, source: x.json, key: [a]}\n"
                    "  - {name: a, source: y.json, key: [b]}\n")
    with pytest.raises(ValueError, match="duplicate headline names"):
        load_registry(path)


def test_every_committed_headline_points_at_a_stage_metrics_file_stage_09_depends_on():
    import yaml

    registry = load_registry(REPO_ROOT / "configs" / "paper_tables.yaml")
    deps = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text())["stages"]["tables"]["deps"]
    assert registry.headlines
    for h in registry.headlines:
        assert h.source.endswith("metrics.json")
        assert any(h.source == d or h.source.startswith(d.rstrip("/") + "/") for d in deps), \
            f"stage 09 does not depend on {h.source} (headline {h.name})"


def test_dvc_metrics_show_is_one_file_and_under_200_characters_a_line():
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    import yaml

    stages = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text())["stages"]
    declared = [next(iter(m)) if isinstance(m, dict) else m
                for s in stages.values() for m in s.get("do", s).get("metrics", [])]
    assert declared == ["reports/09_tables/metrics.json"]
    dvc = Path(sys.executable).parent / "dvc"
    dvc = str(dvc) if dvc.exists() else shutil.which("dvc")
    if dvc is None:
        pytest.skip("dvc is not installed")
    shown = subprocess.run([dvc, "metrics", "show"], cwd=REPO_ROOT, capture_output=True,
                           text=True, timeout=300, check=True).stdout
    lines = shown.splitlines()
    assert lines and "reports/09_tables/metrics.json" in shown
    assert max(len(line) for line in lines) < 200, shown


def test_stage_09_reads_the_stage_files_beside_its_own_reports_folder(tmp_path, monkeypatch):
    """The tables come from the reports/ folder that holds stage 09's own (the repository's;
    here one moved under tmp_path, as a chained test moves every stage's), not from the
    repository's whatever the stages wrote."""
    from medpref.papertables import stage as s09
    from medpref.params import load_params
    from medpref.stagekit import Stage

    monkeypatch.setattr(Stage, "reports_dir",
                        property(lambda self: tmp_path / "reports" / self.name))
    (tmp_path / "reports" / "r").mkdir(parents=True)
    pd.DataFrame([{"scorer": "finetuned", "exact": 47.69, "fuzzy": 84.6}]).to_csv(
        tmp_path / "reports" / "r" / "table5.csv", index=False)
    registry = tmp_path / "registry.yaml"
    registry.write_text("artefacts:\n"
                        "  - {id: t5, paper: PLPF, label: Table 5, stage: rem, "
                        "source: reports/r/table5.csv, row: scorer, "
                        "columns: {Exact Match: exact}}\n"
                        "  - {id: gone, paper: PLPF, label: Gone, stage: rem, "
                        "source: reports/gone/x.csv, row: scorer, columns: {E: exact}}\n")
    params = load_params()
    params._sections["tables"] = params.tables.model_copy(
        update={"registry": str(registry), "index": str(tmp_path / "reports" / "index.md")})
    out = s09.run(Stage(name="09_tables", params=params))
    assert dict(zip(out.status["artefact"], out.status["status"])) == {
        "Table 5": "made", "Gone": "not made"}
    paper = tmp_path / "reports" / "09_tables" / "paper"
    assert sorted(p.name for p in paper.iterdir()) == ["t5.csv", "t5.md", "t5.tex"]
    assert "09_tables/paper/t5.csv" in out.status.iloc[0]["files"]
    # `medpref tables` rebuilds the folder from the stage files the same way, and names
    # what changed when a stage's table moved after stage 09 ran
    from medpref.papertables.outputs import OUTPUTS

    reports = tmp_path / "reports" / "09_tables"
    assert OUTPUTS.differences(reports, params, tmp_path / "s1") == []
    pd.DataFrame([{"scorer": "finetuned", "exact": 50.0, "fuzzy": 84.6}]).to_csv(
        tmp_path / "reports" / "r" / "table5.csv", index=False)
    assert OUTPUTS.differences(reports, params, tmp_path / "s2") == [
        f"{paper / n}: differs from its rebuild from the stages' reports"
        for n in ("t5.csv", "t5.md", "t5.tex")]
    # a stage that no longer makes its source: its artefact's files go on the next run
    (tmp_path / "reports" / "r" / "table5.csv").unlink()
    (paper / "t5.md").write_text("edited by hand")
    out = s09.run(Stage(name="09_tables", params=params))
    assert out.status["status"].tolist() == ["not made", "not made"]
    assert list(paper.iterdir()) == []
    assert OUTPUTS.differences(reports, params, tmp_path / "s3") == []


def test_stage_06s_table2_companions_with_one_case_keep_their_header(tmp_path):
    """One SP case and one doctor: no paired row and no interval to build, yet the files
    stage 06 writes have their header, so stage 09 reads an empty table (not a crash)."""
    from medpref.reports import write_table
    from medpref.simulation import tables

    per_case = pd.DataFrame([{"doctor": "base", "case": "c0", "symptoms": 1.0, "tests": None,
                              "diseases": 0.0}])
    (tmp_path / "r").mkdir()
    paired = tables.table2_paired(per_case, n_boot=50)
    assert paired.empty and list(paired.columns) == tables.TABLE2_PAIRED_COLUMNS
    write_table(paired, tmp_path / "r" / "table5")
    assert build_table(_spec(), tmp_path).table["source"].tolist() == [PAPER]
