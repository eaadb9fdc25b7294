"""The ``medpref`` command: cache export/import round trip, doctor, run's stage names."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile

import pytest

from medpref import REPO_ROOT, cache_archive, cli, doctor
from medpref.llm.cache import ResponseCache
from medpref.llm.client import LLMClient
from medpref.llm.ledger import Ledger
from medpref.llm.replay import ReplayBackend
from medpref.llm.scripted import ScriptedBackend
from medpref.llm.types import CallSpec, GenerationParams

PROMPTS = [[{"role": "user", "content": f"question {i}"}] for i in range(5)]

CALL = CallSpec("judge", "", 8)


def make_repo(root, files=None):
    """A minimal repository: params.yaml (cache dir), dvc.lock, and optional files."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "params.yaml").write_text("shared:\n  llm:\n    cache_dir: data/cache/llm\n")
    (root / "dvc.lock").write_text(
        "schema: '2.0'\nstages:\n  toy:\n    cmd: x\n    outs:\n"
        "    - path: data/toy/out.jsonl\n    - path: data/toy/folder\n")
    for rel, data in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def fill_cache(root, stage="01_toy"):
    """Run a scripted 'stage' whose calls land in the repo's cache; returns its answers."""
    cache = ResponseCache(root / "data/cache/llm" / f"{stage}.sqlite")
    backend = ScriptedBackend(lambda r: "answer to " + r.messages[-1]["content"])
    client = LLMClient("judge", backend, GenerationParams(), cache=cache,
                       ledger=Ledger(stage))
    answers = [c.text for c in client.chat_many(PROMPTS, CALL)]
    identity = backend.identity()
    cache.close()
    return answers, identity


def test_export_import_round_trip_is_byte_identical(tmp_path):
    src = make_repo(tmp_path / "a", {"data/toy/out.jsonl": b'{"x": 1}\n',
                                     "data/toy/folder/part.bin": bytes(range(256))})
    fill_cache(src, "01_toy")
    fill_cache(src, "02_other")
    archive = tmp_path / "release" / "cache.tar.gz"
    manifest = cache_archive.export_archive(src, archive, commit="abc")

    names = set(manifest["files"])   # the caches only: outputs travel by dvc push / pull
    assert names == {"data/cache/llm/01_toy.sqlite", "data/cache/llm/02_other.sqlite"}
    dst = make_repo(tmp_path / "b")
    report = cache_archive.import_archive(archive, dst)
    assert sorted(report.written) == sorted(names)
    for name in names:
        assert (dst / name).read_bytes() == (src / name).read_bytes(), name
        assert cache_archive.sha256_bytes((dst / name).read_bytes()) == \
            manifest["files"][name]["sha256"]
    # importing again changes nothing; exporting again gives the same archive bytes
    assert cache_archive.import_archive(archive, dst).written == []
    again = tmp_path / "again.tar.gz"
    cache_archive.export_archive(src, again, commit="abc")
    assert again.read_bytes() == archive.read_bytes()


def test_without_outputs_only_caches_travel(tmp_path):
    src = make_repo(tmp_path / "a", {"data/toy/out.jsonl": b"1\n"})
    fill_cache(src)
    manifest = cache_archive.export_archive(src, tmp_path / "c.tar.gz")
    assert [f["kind"] for f in manifest["files"].values()] == ["llm_cache"]


def test_imported_cache_replays_every_call(tmp_path):
    """After import on a fresh checkout a replay backend answers everything: 0 calls."""
    src = make_repo(tmp_path / "a")
    answers, identity = fill_cache(src)
    archive = tmp_path / "cache.tar.gz"
    cache_archive.export_archive(src, archive)
    dst = make_repo(tmp_path / "fresh")
    cache_archive.import_archive(archive, dst)

    cache = ResponseCache(dst / "data/cache/llm/01_toy.sqlite")
    ledger = Ledger("01_toy")
    client = LLMClient("judge", ReplayBackend(identity), GenerationParams(),
                       cache=cache, ledger=ledger)
    assert [c.text for c in client.chat_many(PROMPTS, CALL)] == answers
    roles = ledger.totals()["roles"]
    assert roles["judge"]["calls"] == 0
    cache.close()


def test_import_refuses_tampering_and_escapes(tmp_path):
    src = make_repo(tmp_path / "a")
    fill_cache(src)
    good = tmp_path / "good.tar.gz"
    manifest = cache_archive.export_archive(src, good)
    name = next(iter(manifest["files"]))

    # a member whose bytes no longer match the manifest
    bad = tmp_path / "bad.tar.gz"
    with tarfile.open(good) as tin, tarfile.open(bad, "w:gz") as tout:
        for m in tin.getmembers():
            data = tin.extractfile(m).read()
            if m.name == name:
                data = data[:-1] + bytes([data[-1] ^ 1])
            cache_archive._tar_add(tout, m.name, data)
    with pytest.raises(cache_archive.ArchiveError, match="SHA-256"):
        cache_archive.import_archive(bad, make_repo(tmp_path / "b"))

    # a manifest naming a path outside the repository
    evil = tmp_path / "evil.tar.gz"
    payload = b"x"
    evil_manifest = {"format": cache_archive.FORMAT, "files": {
        "../outside.txt": {"kind": "dvc_out", "size": 1,
                           "sha256": cache_archive.sha256_bytes(payload)}}}
    with tarfile.open(evil, "w:gz") as tout:
        cache_archive._tar_add(tout, "MANIFEST.json", json.dumps(evil_manifest).encode())
        cache_archive._tar_add(tout, "../outside.txt", payload)
    with pytest.raises(cache_archive.ArchiveError, match="outside"):
        cache_archive.import_archive(evil, make_repo(tmp_path / "c"))
    assert not (tmp_path / "outside.txt").exists()


def test_import_does_not_overwrite_different_files_without_force(tmp_path):
    src = make_repo(tmp_path / "a")
    fill_cache(src)
    archive = tmp_path / "c.tar.gz"
    cache_archive.export_archive(src, archive)
    dst = make_repo(tmp_path / "b", {"data/cache/llm/01_toy.sqlite": b"local work"})
    with pytest.raises(cache_archive.ArchiveError, match="--force"):
        cache_archive.import_archive(archive, dst)
    assert (dst / "data/cache/llm/01_toy.sqlite").read_bytes() == b"local work"
    cache_archive.import_archive(archive, dst, force=True)
    assert (dst / "data/cache/llm/01_toy.sqlite").read_bytes() == \
        (src / "data/cache/llm/01_toy.sqlite").read_bytes()


def test_export_without_cache_says_so(tmp_path, capsys):
    root = make_repo(tmp_path / "a")
    assert cli.main(["--root", str(root), "cache", "export", str(tmp_path / "x.tar.gz")]) == 1
    assert "no LLM cache" in capsys.readouterr().err


# -- doctor ---------------------------------------------------------------------------------

def healthy_repo(tmp_path):
    root = make_repo(tmp_path / "repo", {"models/m/weights.bin": b"w" * 10,
                                         "requirements.lock": b"torch==2.13.0\n"})
    (root / ".dvc").mkdir()
    sha = cache_archive.sha256_bytes(b"w" * 10)
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


def test_run_with_an_overlay_calls_dvc_exp_run_and_the_old_flag_names_the_new(monkeypatch,
                                                                                capsys):
    seen = {}
    monkeypatch.setattr(cli.subprocess, "call", lambda cmd, cwd: seen.update(cmd=cmd) or 0)
    assert cli.main(["run", "--overlay", "paper", "tables"]) == 0
    cmd = seen["cmd"]
    assert cmd[cmd.index("exp"):cmd.index("exp") + 2] == ["exp", "run"] and cmd[-1] == "tables"
    assert {"++training.recipe=paper", "++training.hardware=gpu",
            "++rem.train.hardware=gpu"} <= set(cmd)
    assert "with overlay 'paper'" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["run", "--profile", "paper", "tables"])
    assert "--profile is now --overlay" in capsys.readouterr().err


def test_help_works_as_a_process():
    out = subprocess.run([sys.executable, "-m", "medpref", "--help"], capture_output=True,
                         text=True, check=True).stdout
    for word in ("run", "cache", "doctor"):
        assert word in out
