"""Built-in strategy ``gpt4_rank`` (the follow-up's baseline, :mod:`medpref.annotation.judging`):
the judge role picks one of the two candidates of each item; registered here, in its own
module, as a user's strategy is (:mod:`medpref.annotation.strategies`)."""

from __future__ import annotations

from medpref.annotation.stage import run_gpt4_rank
from medpref.annotation.strategies import StrategyResult, register_strategy


@register_strategy("gpt4_rank")
def gpt4_rank(inputs) -> list[StrategyResult]:
    with inputs.stage.step("gpt4_rank"):
        return run_gpt4_rank(inputs.stage, inputs.items)
