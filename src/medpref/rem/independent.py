"""The independent REM test: doctor turns no construction made, labelled per rule by
labellers who did not see any REM's score (``data/embedded/rem/independent.jsonl``).

A row: ``{"id", "history": [turns before the doctor turn], "turn": "<doctor turn>",
"source": {"kind": "model_heldout" | "model_sp" | "human_eval", ...},
"labels": {"l1": {"A": 0|1|2, ...}, "l2": {...}}}``. The gold score of a rule is
labeller ``l1``'s; ``l2`` (a second labeller, on some rows) gives Cohen's κ per rule with
a bootstrap interval that resamples rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import field_validator

from medpref.contracts import ContractError, Record, Turn, read_jsonl
from medpref.rem.eval_sets import EvalItem

GOLD = "l1"
SECOND = "l2"


class IndependentSource(Record):
    kind: Literal["model_heldout", "model_sp", "human_eval"]
    draw: int = 1          # which draw of scripts/rem_independent_items.py made the row


class LabelledTurn(Record):
    """A doctor turn after its history, scored per rule by one or more labellers
    (``labels[labeller][rule]``); the base of the independent test's rows and of the
    labelled policy turns (:mod:`medpref.rem.turns`)."""

    id: str
    history: list[Turn]
    turn: str
    labels: dict[str, dict[str, Literal[0, 1, 2]]]

    @field_validator("turn")
    @classmethod
    def _turn_has_text(cls, turn: str) -> str:
        if not turn.strip():
            raise ValueError("empty doctor turn")
        return turn

    @property
    def state(self) -> list[Turn]:
        return [*self.history, Turn(role="doctor", text=self.turn)]


class IndependentRow(LabelledTurn):
    source: IndependentSource


R = TypeVar("R", bound=LabelledTurn)


def load_labelled(path: str | Path, model: type[R], rule_ids: Sequence[str]) -> list[R]:
    """The rows of one labelled-turn file, validated: a distinct id, labeller ``l1``'s
    score for every rule, and no labeller scoring a rule outside ``rule_ids``; an error
    names the file, the line and the field."""
    rows = read_jsonl(path, model)
    seen: set[str] = set()
    for line, row in enumerate(rows, start=1):
        if row.id in seen:
            raise ContractError(path, line, "id", f"'{row.id}' appears twice")
        seen.add(row.id)
        if GOLD not in row.labels:
            raise ContractError(path, line, f"labels.{GOLD}", "missing (the gold labeller)")
        for who, by_rule in row.labels.items():
            unknown = sorted(set(by_rule) - set(rule_ids))
            if unknown:
                raise ContractError(path, line, f"labels.{who}", f"unknown rule(s) {unknown}")
        missing = [r for r in rule_ids if r not in row.labels[GOLD]]
        if missing:
            raise ContractError(path, line, f"labels.{GOLD}", f"no score for rule(s) {missing}")
    return rows


def load_independent(path: str | Path, rule_ids: Sequence[str]) -> list[IndependentRow]:
    """The independent test's rows, validated (:func:`load_labelled`)."""
    return load_labelled(path, IndependentRow, rule_ids)


def independent_items(rows: Sequence[IndependentRow], rule_ids: Sequence[str],
                      draw: int | None = None) -> list[EvalItem]:
    """One item per row × rule, gold = labeller l1's score; the state is the row.
    ``draw``: only that draw's rows."""
    return [EvalItem(f"{row.id}:{rule}", rule, row.state, int(row.labels[GOLD][rule]), row.id)
            for row in rows if draw is None or row.source.draw == draw for rule in rule_ids]


def independent_set_name(draw: int) -> str:
    """The evaluation set of one draw: ``independent`` (the first, pre-registered test),
    ``independent_2`` … (later draws, made to confirm on turns nobody had scored)."""
    return "independent" if draw == 1 else f"independent_{draw}"


def is_independent_set(name: str) -> bool:
    """Whether an evaluation set's name is one of the independent test's draws."""
    return name == "independent" or name.startswith("independent_")


def draws(rows: Sequence[IndependentRow]) -> list[int]:
    return sorted({row.source.draw for row in rows})


def kappa_rows(rows: Sequence[IndependentRow], rule_ids: Sequence[str], rounds: int,
               seed: int) -> list[dict]:
    """Per set (each draw, and every draw together when there are several) and per rule
    (and over all rules, pooled), on the rows both labellers scored: items, raw agreement,
    Cohen's κ and its bootstrap interval (rows resampled, seeded)."""
    numbers = draws(rows)
    scopes = [(independent_set_name(d), [d]) for d in numbers]
    if len(numbers) > 1:
        scopes.append(("all draws", numbers))
    out = []
    for name, which in scopes:
        both = [r for r in rows if SECOND in r.labels and r.source.draw in which]
        for scope in [*rule_ids, "all"]:
            rules = list(rule_ids) if scope == "all" else [scope]
            pairs = [[(r.labels[GOLD][u], r.labels[SECOND][u]) for u in rules
                      if u in r.labels[SECOND]] for r in both]
            out.append({"eval_set": name, "rule": scope, **kappa_interval(pairs, rounds, seed)})
    return out


def kappa_interval(pairs_by_row: Sequence[Sequence[tuple[int, int]]], rounds: int,
                   seed: int) -> dict[str, float]:
    """κ of (l1, l2) label pairs grouped by row, with a percentile bootstrap interval over
    rows (a resample where κ is undefined, one label only, is skipped). Each resample's κ
    comes from the sum of its rows' 3 × 3 agreement tables (:func:`kappa_of_table`:
    scikit-learn's κ, tested, without its ~1 ms of input checks per call), and so does the
    set's, so that it lies inside its interval to the last bit (scikit-learn's can be an
    ulp off: 0.7499999999999999 against 0.75)."""
    import numpy as np

    flat = [p for row in pairs_by_row for p in row]
    if not flat:
        return {"n": 0, "rows": 0, "agreement": math.nan, "kappa": math.nan,
                "lo": math.nan, "hi": math.nan}
    tables = np.zeros((len(pairs_by_row), 3, 3))
    for i, row in enumerate(pairs_by_row):
        for a, b in row:
            tables[i, a, b] += 1
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(rounds):
        draw = rng.integers(0, len(pairs_by_row), size=len(pairs_by_row))
        weights = np.bincount(draw, minlength=len(pairs_by_row))
        k = kappa_of_table(np.tensordot(weights, tables, axes=1))
        if not math.isnan(k):
            boots.append(k)
    lo, hi = np.quantile(boots, [0.025, 0.975]) if boots else (math.nan, math.nan)
    return {"n": len(flat), "rows": sum(1 for r in pairs_by_row if r),
            "agreement": sum(a == b for a, b in flat) / len(flat),
            "kappa": kappa_of_table(tables.sum(axis=0)), "lo": float(lo), "hi": float(hi)}


def kappa_of_table(table) -> float:
    """Cohen's κ of a 3 × 3 table of (l1, l2) counts; NaN when it is undefined (no
    pairs, or chance agreement of 1: one label only)."""
    n = float(table.sum())
    if n == 0:
        return math.nan
    observed = float(table.trace()) / n
    chance = float(table.sum(axis=1) @ table.sum(axis=0)) / n ** 2
    if chance >= 1.0 - 1e-12:
        return math.nan
    return (observed - chance) / (1.0 - chance)


def cohen_kappa(pairs: Sequence[tuple[int, int]]) -> float:
    """Cohen's κ of (l1, l2) label pairs (scikit-learn's, through
    :func:`medpref.metrics.intervals.cohen_kappa`); NaN when it is undefined (no pairs, or
    chance agreement of 1: one label only)."""
    from medpref.metrics.intervals import cohen_kappa as kappa_of_labels

    return kappa_of_labels(*zip(*pairs)) if pairs else math.nan
