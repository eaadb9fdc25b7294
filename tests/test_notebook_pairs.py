"""Every pipeline notebook has a py:percent twin in notebooks/py/, kept by jupytext itself.

`make notebooks-sync` is `jupytext --sync` over the folder (settings in
notebooks/jupytext.toml); `make notebooks-check` (part of `make lint`) syncs a copy and
fails when that changed anything. These tests drive both targets on copies of the folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from medpref import REPO_ROOT

FOLDER = REPO_ROOT / "notebooks"
BIN = Path(sys.executable).parent


def make(target: str, folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", "--no-print-directory", "-C", str(REPO_ROOT), target,
                           f"NB_DIR={folder}", f"BIN={BIN}"],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def folder(tmp_path):
    """A copy of the notebooks folder with one notebook (and its twin), timestamps kept."""
    root = tmp_path / "notebooks"
    (root / "py").mkdir(parents=True)
    shutil.copy2(FOLDER / "jupytext.toml", root / "jupytext.toml")
    src = sorted(FOLDER.glob("*.ipynb"))[0]
    shutil.copy2(src, root / src.name)
    shutil.copy2(FOLDER / "py" / f"{src.stem}.py", root / "py" / f"{src.stem}.py")
    return root, root / src.name, root / "py" / f"{src.stem}.py"


def newer(path: Path) -> None:
    later = time.time() + 5
    os.utime(path, (later, later))


def test_every_notebook_is_in_step_with_its_twin():
    result = make("notebooks-check", FOLDER)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(p.stem for p in FOLDER.glob("*.ipynb")) == \
        sorted(p.stem for p in (FOLDER / "py").glob("*.py"))


def test_twins_keep_cells_and_the_parameters_tag_but_no_notebook_metadata():
    for twin in (FOLDER / "py").glob("*.py"):
        text = twin.read_text(encoding="utf-8")
        assert "kernelspec" not in text, twin
        nb = nbformat.read(FOLDER / f"{twin.stem}.ipynb", as_version=4)
        if any("parameters" in c.metadata.get("tags", []) for c in nb.cells):
            assert '# %% tags=["parameters"]' in text, twin


def test_the_check_fails_on_an_edited_a_missing_and_an_orphan_twin(folder):
    root, nb_path, twin = folder
    assert make("notebooks-check", root).returncode == 0
    original = twin.read_text()
    twin.write_text(original + "\n# %%\nprint('edited in the .py')\n")
    newer(twin)
    failed = make("notebooks-check", root)
    assert failed.returncode != 0 and "make notebooks-sync" in failed.stdout
    twin.unlink()
    assert make("notebooks-check", root).returncode != 0   # no twin: the sync would write one
    shutil.copy2(FOLDER / "py" / f"{nb_path.stem}.py", twin)
    assert make("notebooks-check", root).returncode == 0
    (root / "py" / "99_gone.py").write_text("# %%\nprint(1)\n")
    assert make("notebooks-check", root).returncode != 0   # a twin without its notebook


def test_sync_carries_an_edit_of_the_twin_into_the_notebook(folder):
    root, nb_path, twin = folder
    before = nbformat.read(nb_path, as_version=4)
    twin.write_text(twin.read_text() + "\n# %%\nprint('new cell')\n")
    newer(twin)
    result = make("notebooks-sync", root)
    assert result.returncode == 0, result.stderr
    nb = nbformat.read(nb_path, as_version=4)
    assert nb.cells[-1].source == "print('new cell')"
    assert [c.id for c in nb.cells[:-1]] == [c.id for c in before.cells]   # ids kept
    assert nb.metadata["kernelspec"] == before.metadata["kernelspec"]
    assert "jupytext" not in nb.metadata   # pairing lives in jupytext.toml, not the notebook
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")
    assert make("notebooks-check", root).returncode == 0
    data = nb_path.read_bytes()
    assert make("notebooks-sync", root).returncode == 0
    assert nb_path.read_bytes() == data   # a second sync writes the same bytes
