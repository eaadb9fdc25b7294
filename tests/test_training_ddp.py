"""DDP replicas end with identical LoRA weights (medpref.training.ddp_check).

On GPUs the check runs through the repository's accelerate config when at least two
devices exist; the CPU variant (two processes over gloo, the same code path) is slow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from medpref import REPO_ROOT

BIN = Path(sys.executable).parent


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}


def _check(out: Path, launcher: list[str]) -> dict:
    proc = subprocess.run([*launcher, "-m", "medpref.training.ddp_check", "--out", str(out)],
                          cwd=REPO_ROOT, env=_env(), capture_output=True, text=True,
                          timeout=900, check=False)  # the report says what failed
    report = out / "ddp_check.json"
    assert report.exists(), proc.stderr[-3000:]
    return json.loads(report.read_text())


def _gpus() -> int:
    import torch

    return torch.cuda.device_count()


@pytest.mark.slow
@pytest.mark.skipif(_gpus() < 2, reason="needs at least 2 CUDA devices")
def test_ddp_replicas_on_gpus_end_identical(tmp_path):
    report = _check(tmp_path, [str(BIN / "accelerate"), "launch", "--config_file",
                               str(REPO_ROOT / "configs/hardware/accelerate/multi_gpu_ddp.yaml"),
                               "--num_processes", str(_gpus())])
    assert report["processes"] == _gpus() and report["tensors"] > 0
    assert report["identical"], report


@pytest.mark.slow
def test_ddp_replicas_on_two_cpu_processes_end_identical(tmp_path):
    report = _check(tmp_path, [str(BIN / "torchrun"), "--nproc_per_node", "2"])
    assert report["processes"] == 2 and report["tensors"] > 0
    assert report["identical"], report
