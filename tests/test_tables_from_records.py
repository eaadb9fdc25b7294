"""Every table a stage declares rebuilds, byte for byte, from its committed records alone
(``medpref tables --check``): no model call, no training. Stage 09's paper tables rebuild
from the stages' committed tables the same way. (dvc.yaml's outputs are generated from the
same lists: tests/test_dvc_generated.py.)"""

from __future__ import annotations

import pandas as pd
import pytest

from medpref import REPO_ROOT
from medpref.params import load_params
from medpref.pipeline import AWAITING_RECORDS, STAGES


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
