"""Files one stage writes for a later stage to read: named here once, declared as the
producing stage's outputs and as the reading stage's dependencies
(:mod:`medpref.dvcstages`), read by the consumer from the file, never rebuilt from the
producer's params.

- :data:`POLICY_ROLES`: stage 05's trained policies, one record per policy in training
  order (the SFT policy, then each DPO run): ``run``, ``backend``, ``model``, ``adapter``
  (``medpref.training.outputs``, records ``policy_roles``); stage 06 tests each as a
  doctor. :data:`POLICY_ADAPTERS`: the folders those adapters live in.
- :data:`REM_ADAPTER`: stage 03's LoRA REM (the adapter and its task card), and
  :data:`REM_SCORERS`: its fitted scorers (one JSON per ``rem.scorers`` name); stages 04
  and 06 score with them. They are the defaults of ``rem.train.adapter_dir``,
  ``rem.fitted.model_dir`` and ``simulation.rem_adapter`` and stage 03's declared outputs.
- :data:`GRID_CELL`: a weighting × trajectory cell of stage 04's grid (PLPF Table 3) says
  which cell it is in its own data folder, beside the pairs it wrote; stage 05 copies the
  cell of the pairs a run trained on into that run's policy record (``cell``), and stage 06
  places a policy in Table 3 by that record, never by its name (:func:`grid_cell_of`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

POLICY_ROLES = "reports/05_training/summary/records/policy_roles.jsonl"
POLICY_ADAPTERS = ("data/05_training/sft", "data/05_training/dpo")
REM_ADAPTER = "data/03_rem/rem_lora"
REM_SCORERS = "data/03_rem/rem_encoder"
GRID_CELL = "cell.json"


def grid_cell_of(pairs: str | Path) -> dict[str, Any] | None:
    """The grid cell (``weighting``, ``trajectory``) whose folder holds the pairs file
    ``pairs`` (:data:`GRID_CELL` beside it), or None for pairs no grid cell wrote."""
    path = Path(pairs).parent / GRID_CELL
    if not path.exists():
        return None
    cell = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(cell, dict) or set(cell) != {"weighting", "trajectory"}:
        raise ValueError(f"{path}: a grid cell is {{weighting, trajectory}}, not {cell!r}")
    return cell
