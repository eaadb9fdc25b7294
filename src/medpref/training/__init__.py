"""Training recipes over a small library.

``sft`` — answer-only LoRA SFT (the REM); ``hardware`` — the REM's hardware profiles;
stage 05: ``config`` (params section ``training``), ``profiles`` (profile → trl args),
``dialogue_sft`` (SFT of the policy on doctor turns), ``dpo`` (DPO from the SFT adapter),
``runs`` (resume, outputs), ``policies`` (trained policies as backend roles), ``stage``,
``ddp_check`` (DDP replicas end identical).
"""
