"""Every table a stage declares rebuilds, byte for byte, from its committed records alone
(``medpref tables --check``): no model call, no training."""

from __future__ import annotations

import pytest

from medpref import REPO_ROOT
from medpref.params import load_params
from medpref.pipeline import STAGES


@pytest.mark.parametrize("name", list(STAGES))
def test_committed_tables_rebuild_from_committed_records(name, tmp_path):
    outputs = STAGES[name]
    reports = outputs.reports_dir(REPO_ROOT)
    missing = [str(r.path(reports)) for r in outputs.records if not r.path(reports).exists()]
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
