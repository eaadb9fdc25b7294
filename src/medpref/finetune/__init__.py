"""Fine-tuning, shared by the REM (stage 03) and the policy (stage 05).

``recipe`` — what one trainer trains, in trl's and peft's own field names, and the trainer
arguments it makes with a hardware section laid over it; ``sft`` — answer-only LoRA SFT:
base model, LoRA, the trainer, the adapter and its task card; ``hardware`` — where and how
fast a recipe trains (``configs/hardware/``); ``runs`` — resume from checkpoints, fit,
save the trained adapter, run cards; ``policies`` — the trained policies as backend roles
(what stage 06 asks stage 05's outputs for).
"""
