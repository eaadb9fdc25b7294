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
"""

from __future__ import annotations

POLICY_ROLES = "reports/05_training/summary/records/policy_roles.jsonl"
POLICY_ADAPTERS = ("data/05_training/sft", "data/05_training/dpo")
REM_ADAPTER = "data/03_rem/rem_lora"
REM_SCORERS = "data/03_rem/rem_encoder"
