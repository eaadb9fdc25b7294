"""Built-in strategy ``agent`` (the follow-up's Multiple Agent Ranking; the algorithm is
:mod:`medpref.annotation.agent`); registered here, in its own module, as a user's
strategy is (:mod:`medpref.annotation.strategies`; the name ``agent`` is looked up in
this module: :data:`medpref.registry.STRATEGY_MODULES`)."""

from __future__ import annotations

from medpref.annotation.stage import run_agent
from medpref.annotation.strategies import StrategyResult, register_strategy


@register_strategy("agent")
def agent(inputs) -> list[StrategyResult]:
    with inputs.stage.step("agent"):
        return [run_agent(inputs.stage, inputs.items)]
