"""``medpref doctor``: is this machine ready to run the pipeline?

Each check returns one line — ok, warn or fail — with what to do when it is not ok:
the embedded models against their manifest, the ``medpref`` Jupyter kernel, the Python
and torch versions, the environment variables the configured backends need (their
*names* only: a value is never read into the report), and DVC. A failed check makes the
command exit non-zero; warnings do not.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

from medpref.identity import sha256_of

OK, WARN, FAIL = "ok", "warn", "fail"
KERNEL_NAME = "medpref"
MIN_PYTHON = (3, 10)


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str

    def line(self) -> str:
        return f"[{self.status:>4}] {self.name}: {self.detail}"


def check_models(root: Path, verify_hashes: bool = True) -> Check:
    """``models/manifest.json`` exists and every file it lists is there (and hashes match)."""
    manifest_path = root / "models" / "manifest.json"
    fix = "run `make models` (python -m medpref.models.prepare)"
    if not manifest_path.exists():
        return Check("models", FAIL, f"{manifest_path.relative_to(root)} missing; {fix}")
    try:
        files = json.loads(manifest_path.read_text())["files"]
    except (ValueError, KeyError) as err:
        return Check("models", FAIL, f"manifest unreadable ({err}); {fix}")
    missing = [f for f in files if not (root / "models" / f).is_file()]
    if missing:
        return Check("models", FAIL, f"{len(missing)} file(s) missing, e.g. {missing[0]}; {fix}")
    if verify_hashes:
        bad = [f for f, sha in files.items() if sha256_of(root / "models" / f) != sha]
        if bad:
            return Check("models", FAIL, f"{len(bad)} file(s) differ from the manifest, "
                                         f"e.g. {bad[0]}; run `make models` with --force")
    how = "hashes match" if verify_hashes else "present (hashes not checked)"
    return Check("models", OK, f"{len(files)} files {how}")


def find_kernels() -> dict[str, str]:
    """Installed Jupyter kernel names → their resource folders."""
    try:
        from jupyter_client.kernelspec import KernelSpecManager
    except ImportError:
        return {}
    return KernelSpecManager().find_kernel_specs()


def check_kernel(kernels: dict[str, str] | None = None) -> Check:
    kernels = find_kernels() if kernels is None else kernels
    fix = (f"run `make kernel` (python -m ipykernel install --sys-prefix --name {KERNEL_NAME} "
           f"--display-name 'MedPref')")
    if KERNEL_NAME not in kernels:
        return Check("kernel", FAIL, f"no '{KERNEL_NAME}' Jupyter kernel; {fix}")
    spec_file = Path(kernels[KERNEL_NAME]) / "kernel.json"
    try:
        argv = json.loads(spec_file.read_text())["argv"]
    except (OSError, ValueError, KeyError):
        return Check("kernel", FAIL, f"{spec_file} unreadable; {fix}")
    python = argv[0]
    if os.path.isabs(python) and not Path(python).exists():
        return Check("kernel", FAIL, f"'{KERNEL_NAME}' points at {python}, which is gone; {fix}")
    return Check("kernel", OK, f"'{KERNEL_NAME}' → {python}")


def pinned_version(root: Path, package: str) -> str | None:
    lock = root / "requirements.lock"
    if not lock.exists():
        return None
    match = re.search(rf"^{re.escape(package)}==([^\s;]+)", lock.read_text(), re.MULTILINE)
    return match.group(1) if match else None


def check_python(version: tuple[int, ...] | None = None) -> Check:
    version = tuple(sys.version_info[:3]) if version is None else version
    text = ".".join(map(str, version))
    if version[:2] < MIN_PYTHON:
        return Check("python", FAIL, f"{text}; medpref needs >= {'.'.join(map(str, MIN_PYTHON))}")
    return Check("python", OK, f"{text} ({sys.executable})")


def check_torch(root: Path, installed: str | None = None) -> Check:
    if installed is None:
        try:
            import torch
        except ImportError:
            return Check("torch", FAIL, "not installed; `make env` (CPU wheel: see README)")
        installed = torch.__version__
    pin = pinned_version(root, "torch")
    base = installed.split("+")[0]
    if pin and base != pin:
        return Check("torch", WARN, f"{installed}, but requirements.lock pins {pin}")
    return Check("torch", OK, installed + (f" (pinned {pin})" if pin else ""))


def _backend_env_needs(params: dict, environ: dict[str, str]
                       ) -> Iterable[tuple[str, str, bool]]:
    """(role, env var name, required) for every role served by an OpenAI-compatible server.

    The key is required unless the server's URL is set (local vLLM/Ollama need no key);
    the URL is optional (the official API is the client's default)."""
    llm = (params.get("shared") or {}).get("llm") or {}
    servers = llm.get("servers") or {"openai": {}}
    for role, cfg in sorted((llm.get("roles") or {}).items()):
        if (cfg or {}).get("backend") != "openai":
            continue
        server = servers.get(cfg.get("server", "openai")) or {}
        url_env = server.get("base_url_env", "OPENAI_BASE_URL")
        key_env = server.get("api_key_env", "OPENAI_API_KEY")
        yield role, url_env, False
        yield role, key_env, url_env not in environ


def check_backends(root: Path, environ: dict[str, str] | None = None) -> Check:
    """Env vars of the configured openai roles are set (names reported, never values)."""
    environ = os.environ if environ is None else environ
    params_path = root / "params.yaml"
    if not params_path.exists():
        return Check("backends", FAIL, "params.yaml missing")
    params = yaml.safe_load(params_path.read_text()) or {}
    needs = list(_backend_env_needs(params, environ))
    if not needs:
        return Check("backends", OK, "every role runs locally (hf/replay); no env var needed")
    roles = sorted({r for r, _, _ in needs})
    missing = sorted({name for _, name, req in needs if req and name not in environ})
    present = sorted({name for _, name, _ in needs if name in environ})
    if missing:
        return Check("backends", FAIL, f"roles {', '.join(roles)} use openai; not set: "
                                       f"{', '.join(missing)}")
    return Check("backends", OK, f"roles {', '.join(roles)} use openai; set: "
                                 f"{', '.join(present) or 'none (default URL)'}")


def check_dvc(root: Path, run: Callable[[list[str]], str] | None = None) -> Check:
    if not (root / ".dvc").is_dir():
        return Check("dvc", FAIL, f"{root} is not a DVC repository (no .dvc/)")
    exe = shutil.which("dvc") or str(Path(sys.executable).with_name("dvc"))
    if not Path(exe).exists():
        return Check("dvc", FAIL, "dvc not found on PATH or beside python; `make env`")
    run = run or (lambda cmd: subprocess.run(cmd, cwd=root, capture_output=True, text=True,
                                             check=True).stdout)
    try:
        version = run([exe, "--version"]).strip()
    except (OSError, subprocess.CalledProcessError) as err:
        return Check("dvc", FAIL, f"`{exe} --version` failed: {err}")
    return Check("dvc", OK, f"{version} ({exe})")


def run_checks(root: Path, verify_hashes: bool = True) -> list[Check]:
    return [check_python(), check_torch(root), check_models(root, verify_hashes),
            check_kernel(), check_backends(root), check_dvc(root)]
