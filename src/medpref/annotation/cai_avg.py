"""Built-in strategy ``cai_avg`` (CAI ranking, :mod:`medpref.annotation.cai`, with the
``avg`` rule weighting of Eq. 4); registered here, in its own module, as a user's
strategy is (:mod:`medpref.annotation.strategies`)."""

from __future__ import annotations

from medpref.annotation.stage import run_cai
from medpref.annotation.strategies import StrategyResult, register_strategy


@register_strategy("cai_avg")
def cai_avg(inputs) -> list[StrategyResult]:
    return [run_cai(inputs.items, inputs.scored(), inputs.flowchart, inputs.p, "avg")]
