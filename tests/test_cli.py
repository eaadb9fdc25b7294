"""The ``medpref`` command: doctor, run's stage names and dvc calls, --help.

Sharing a run (the LLM caches included) is DVC's: tests/test_dvc_remote.py."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from medpref import REPO_ROOT, cli, doctor


def make_repo(root, files=None):
    """A minimal repository: params.yaml and optional files."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "params.yaml").write_text("shared:\n  llm:\n    cache_dir: data/cache/llm\n")
    for rel, data in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


# -- doctor ---------------------------------------------------------------------------------

def healthy_repo(tmp_path):
    root = make_repo(tmp_path / "repo", {"models/m/weights.bin": b"w" * 10,
                                         "requirements.lock": b"torch==2.13.0\n"})
    (root / ".dvc").mkdir()
    sha = hashlib.sha256(b"w" * 10).hexdigest()
    (root / "models/manifest.json").write_text(json.dumps({"files": {"m/weights.bin": sha}}))
    kernel = tmp_path / "kernels" / "medpref"
    kernel.mkdir(parents=True)
    (kernel / "kernel.json").write_text(json.dumps({"argv": [sys.executable, "-m",
                                                             "ipykernel_launcher"]}))
    return root, {"medpref": str(kernel)}


def test_doctor_healthy(tmp_path):
    root, kernels = healthy_repo(tmp_path)
    assert doctor.check_models(root).status == doctor.OK
    assert doctor.check_kernel(kernels).status == doctor.OK
    assert doctor.check_torch(root, installed="2.13.0+cpu").status == doctor.OK
    assert doctor.check_python((3, 11, 7)).status == doctor.OK
    assert doctor.check_backends(root, environ={}).status == doctor.OK
    assert doctor.check_dvc(root, run=lambda cmd: "3.67.1\n").status == doctor.OK


def test_doctor_broken(tmp_path):
    root, kernels = healthy_repo(tmp_path)
    (root / "models/m/weights.bin").write_bytes(b"tampered")
    check = doctor.check_models(root)
    assert check.status == doctor.FAIL and "differ" in check.detail
    assert doctor.check_models(root, verify_hashes=False).status == doctor.OK
    (root / "models/m/weights.bin").unlink()
    assert "missing" in doctor.check_models(root).detail
    (root / "models/manifest.json").unlink()
    assert doctor.check_models(root).status == doctor.FAIL

    assert doctor.check_kernel({}).status == doctor.FAIL
    gone = tmp_path / "kernels" / "medpref" / "kernel.json"
    gone.write_text(json.dumps({"argv": [str(tmp_path / "no-python"), "-m", "x"]}))
    assert "gone" in doctor.check_kernel(kernels).detail
    assert doctor.check_torch(root, installed="2.1.0").status == doctor.WARN
    assert doctor.check_python((3, 9, 0)).status == doctor.FAIL
    (root / ".dvc").rmdir()
    assert doctor.check_dvc(root, run=lambda cmd: "3.67.1").status == doctor.FAIL


def test_doctor_backends_names_env_vars_never_values(tmp_path):
    root, _ = healthy_repo(tmp_path)
    (root / "params.yaml").write_text(
        "shared:\n  llm:\n    roles:\n      judge: {backend: openai, model: gpt-4o}\n"
        "      policy: {backend: hf, model: models/m}\n")
    missing = doctor.check_backends(root, environ={})
    assert missing.status == doctor.FAIL and "OPENAI_API_KEY" in missing.detail
    secret = "sk-fake-not-a-real-key-123"
    ok = doctor.check_backends(root, environ={"OPENAI_API_KEY": secret})
    assert ok.status == doctor.OK and "judge" in ok.detail and secret not in ok.line()
    # a local server (URL set) needs no key
    local = doctor.check_backends(root, environ={"OPENAI_BASE_URL": "http://localhost:8000/v1"})
    assert local.status == doctor.OK and "localhost" not in local.line()


def test_doctor_command_exit_code(tmp_path, capsys, monkeypatch):
    root, kernels = healthy_repo(tmp_path)
    monkeypatch.setattr(doctor, "find_kernels", lambda: kernels)
    monkeypatch.setattr(doctor, "check_dvc", lambda r: doctor.Check("dvc", doctor.OK, "x"))
    assert cli.main(["--root", str(root), "doctor"]) == 0
    assert "0 problem(s)" in capsys.readouterr().out
    monkeypatch.setattr(doctor, "find_kernels", lambda: {})
    assert cli.main(["--root", str(root), "doctor"]) == 1
    assert "kernel" in capsys.readouterr().out


# -- run and --help -------------------------------------------------------------------------

def test_run_resolves_design_card_names():
    known = cli.dvc_stages(REPO_ROOT)
    assert cli.resolve_stage("03_rem", known) == "rem"
    assert cli.resolve_stage("rem", known) == "rem"
    assert cli.resolve_stage("annotation_grid@dep-3", known) == "annotation_grid@dep-3"
    with pytest.raises(SystemExit, match="unknown stage 'nope'"):
        cli.resolve_stage("nope", known)


def test_run_calls_dvc_repro(monkeypatch, capsys):
    seen = {}
    monkeypatch.setattr(cli.subprocess, "call", lambda cmd, cwd: seen.update(cmd=cmd) or 0)
    assert cli.main(["run", "03_rem", "--force"]) == 0
    assert seen["cmd"][-3:] == ["repro", "rem", "--force"]
    assert "dvc repro rem --force" in capsys.readouterr().out


def test_run_with_an_overlay_calls_dvc_exp_run(monkeypatch, capsys):
    seen = {}
    monkeypatch.setattr(cli.subprocess, "call", lambda cmd, cwd: seen.update(cmd=cmd) or 0)
    assert cli.main(["run", "--overlay", "paper", "tables"]) == 0
    cmd = seen["cmd"]
    assert cmd[cmd.index("exp"):cmd.index("exp") + 2] == ["exp", "run"] and cmd[-1] == "tables"
    assert {"++training.recipe=paper", "++training.hardware=gpu",
            "++rem.train.hardware=gpu"} <= set(cmd)
    assert "with overlay 'paper'" in capsys.readouterr().out


def test_help_works_as_a_process():
    out = subprocess.run([sys.executable, "-m", "medpref", "--help"], capture_output=True,
                         text=True, check=True).stdout
    for word in ("run", "tables", "dvc-yaml", "doctor", "dvc push", "dvc pull"):
        assert word in out, word
