"""MedPref: reproducible medical-dialogue preference alignment (PLPF and friends)."""

from pathlib import Path

__version__ = "0.1.0"

#: Repository root (``src/medpref/__init__.py`` → two levels up from ``src``).
REPO_ROOT = Path(__file__).resolve().parents[2]
