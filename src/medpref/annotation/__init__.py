"""Stage 04: preference annotation strategies (GPT-4 ranking, CAI ranking, multi-agent ranking)."""
