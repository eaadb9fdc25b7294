"""Every pipeline notebook has a py:percent twin in notebooks/py/ that matches it."""

from __future__ import annotations

import shutil

import nbformat
import pytest

from medpref import REPO_ROOT, notebooks

FOLDER = REPO_ROOT / "notebooks"


def test_every_notebook_has_a_pair_in_step():
    problems = notebooks.check_pairs(FOLDER)
    assert not problems, ("notebooks and their py:percent pairs differ; run "
                          "`make notebooks-sync` (python -m medpref.notebooks sync):\n  "
                          + "\n  ".join(problems))


def test_jupytext_toml_matches_the_helper():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    config = tomllib.loads((FOLDER / "jupytext.toml").read_text())
    assert config["formats"] == f"ipynb,{notebooks.PAIR_DIR}//{notebooks.FORMAT}"
    assert config["notebook_metadata_filter"] == notebooks.NOTEBOOK_METADATA_FILTER
    assert config["cell_metadata_filter"] == notebooks.CELL_METADATA_FILTER


@pytest.fixture
def folder(tmp_path):
    src = sorted(FOLDER.glob("*.ipynb"))[0]
    shutil.copy(src, tmp_path / src.name)
    return tmp_path, tmp_path / src.name


def test_pair_keeps_cells_and_parameters_tag(folder):
    root, nb_path = folder
    notebooks.sync_to_py([nb_path])
    text = notebooks.pair_path(nb_path).read_text()
    assert '# %% tags=["parameters"]' in text
    assert "kernelspec" not in text  # no notebook metadata in the reviewed twin
    nb = nbformat.read(nb_path, as_version=4)
    back = notebooks.notebook_from_pair(text, nb.metadata)
    assert [(c.cell_type, c.source) for c in back.cells] == \
        [(c.cell_type, c.source) for c in nb.cells]


def test_check_fails_on_missing_stale_and_orphan_pairs(folder):
    root, nb_path = folder
    assert "missing" in notebooks.check_pairs(root)[0]
    notebooks.sync_to_py([nb_path])
    assert notebooks.check_pairs(root) == []
    pair = notebooks.pair_path(nb_path)
    pair.write_text(pair.read_text() + "\n# %%\nprint('edited in the .py')\n")
    assert "differs" in notebooks.check_pairs(root)[0]
    (root / "py" / "99_gone.py").write_text("# %%\n")
    assert any("without a notebook" in p for p in notebooks.check_pairs(root))


def test_sync_from_py_carries_an_edit_into_the_notebook(folder):
    root, nb_path = folder
    notebooks.sync_to_py([nb_path])
    pair = notebooks.pair_path(nb_path)
    pair.write_text(pair.read_text() + "\n# %%\nprint('new cell')\n")
    kernel = nbformat.read(nb_path, as_version=4).metadata["kernelspec"]
    assert notebooks.sync_from_py([pair]) == [nb_path]
    nb = nbformat.read(nb_path, as_version=4)
    assert nb.cells[-1].source == "print('new cell')"
    assert nb.metadata["kernelspec"] == kernel and all(
        not c.get("outputs") for c in nb.cells if c.cell_type == "code")
    assert notebooks.check_pairs(root) == []
    assert notebooks.sync_from_py([pair]) == []  # a second sync changes nothing
