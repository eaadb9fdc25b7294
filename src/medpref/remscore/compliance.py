"""Rule compliance of a set of dialogues (PLPF Fig. 3): per-rule mean REM score, radar.

Later stages call :func:`rule_compliance` for every model they compare (the states are
that model's consultations, each cut at a doctor turn) and draw all of them in one
:func:`radar_plot`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from medpref.contracts import Dialogue, Turn
from medpref.remscore.base import RuleScorer
from medpref.rules import Rule


def cut_at_final_doctor_turn(turns: Sequence[Turn]) -> list[Turn]:
    """The state a whole consultation ends in: its turns up to the last doctor turn."""
    last = max((i for i, t in enumerate(turns) if t.role == "doctor"), default=None)
    if last is None:
        raise ValueError("a dialogue without a doctor turn has no state to score")
    return list(turns[:last + 1])


def dialogue_states(dialogues: Sequence[Dialogue]) -> list[list[Turn]]:
    """Each dialogue cut at its final doctor turn (dialogues with no doctor turn: error)."""
    states = []
    for d in dialogues:
        try:
            states.append(cut_at_final_doctor_turn(d.turns))
        except ValueError as exc:
            raise ValueError(f"dialogue '{d.id}': {exc}") from None
    return states


def rule_compliance(states: Sequence[Sequence[Turn]], scorer: RuleScorer,
                    rules: Sequence[Rule]) -> pd.DataFrame:
    """Mean score per rule over the states, with how many states gave no usable score.

    Columns: rule, name, kind, mean (over usable scores; NaN if none), n, unusable.
    """
    judged = scorer.score_states(states, rules)
    return compliance_summary([(r.id, r.name, r.kind) for r in rules],
                              {r.id: [j[r.id].score for j in judged] for r in rules})


def compliance_summary(rules: Sequence[tuple[str, str, str]],
                       scores: Mapping[str, Sequence[float | None]]) -> pd.DataFrame:
    """The compliance table of ``rules`` ((id, name, kind), in row order) from each rule's
    scores over the states (``None``: unusable), in state order."""
    rows = []
    for rule_id, name, kind in rules:
        usable = [s for s in scores[rule_id] if s is not None]
        rows.append({"rule": rule_id, "name": name, "kind": kind,
                     "mean": float(np.mean(usable)) if usable else float("nan"),
                     "n": len(usable), "unusable": len(scores[rule_id]) - len(usable)})
    return pd.DataFrame(rows)


def radar_plot(compliance: Mapping[str, pd.DataFrame], title: str = "Rule compliance",
               max_score: float = 2.0):
    """One polygon per model (label → :func:`rule_compliance` table) on a 0–2 radar."""
    from medpref.reports import figure

    first = next(iter(compliance.values()))
    axes_labels = [f"{r} · {n}" for r, n in zip(first["rule"], first["name"])]
    angles = np.linspace(0, 2 * np.pi, len(axes_labels), endpoint=False).tolist()
    fig, ax = figure(figsize=(5.5, 5.5), subplot_kw={"polar": True})
    for label, table in compliance.items():
        values = table.set_index("rule").loc[first["rule"], "mean"].fillna(0).tolist()
        ax.plot(angles + angles[:1], values + values[:1], linewidth=1.6, label=label)
        ax.fill(angles + angles[:1], values + values[:1], alpha=0.12)
    ax.set_xticks(angles)
    ax.set_xticklabels(axes_labels, fontsize=8)
    ax.set_ylim(0, max_score)
    ax.set_yticks([0.5, 1.0, 1.5, 2.0])
    ax.set_title(title, pad=22)  # clear of the top axis label
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.08), fontsize=8)  # below, not on it
    return fig
