"""Metrics shared across stages (``text``: language-aware ROUGE, BLEU, self-BLEU)."""
