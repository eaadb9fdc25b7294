"""Every table a stage declares rebuilds, byte for byte, from its committed records alone
(``medpref tables --check``): no model call, no training. Stage 09's paper tables rebuild
from the stages' committed tables the same way; and dvc.yaml declares what each stage's
list declares, no more and no less."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from medpref import REPO_ROOT
from medpref.params import load_params
from medpref.pipeline import AWAITING_RECORDS, STAGES
from medpref.stagekit import stage_key


@pytest.mark.parametrize("name", list(STAGES))
def test_committed_tables_rebuild_from_committed_records(name, tmp_path):
    outputs = STAGES[name]
    reports = outputs.reports_dir(REPO_ROOT)
    missing = [str(r.path(reports)) for r in outputs.records if not r.path(reports).exists()]
    if name in AWAITING_RECORDS:
        assert len(missing) == len(outputs.records), (
            f"{name} has records committed: take it out of AWAITING_RECORDS")
        pytest.skip(f"{name}: no records committed yet (the stage's next run writes them)")
    assert not missing, f"{name} declares records that are not committed: {missing}"
    assert outputs.differences(reports, load_params(), tmp_path) == []


def test_the_cli_check_names_a_differing_table(tmp_path, capsys):
    from medpref.cli import main
    from medpref.outputs import Records, StageOutputs, Table

    toy = StageOutputs("99_toy", (
        Records("items"),
        Table("counts", lambda rec, params: __import__("pandas").DataFrame(
            {"n": [len(rec["items"])]})),
    ))
    reports = toy.reports_dir(tmp_path)
    toy.write(reports, {"items": [{"a": 1}, {"a": 2}]}, params=None)
    assert (reports / "records/items.jsonl").read_text().count('"key"') == 2
    assert toy.differences(reports, None, tmp_path / "s1") == []
    (reports / "counts.md").write_text("|n|\n|3|\n")
    assert toy.differences(reports, None, tmp_path / "s2") == [
        f"{reports / 'counts.md'}: differs from its rebuild from the records"]
    from medpref import pipeline

    (tmp_path / "params.yaml").write_text((REPO_ROOT / "params.yaml").read_text())
    pipeline.STAGES["99_toy"] = toy
    try:
        assert main(["--root", str(tmp_path), "tables", "--check", "99_toy"]) == 1
        assert "counts.md: differs" in capsys.readouterr().out
        assert main(["--root", str(tmp_path), "tables", "99_toy"]) == 0
        assert main(["--root", str(tmp_path), "tables", "--check", "99_toy"]) == 0
    finally:
        del pipeline.STAGES["99_toy"]


# -- declared once: dvc.yaml's outputs are the list's --------------------------------------

#: what a stage's run writes besides its declared outputs (stagekit's files)
RUN_FILES = {"provenance.json", "ledger.json", "timings.json", "metrics.json"}


def _dvc_outs(name: str) -> dict[str, dict]:
    stage = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text(encoding="utf-8"))[
        "stages"][stage_key(name)]
    outs = {}
    for entry in stage.get("outs", []) + stage.get("metrics", []) + stage.get("plots", []):
        path, props = next(iter(entry.items())) if isinstance(entry, dict) else (entry, {})
        outs[path] = props or {}
    return outs


def _declared(name: str) -> dict[str, bool]:
    """Every path the stage's list declares → whether DVC caches it (records, tables,
    figures and assembled folders are committed to git: ``cache: false``)."""
    outputs = STAGES[name]
    reports = outputs.reports_dir(Path("."))
    paths = [r.path(reports) for r in outputs.records]
    paths += [f for o in outputs.built for f in o.files(reports)]
    paths += [a.folder(reports) for a in outputs.assembled]
    return {**{p.as_posix(): False for p in paths}, **{d.path: True for d in outputs.data}}


@pytest.mark.parametrize("name", list(STAGES))
def test_dvc_yaml_declares_what_the_stage_lists_and_nothing_else(name):
    outs, declared = _dvc_outs(name), _declared(name)
    missing = sorted(p for p in declared if p not in outs)
    cached = sorted(p for p, c in declared.items()
                    if p in outs and outs[p].get("cache", True) != c)
    extra = sorted(p for p in outs if p.startswith(f"reports/{name}/") and p not in declared
                   and Path(p).name not in RUN_FILES)
    assert not missing, f"{name}: listed but not in dvc.yaml's outs: {missing}"
    assert not cached, f"{name}: dvc.yaml caches (or commits) these against the list: {cached}"
    assert not extra, f"{name}: dvc.yaml declares report outputs the list lacks: {extra}"


# -- an assembled folder (stage 09): rebuilt from other stages' tables, compared whole ------

def test_an_assembled_folder_is_rebuilt_whole_and_its_differences_are_named(tmp_path):
    from medpref.outputs import Assembled, Records, StageOutputs, Table

    def files(root, params):   # one file per row of stage 98's table, read from its CSV
        rows = pd.read_csv(root / "reports/98_toy/counts.csv")
        return {f"n{n}.txt": f"{n}\n".encode() for n in rows["n"]}

    def counts(rec, params):
        return pd.DataFrame({"n": [len(rec["items"])]})

    toy = StageOutputs("98_toy", (Records("items"), Table("counts", counts)))
    paper = StageOutputs("99_paper", (Assembled("paper", files),))
    toy.write(toy.reports_dir(tmp_path), {"items": [{"a": 1}, {"a": 2}]}, None)
    reports = paper.reports_dir(tmp_path)
    assert paper.write(reports, {}, None) == {"paper": {"n2.txt": b"2\n"}}
    assert paper.differences(reports, None, tmp_path / "s1") == []
    (reports / "paper/n2.txt").write_text("3\n")
    (reports / "paper/old.txt").write_text("from an earlier build\n")
    assert paper.differences(reports, None, tmp_path / "s2") == [
        f"{reports / 'paper/n2.txt'}: differs from its rebuild from the stages' reports",
        f"{reports / 'paper/old.txt'}: the rebuild does not make it (stale)"]
    # the upstream table changes: the rebuild in place follows it and drops stale files
    toy.write(toy.reports_dir(tmp_path), {"items": [{"a": 1}]}, None)
    assert paper.rebuild(reports, None) == [reports / "paper/n1.txt"]
    assert sorted(p.name for p in (reports / "paper").iterdir()) == ["n1.txt"]
    assert paper.differences(reports, None, tmp_path / "s3") == []
    (reports / "paper/n1.txt").unlink()
    assert paper.differences(reports, None, tmp_path / "s4") == [
        f"{reports / 'paper/n1.txt'}: missing (the rebuild writes it)"]
