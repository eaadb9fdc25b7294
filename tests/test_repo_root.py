"""REPO_ROOT follows the workspace dvc runs in (temp/queued experiments), not the install."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from medpref import find_repo_root

PACKAGE_CHECKOUT = Path(__file__).resolve().parents[1]


def fake_checkout(root: Path) -> Path:
    (root / "src" / "medpref").mkdir(parents=True)
    (root / "dvc.yaml").write_text("stages: {}\n")
    (root / "params.yaml").write_text("shared: {}\n")
    return root


def test_a_dvc_workspace_copy_is_the_root(tmp_path):
    exp = fake_checkout(tmp_path / ".dvc" / "tmp" / "exps" / "standalone" / "tmpabc")
    assert find_repo_root(cwd=exp, environ={}) == exp.resolve()


def test_elsewhere_the_package_checkout_is_the_root(tmp_path):
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")  # not a whole checkout
    assert find_repo_root(cwd=tmp_path, environ={}) == PACKAGE_CHECKOUT


def test_medpref_root_wins(tmp_path):
    exp = fake_checkout(tmp_path / "exp")
    other = tmp_path / "other"
    assert find_repo_root(cwd=exp, environ={"MEDPREF_ROOT": str(other)}) == other.resolve()


def test_a_process_started_in_a_workspace_copy_uses_it(tmp_path):
    exp = fake_checkout(tmp_path / "exp")
    out = subprocess.run([sys.executable, "-c", "import medpref; print(medpref.REPO_ROOT)"],
                         cwd=exp, capture_output=True, text=True, check=True).stdout.strip()
    assert Path(out) == exp.resolve()
