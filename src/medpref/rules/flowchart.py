"""Rules of the diagnostic flowchart (contract "Rule"), loaded from YAML and checked.

A flowchart is a list of rules. Goal rules (``kind: goal``) name their ``predecessors``
(goals that must be met first, r' ≺ r) and the constraint rules acting on them
(``constrained_by``, r' → r). Loading rejects unknown ids, wrong kinds and cycles with
an error that names the rule, so a user can swap in another flowchart (another
specialty, another process) without touching code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator


class RulesError(ValueError):
    """An invalid flowchart; the message names the file and the rule."""


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    name: str
    kind: Literal["goal", "constraint"]
    text: str
    predecessors: tuple[str, ...] = ()
    constrained_by: tuple[str, ...] = ()
    criteria: dict[int, str]
    hints: tuple[str, ...] = ()
    rationale: str | None = None

    @field_validator("criteria")
    @classmethod
    def _scores_0_1_2(cls, criteria: dict[int, str]) -> dict[int, str]:
        if set(criteria) != {0, 1, 2}:
            raise ValueError(f"criteria must give scores 0, 1 and 2, got {sorted(criteria)}")
        return criteria


class Flowchart:
    """An ordered, validated set of rules with dependency queries."""

    def __init__(self, rules: list[Rule], source: str = "<memory>"):
        self.rules = list(rules)
        self.source = source
        self.by_id = {r.id: r for r in self.rules}
        self._check()

    def __iter__(self):
        return iter(self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    def __getitem__(self, rule_id: str) -> Rule:
        return self.by_id[rule_id]

    @property
    def ids(self) -> list[str]:
        return [r.id for r in self.rules]

    @property
    def goals(self) -> list[Rule]:
        return [r for r in self.rules if r.kind == "goal"]

    @property
    def constraints(self) -> list[Rule]:
        return [r for r in self.rules if r.kind == "constraint"]

    def constrained_goals(self, constraint_id: str) -> list[str]:
        """Goal rules that a constraint rule acts on."""
        return [g.id for g in self.goals if constraint_id in g.constrained_by]

    def edges(self) -> list[tuple[str, str, str]]:
        """(from, to, kind) for drawing: 'precedes' r' ≺ r and 'constrains' r' → r."""
        out = [(p, r.id, "precedes") for r in self.goals for p in r.predecessors]
        out += [(c, r.id, "constrains") for r in self.goals for c in r.constrained_by]
        return out

    def _fail(self, rule_id: str, message: str) -> None:
        raise RulesError(f"{self.source}: rule '{rule_id}': {message}")

    def _check(self) -> None:
        seen = set()
        for r in self.rules:
            if r.id in seen:
                self._fail(r.id, "duplicate id")
            seen.add(r.id)
        for r in self.rules:
            for ref in (*r.predecessors, *r.constrained_by):
                if ref not in self.by_id:
                    self._fail(r.id, f"refers to unknown rule '{ref}'")
            for p in r.predecessors:
                if self.by_id[p].kind != "goal":
                    self._fail(r.id, f"predecessor '{p}' is not a goal rule")
            for c in r.constrained_by:
                if self.by_id[c].kind != "constraint":
                    self._fail(r.id, f"'{c}' in constrained_by is not a constraint rule")
            if r.kind == "constraint" and (r.predecessors or r.constrained_by):
                self._fail(r.id, "a constraint rule has no predecessors or constraints")
        self._check_acyclic()

    def _check_acyclic(self) -> None:
        state: dict[str, int] = {}  # 1 = on the path, 2 = done

        def visit(rid: str, path: list[str]) -> None:
            if state.get(rid) == 2:
                return
            if state.get(rid) == 1:
                cycle = " → ".join(path[path.index(rid):] + [rid])
                self._fail(rid, f"predecessors form a cycle: {cycle}")
            state[rid] = 1
            for p in self.by_id[rid].predecessors:
                visit(p, path + [rid])
            state[rid] = 2

        for r in self.rules:
            visit(r.id, [])


def parse_rules(data: object, source: str = "<memory>") -> Flowchart:
    if not isinstance(data, list):
        raise RulesError(f"{source}: a flowchart is a YAML list of rules")
    rules = []
    for i, item in enumerate(data):
        rid = item.get("id", f"#{i + 1}") if isinstance(item, dict) else f"#{i + 1}"
        try:
            rules.append(Rule.model_validate(item))
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"]) or "<rule>"
            raise RulesError(f"{source}: rule '{rid}': field '{field}': {err['msg']}") from None
    return Flowchart(rules, source)


def load_rules(path: str | Path) -> Flowchart:
    """Load and validate a flowchart YAML file."""
    path = Path(path)
    with open(path, encoding="utf-8") as fh:
        return parse_rules(yaml.safe_load(fh), str(path))
