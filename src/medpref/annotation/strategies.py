"""Stage 04's annotation strategies by name; ``annotation.strategies`` lists which run.

That one list drives the pipeline: stage 04 runs the strategies in its order and writes
``<annotation.output_dir>/pairs/<name>.jsonl`` for each, stage 05 trains one DPO run per
strategy (``medpref.training.policies.dpo_runs``), and dvc.yaml's ``annotation`` and
``training_dpo`` stages read it. A strategy is a function of the run's inputs (stage 04's
``AnnotationInputs``: the stage, the items, the rules, the REM-scored states) that returns
its results: the first is written and trained on, any others are only shown in the
summary (gpt4_rank's other reading). ``register_strategy`` records one under its name.

A new strategy is one module plus one list entry: a name no loaded module registered is
looked up in the module of the same name in this package (``medpref.annotation.<name>``),
which registers it when imported.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from medpref.annotation.pairs import Decision
from medpref.contracts import PreferencePair

PARAM = "annotation.strategies"


@dataclass
class StrategyResult:
    """One strategy's output: a decision per item, the pairs kept, the raw model answers."""

    name: str
    decisions: list[Decision]
    pairs: list[PreferencePair]
    records: list[dict] = field(default_factory=list)
    prompts: dict[str, str] = field(default_factory=dict)


StrategyFn = Callable[[Any], list[StrategyResult]]
STRATEGIES: dict[str, StrategyFn] = {}


def register_strategy(name: str) -> Callable[[StrategyFn], StrategyFn]:
    """Decorator: ``fn(inputs) -> [written result, *shown-only results]`` is strategy ``name``."""
    def deco(fn: StrategyFn) -> StrategyFn:
        if name in STRATEGIES and STRATEGIES[name] is not fn:
            raise ValueError(f"annotation strategy '{name}' is registered twice")
        STRATEGIES[name] = fn
        return fn
    return deco


def _import_module_named(name: str) -> None:
    """Import ``medpref.annotation.<name>`` if it exists (it registers its strategy)."""
    module = f"{__package__}.{name}"
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:  # the module exists but an import inside it failed
            raise


def strategy_plan(names: Sequence[str]) -> list[tuple[str, StrategyFn]]:
    """The strategies ``annotation.strategies`` names, in its order; an unknown name is an
    error naming the param and the known strategies (before any model is called)."""
    importlib.import_module(f"{__package__}.stage")  # registers the built-in strategies
    plan = []
    for name in names:
        if name not in STRATEGIES:
            _import_module_named(name)
        if name not in STRATEGIES:
            raise ValueError(f"{PARAM}: no annotation strategy '{name}' (known: "
                           f"{', '.join(sorted(STRATEGIES))})")
        plan.append((name, STRATEGIES[name]))
    return plan
