"""Which doctors the SP test evaluates: the configured roles plus every trained policy.

Trained policies come from stage 05 (:func:`medpref.finetune.policies.trained_policies`:
the SFT run and each DPO run that trained); each is the policy role's base model + that
run's LoRA adapter, named by its run (``sft``, ``cai_dep``, ``grid_avg_1`` …). The PLPF
Table 3 cell of a policy (weighting × trajectory length) is read from its name.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from medpref.simulation.config import DoctorConfig


def trained_doctors(params) -> list[DoctorConfig]:
    """Stage 05's trained policies as doctors (none before stage 05 has run)."""
    from medpref.finetune.policies import trained_policies

    base_role = params.training.base_role
    return [DoctorConfig(name=p.run, role=base_role, adapter=p.adapter)
            for p in trained_policies(params)]


def all_doctors(configured: Sequence[DoctorConfig], trained: Sequence[DoctorConfig]
                ) -> list[DoctorConfig]:
    """The configured doctors, then trained policies not already configured by name."""
    names = {d.name for d in configured}
    return [*configured, *[d for d in trained if d.name not in names]]


def grid_cell(name: str, pattern: str) -> tuple[str, int] | None:
    """(weighting, trajectory) of a policy trained for one PLPF Table 3 cell, else None."""
    m = re.search(pattern, name)
    return (m.group("weighting"), int(m.group("trajectory"))) if m else None


def table6_policy(name: str, wanted: str) -> bool:
    """Whether a policy is the one a Table 6 column names (its run name, exactly)."""
    return name == wanted
