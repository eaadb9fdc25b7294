"""Hardware profiles (``configs/hardware/<name>.yaml``): where a training recipe runs.

A recipe (what to train, in params.yaml) and a profile (batch size, accumulation, bf16,
a step cap) are kept apart, as in the alignment-handbook, so the same recipe runs on a
2-core CPU for the embedded default and on a GPU for real runs by switching one param.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, ValidationError

from medpref.params import StrictModel, repo_path


class HardwareProfile(StrictModel):
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    per_device_batch_size: int = Field(4, ge=1, le=1024)
    grad_accumulation: int = Field(1, ge=1, le=1024)
    bf16: bool = False
    gradient_checkpointing: bool = False
    max_steps: int | None = Field(None, ge=1)
    num_threads: int | None = Field(None, ge=1, le=512)
    #: batches drawn from examples of similar length (less padding; another order)
    group_by_length: bool = False


def hardware_path(name: str) -> Path:
    """A profile name (``cpu``) or a path to a YAML file."""
    if name.endswith((".yaml", ".yml")):
        return repo_path(name)
    return repo_path(f"configs/hardware/{name}.yaml")


def load_hardware(name: str) -> HardwareProfile:
    """Load and validate a profile; errors name the file and the key."""
    path = hardware_path(name)
    if not path.exists():
        known = sorted(p.stem for p in repo_path("configs/hardware").glob("*.yaml"))
        raise FileNotFoundError(f"no hardware profile '{name}' ({path}); known: {known}")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    try:
        return HardwareProfile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        raise ValueError(f"{path}: '{key}': {err['msg']}") from None
