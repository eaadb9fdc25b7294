"""Stage 05: the policy's SFT and DPO, over the fine-tuning library (:mod:`medpref.finetune`).

``config`` (params section ``training``: the recipes), ``arguments`` (recipe + hardware →
trl/peft args), ``dialogue_sft`` (SFT of the policy on doctor turns), ``dpo`` (DPO from the
SFT adapter), ``heldout``, ``reuse``, ``stage``, ``ddp_check`` (DDP replicas end identical).
"""
