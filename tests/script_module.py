"""A repository script (``scripts/`` or ``benchmarks/``) loaded as a module for its tests."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from medpref import REPO_ROOT


def script_module(relpath: str) -> ModuleType:
    """The script at ``relpath`` (from the repository root), executed once per call and
    registered under its file name (its dataclasses look their module up there)."""
    path = REPO_ROOT / relpath
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module
