"""The trained policies as backend roles: base model + adapter, evaluated through ``hf``.

Stage 05 writes one folder per run (``<dpo.output_dir>/<run>/``) holding the adapter and
``run.json``, or ``skipped.json`` when the run could not train. Stage 05's summary lists
what trained (:func:`trained_policies`), each with the grid cell its pairs came from
(:func:`policy_cell`), in its hand-off records (:data:`medpref.handoffs.POLICY_ROLES`),
which stage 06 reads. :func:`register_policy_roles` serves them in a session (a notebook,
a script): then ``stage.role("policy_cai_dep")`` is the ``policy`` role's model with that
run's adapter, with its own cache identity (the adapter's hash).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medpref.finetune.runs import read_run_card
from medpref.finetune.sft import portable_path
from medpref.params import Params, RoleConfig, repo_path

SFT_RUN = "sft"


@dataclass(frozen=True)
class TrainedPolicy:
    run: str            # "sft" or a DPO run (policies.dpo_runs)
    role: str           # the role name it is registered under: policy_<run>
    adapter: str        # repo-relative adapter folder


def dpo_runs(params: Params) -> dict[str, str]:
    """Every DPO run → its pairs file, in order: one run per annotation strategy
    (``annotation.strategies``, named after it, on the pairs stage 04 writes for it), then
    ``training.dpo.runs`` (the grid cells). A name in both is an error."""
    ann = params.annotation
    runs = {name: ann.pairs_file(name) for name in ann.strategies}
    clash = sorted(set(runs) & set(params.training.dpo.runs))
    if clash:
        raise ValueError(f"training.dpo.runs: {clash} already the DPO runs of "
                         "annotation.strategies (each strategy has its run)")
    return {**runs, **params.training.dpo.runs}


def is_control(run: str) -> bool:
    """A control's run (``control_process``: planted pairs that show the recipe can move
    a policy), not an annotation strategy's (``medpref.control_runs.CONTROLS``)."""
    from medpref.control_runs import is_control as control

    return control(run)


def heldout_runs(params: Params) -> list[str]:
    """The runs whose held-out reward is cross-fitted (``training.dpo.heldout_runs``;
    ``strategies``: the annotation strategies' runs, the controls left out)."""
    wanted, runs = params.training.dpo.heldout_runs, dpo_runs(params)
    if wanted is None:
        return list(runs)
    if wanted == "strategies":
        return [name for name in params.annotation.strategies if not is_control(name)]
    unknown = sorted(set(wanted) - set(runs))
    if unknown:
        raise ValueError(f"training.dpo.heldout_runs names runs that are not DPO runs: "
                         f"{unknown} (known: {sorted(runs)})")
    return list(wanted)


def run_dir(params: Params, run: str) -> Path:
    """Where a run writes its adapter and card."""
    p = params.training
    if run == SFT_RUN:
        return repo_path(p.sft.output_dir)
    return repo_path(p.dpo.output_dir) / run


def adapter_dir(params: Params, run: str) -> Path:
    return run_dir(params, run) / "adapter"


def role_name(params: Params, run: str) -> str:
    return f"{params.training.base_role}_{run}"


def trained_policies(params: Params, include_sft: bool = True) -> list[TrainedPolicy]:
    """Every run that trained (skipped and not-yet-run ones are left out), in params order:
    the SFT policy first, then each DPO run."""
    runs = ([SFT_RUN] if include_sft else []) + list(dpo_runs(params))
    out = []
    for run in runs:
        card = read_run_card(run_dir(params, run))
        if card is not None and card.get("status") == "trained":
            out.append(TrainedPolicy(run, role_name(params, run),
                                     portable_path(adapter_dir(params, run))))
    return out


def policy_role(params: Params, policy: TrainedPolicy) -> RoleConfig:
    """The base role's config with the policy's adapter."""
    base = params.shared.llm.roles[params.training.base_role]
    return base.model_copy(update={"adapter": policy.adapter})


def policy_cell(params: Params, policy: TrainedPolicy) -> dict[str, Any]:
    """``{"cell": {weighting, trajectory}}`` when the policy trained on the pairs of a cell
    of stage 04's grid (PLPF Table 3; :func:`medpref.handoffs.grid_cell_of`), else ``{}``."""
    from medpref.handoffs import grid_cell_of

    pairs = dpo_runs(params).get(policy.run)
    cell = grid_cell_of(repo_path(pairs)) if pairs else None
    return {"cell": cell} if cell else {}


def register_policy_roles(params: Params, include_sft: bool = True) -> list[TrainedPolicy]:
    """Add a ``policy_<run>`` role per trained policy to ``params.shared.llm.roles`` (in
    memory), so an ``LLMSession`` over these params serves them like any other role."""
    policies = trained_policies(params, include_sft)
    for policy in policies:
        params.shared.llm.roles[policy.role] = policy_role(params, policy)
    return policies
