"""Which doctors the SP test evaluates: the configured roles plus every trained policy.

Trained policies come from stage 05's hand-off (:data:`medpref.handoffs.POLICY_ROLES`:
the SFT run and each DPO run that trained, in training order); each is the policy role's
base model + that run's LoRA adapter, named by its run (``sft``, ``cai_dep``,
``grid_avg_1`` …). The PLPF Table 3 cell of a policy (weighting × trajectory length) is
the ``cell`` stage 05 recorded for it: the cell of stage 04's grid whose pairs it trained
on (:func:`medpref.handoffs.grid_cell_of`), never read from its name.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from medpref.simulation.config import DoctorConfig, GridCell


def trained_doctors(params, path: str | Path | None = None) -> list[DoctorConfig]:
    """Stage 05's trained policies as doctors, read from its hand-off file (none before
    stage 05 has run). Each is the base role (``training.base_role``) with the policy's
    adapter; a record whose model is not the base role's, or that lacks a field, is an
    error naming the file, line and field."""
    from medpref.contracts import ContractError
    from medpref.handoffs import POLICY_ROLES
    from medpref.outputs import read_rows
    from medpref.params import repo_path

    path = Path(path) if path is not None else repo_path(POLICY_ROLES)
    if not path.exists():
        return []
    base_role = params.training.base_role
    base_model = params.shared.llm.roles[base_role].model
    out = []
    for line, row in enumerate(read_rows(path), start=1):
        for field in ("run", "model", "adapter"):
            if not row.get(field):
                raise ContractError(path, line, field, "missing")
        if Path(row["model"]) != Path(base_model):
            raise ContractError(path, line, "model", f"'{row['model']}' is not the "
                                f"'{base_role}' role's model '{base_model}'")
        try:
            cell = GridCell.model_validate(row["cell"]) if row.get("cell") else None
        except ValidationError as err:
            raise ContractError(path, line, "cell", str(err.errors()[0]["msg"])) from err
        out.append(DoctorConfig(name=row["run"], role=base_role, adapter=row["adapter"],
                                cell=cell))
    return out


def all_doctors(configured: Sequence[DoctorConfig], trained: Sequence[DoctorConfig]
                ) -> list[DoctorConfig]:
    """The configured doctors, then trained policies not already configured by name."""
    names = {d.name for d in configured}
    return [*configured, *[d for d in trained if d.name not in names]]


def grid_cell(d: DoctorConfig) -> tuple[str, int] | None:
    """(weighting, trajectory) of a model doctor trained for one PLPF Table 3 cell, else
    None."""
    return (d.cell.weighting, d.cell.trajectory) if d.kind == "model" and d.cell else None


def recorded_cells(sp_doctors) -> dict[str, tuple[str, int]]:
    """Each grid policy's cell by doctor name, from the doctors' records (``sp_doctors``)."""
    return {d["doctor"]: (d["cell"]["weighting"], int(d["cell"]["trajectory"]))
            for d in sp_doctors if d["kind"] == "model" and d.get("cell")}


def table6_policy(name: str, wanted: str) -> bool:
    """Whether a policy is the one a Table 6 column names (its run name, exactly)."""
    return name == wanted
