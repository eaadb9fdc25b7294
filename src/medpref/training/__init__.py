"""Training recipes over a small library: hardware profiles, LoRA SFT (and later DPO)."""
