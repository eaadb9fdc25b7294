"""Which doctors the SP test evaluates: the configured roles plus every trained policy.

A trained policy is a LoRA adapter folder (it holds ``adapter_config.json``) under
``simulation.policies_dir``; it is evaluated as the policy role's base model + that
adapter, named by its path below the folder (``dpo/cai_dep_3`` …). The PLPF Table 3
cell of a policy (weighting × trajectory length) is read from its name.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from medpref.simulation.config import DoctorConfig


def discover_policies(root: Path, role: str) -> list[DoctorConfig]:
    """Every adapter folder below ``root`` (sorted; none when ``root`` is absent)."""
    if not root.is_dir():
        return []
    found = sorted(p.parent for p in root.rglob("adapter_config.json")
                   if not any(part.startswith("checkpoint-") for part in p.parts))
    return [DoctorConfig(name=str(p.relative_to(root)).replace("\\", "/"), role=role,
                         adapter=str(p)) for p in found]


def all_doctors(configured: Sequence[DoctorConfig], root: Path | None,
                role: str) -> list[DoctorConfig]:
    """The configured doctors, then discovered policies not already configured."""
    names = {d.name for d in configured}
    adapters = {str(Path(d.adapter).resolve()) for d in configured if d.adapter}
    extra = [] if root is None else [d for d in discover_policies(root, role)
                                     if d.name not in names
                                     and str(Path(d.adapter).resolve()) not in adapters]
    return [*configured, *extra]


def grid_cell(name: str, pattern: str) -> tuple[str, int] | None:
    """(weighting, trajectory) of a policy trained for one PLPF Table 3 cell, else None."""
    m = re.search(pattern, name)
    return (m.group("weighting"), int(m.group("trajectory"))) if m else None


def table6_policy(name: str, wanted: str) -> bool:
    """Whether a policy's last path part is the one Table 6 names (exact match)."""
    return name.rsplit("/", 1)[-1] == wanted
