"""The physician's flowchart as data: rules, their dependencies and scoring criteria."""

from medpref.rules.flowchart import Flowchart, Rule, RulesError, load_rules

__all__ = ["Flowchart", "Rule", "RulesError", "load_rules"]
