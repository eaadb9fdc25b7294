"""Training recipes over a small library.

``sft`` — answer-only LoRA SFT (the REM); ``hardware`` — where and how fast a recipe
trains (``configs/hardware/``, for the REM and the policy); stage 05: ``config`` (params
section ``training``: the recipes), ``arguments`` (recipe + hardware → trl/peft args),
``dialogue_sft`` (SFT of the policy on doctor turns), ``dpo`` (DPO from the SFT adapter),
``runs`` (resume, outputs), ``policies`` (trained policies as backend roles), ``stage``,
``ddp_check`` (DDP replicas end identical).
"""
