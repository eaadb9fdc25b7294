"""How often a doctor's turn asks the patient something, with intervals (issue 32).

A doctor that learned to take a history asks; one that lectures does not. From turns the
stage has already generated (no new model calls), per doctor and setting:

* ``eval states``: its next turn on the held-out compliance states (the written split's
  eval dialogues; :mod:`medpref.simulation.heldout`), the two controls included;
* ``SP openings``: its first doctor turn of each SP consultation.

A turn asks when one of its sentences is a question (:func:`medpref.simulation.nextturn.
asks_question`, the speech-act test the next-turn table uses). The share gets a Wilson
interval (it treats the turns as independent; the states of one dialogue are not, so
read it as a little narrow), and each doctor is paired against ``base`` on the states or
cases both answered: the difference of shares with a bootstrap interval that resamples
dialogues (states) or cases (openings), a sign-flip p and the minimum detectable
difference.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from medpref.metrics.intervals import paired_difference, proportion_ci, shown_mde
from medpref.simulation.nextturn import asks_question

REFERENCE = "base"
EVAL_STATES, SP_OPENINGS = "eval states", "SP openings"
COLUMNS = ["setting", "doctor", "turns", "asking", "share", "share_lo", "share_hi", "vs",
           "paired", "diff", "ci_lo", "ci_hi", "p_value", "mde", "verdict"]


def state_turns(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per held-out state turn (``heldout_turns.jsonl`` records): its doctor,
    unit (dialogue@cut), cluster (dialogue) and whether it asks (None: no turn)."""
    return [{"setting": EVAL_STATES, "doctor": r["policy"], "unit": f"{r['dialogue']}@{r['cut']}",
             "cluster": r["dialogue"], "asks": asks_question(r.get("turn"))} for r in records]


def opening_turns(consults: Iterable) -> list[dict[str, Any]]:
    """One row per SP consultation: its first doctor turn, paired by case."""
    return [{"setting": SP_OPENINGS, "doctor": c.doctor, "unit": c.case_id, "cluster": c.case_id,
             "asks": asks_question(c.doctor_turns[0] if c.doctor_turns else None)}
            for c in consults]


def question_share_table(rows: Sequence[dict[str, Any]], reference: str = REFERENCE,
                         n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Per setting and doctor (in order of appearance): turns, asking turns, the share
    with its Wilson interval, and the paired difference to ``reference``."""
    df = pd.DataFrame(rows, columns=["setting", "doctor", "unit", "cluster", "asks"])
    df = df[df["asks"].notna()]
    out = []
    for setting in dict.fromkeys(df["setting"]):
        here = df[df["setting"] == setting]
        values = here.set_index(["doctor", "unit"])["asks"].astype(float)
        clusters = dict(zip(here["unit"], here["cluster"]))
        for doctor in dict.fromkeys(here["doctor"]):
            mine = values.loc[doctor]
            iv = proportion_ci(int(mine.sum()), len(mine))
            row = {"setting": setting, "doctor": doctor, "turns": len(mine),
                   "asking": int(mine.sum()), "share": iv.estimate, "share_lo": iv.lo,
                   "share_hi": iv.hi, "vs": reference}
            row.update(_versus(values, doctor, reference, clusters, n_boot, seed))
            out.append(row)
    return pd.DataFrame(out, columns=COLUMNS)


def _versus(values: pd.Series, doctor: str, reference: str, clusters: dict, n_boot: int,
            seed: int) -> dict[str, Any]:
    empty = dict.fromkeys(["paired", "diff", "ci_lo", "ci_hi", "p_value", "mde"], float("nan"))
    if doctor == reference:
        return {**empty, "verdict": "reference"}
    doctors = values.index.get_level_values("doctor")
    if reference not in doctors:
        return {**empty, "verdict": f"no {reference}"}
    both = pd.concat([values.loc[doctor], values.loc[reference]], axis=1, join="inner")
    if both.empty:
        return {**empty, "verdict": "no paired turns"}
    cmp = paired_difference(both.iloc[:, 0].to_numpy(), both.iloc[:, 1].to_numpy(),
                            n_boot=n_boot, seed=seed, clusters=[clusters[u] for u in both.index])
    return {"paired": cmp.n, "diff": cmp.diff, "ci_lo": cmp.lo, "ci_hi": cmp.hi,
            "p_value": cmp.p_value, "mde": shown_mde(cmp), "verdict": cmp.verdict()}


def metrics_of(table: pd.DataFrame) -> dict[str, Any]:
    """``question_share/<setting>/<doctor>``: share, its interval and the difference to base."""
    def num(v):
        return None if pd.isna(v) else round(float(v), 3)

    return {f"question_share/{r['setting'].replace(' ', '_')}/{r['doctor']}": {
        "turns": int(r["turns"]), **{k: num(r[k]) for k in ("share", "share_lo", "share_hi",
                                                             "diff", "ci_lo", "ci_hi")}}
        for _, r in table.iterrows()}
