"""Provenance of every output: params hash, prompt hashes, model ids, seed, git commit."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from medpref import REPO_ROOT, __version__
from medpref.contracts import atomic_write_text

# What a run itself rewrites: changes there do not make the code that ran differ from the
# commit (the committed reports and dvc.lock are the previous run's until this one ends).
RUN_OUTPUTS = ("reports", "dvc.lock")


def git_commit(root: Path = REPO_ROOT) -> str:
    """The checked-out commit, with '+dirty' when tracked files other than the run's own
    outputs (``RUN_OUTPUTS``) have changes."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--",
                                ".", *(f":(exclude){p}" for p in RUN_OUTPUTS)],
                               cwd=root, capture_output=True, text=True).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def provenance(params: Any, sections: tuple[str, ...], *, models: dict[str, str] | None = None,
               prompts: dict[str, str] | None = None, seed: int | None = None,
               **extra: Any) -> dict[str, Any]:
    return {"medpref_version": __version__, "git_commit": git_commit(),
            "params_hash": params.section_hash(*sections), "params_sections": list(sections),
            "models": models or {}, "prompts": prompts or {}, "seed": seed, **extra}


def write_provenance(path: str | Path, record: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(record, indent=2, sort_keys=True) + "\n")
