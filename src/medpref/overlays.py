"""Params overlays: named sets of overrides on ``params.yaml`` (``configs/overlays/*.yaml``).

An overlay is applied the DVC way, as ``dvc exp run -S key=value ...``, so the experiment's
``params.yaml`` records exactly what ran and ``dvc exp show`` compares it with the default.
``medpref run --overlay paper STAGE`` does that; :func:`set_args` gives the arguments.
An overlay may choose a training recipe and a hardware like any other params key
(``training.recipe``, ``training.hardware``, ``rem.train.hardware``).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

from medpref import REPO_ROOT
from medpref.params import Params, parse_params

OVERLAY_DIR = Path("configs") / "overlays"


def overlay_path(name: str, root: Path = REPO_ROOT) -> Path:
    path = root / OVERLAY_DIR / f"{name}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in (root / OVERLAY_DIR).glob("*.yaml"))
        raise SystemExit(f"no params overlay '{name}' in {OVERLAY_DIR} (known: {known})")
    return path


def load_overlay(name: str, root: Path = REPO_ROOT) -> dict[str, Any]:
    return yaml.safe_load(overlay_path(name, root).read_text(encoding="utf-8")) or {}


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` → ``{"a.b": 1}`` (lists stay whole values)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def apply(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``base`` with each dotted override set (a new dict; ``base`` is not changed)."""
    merged = copy.deepcopy(base)
    for dotted, value in overrides.items():
        node = merged
        *parents, last = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return merged


def validate(name: str, root: Path = REPO_ROOT) -> Params:
    """The params an overlay gives: every key must exist and every value be valid."""
    base = yaml.safe_load((root / "params.yaml").read_text(encoding="utf-8"))
    merged = apply(base, flatten(load_overlay(name, root)))
    return parse_params(merged, f"params.yaml + {OVERLAY_DIR / name}.yaml")


def set_args(name: str, root: Path = REPO_ROOT) -> list[str]:
    """``-S ++key=value`` arguments for ``dvc exp run`` (values as compact JSON/YAML flow).

    ``++`` (Hydra's add-or-override) lets an overlay set a key ``params.yaml`` leaves at
    its default (a new server entry, a server's ``continue_prefix``), which plain
    ``key=value`` would have dvc refuse; every key was validated against the params
    models first, so nothing unknown gets in."""
    validate(name, root)
    args = []
    for dotted, value in flatten(load_overlay(name, root)).items():
        text = value if isinstance(value, str) else json.dumps(value)
        args += ["-S", f"++{dotted}={text}"]
    return args
