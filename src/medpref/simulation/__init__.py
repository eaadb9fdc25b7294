"""Stage 06_simulation: the Standardized Patient test and next-turn evaluation."""
