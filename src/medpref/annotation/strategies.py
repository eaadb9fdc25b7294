"""Stage 04's annotation strategies by name; ``annotation.strategies`` lists which run.

That one list drives the pipeline: stage 04 runs the strategies in its order and writes
``<annotation.output_dir>/pairs/<name>.jsonl`` for each, stage 05 trains one DPO run per
strategy (``medpref.finetune.policies.dpo_runs``), and dvc.yaml's ``annotation`` and
``training_dpo`` stages read it. A strategy is a function of the run's inputs (stage 04's
``AnnotationInputs``: the stage, the items, the rules, the REM-scored states) that returns
its results: the first is written and trained on, any others are only shown in the
summary (gpt4_rank's other reading). ``register_strategy`` records one under its name.

A new strategy is one module plus one list entry: a name no loaded module registered is
looked up in the module of the same name in this package (``medpref.annotation.<name>``),
which registers it when imported; the module ``control`` registers ``control_process``.

A strategy registered with ``control=True`` is a *control*, not an annotation strategy of
the papers: its pairs are planted (``control_process``: the real turn that takes the
history over a premature diagnosis) to show that the DPO recipe can move a policy at all.
Its DPO run trains like the others; the runs table marks it and the paper tables leave
it out. The controls' names are :data:`medpref.control_runs.CONTROLS`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from medpref.annotation.pairs import Decision
from medpref.contracts import PreferencePair
from medpref.control_runs import CONTROLS

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
#: modules that register strategies not named after them
_REGISTERING = {"control_process": "control"}


def register_strategy(name: str, control: bool = False) -> Callable[[StrategyFn], StrategyFn]:
    """Decorator: ``fn(inputs) -> [written result, *shown-only results]`` is strategy
    ``name``; ``control`` says it is one of :data:`CONTROLS` (checked: the two agree)."""
    if control != (name in CONTROLS):
        raise ValueError(f"annotation strategy '{name}': control={control} but CONTROLS "
                         f"{'lists' if name in CONTROLS else 'does not list'} it")

    def deco(fn: StrategyFn) -> StrategyFn:
        if name in STRATEGIES and STRATEGIES[name] is not fn:
            raise ValueError(f"annotation strategy '{name}' is registered twice")
        STRATEGIES[name] = fn
        return fn
    return deco


def import_strategy_module(name: str) -> None:
    """Import the module that registers strategy ``name`` if it exists:
    ``medpref.annotation.<name>`` (or the one ``_REGISTERING`` names)."""
    module = f"{__package__}.{_REGISTERING.get(name, name)}"
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:  # the module exists but an import inside it failed
            raise
