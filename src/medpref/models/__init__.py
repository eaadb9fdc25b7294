"""Embedded models: where they live and how they are prepared from PyPI wheels."""
