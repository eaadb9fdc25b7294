"""The reports of stage 06: Table 2, PLPF Table 3 grid, follow-up Table 6, next turn."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from medpref.simulation.doctors import grid_cell, table6_policy
from medpref.simulation.grading import CATEGORIES, eq6

SHORT = {"symptoms": "Sym.", "tests": "Test", "diseases": "Dis."}


def table2(case_rows: Sequence[dict]) -> pd.DataFrame:
    """PLPF Table 2 layout: one row per doctor; Sym./Test/Dis. per department and ALL.

    ``case_rows``: one per (doctor, case) with ``doctor``, ``department`` and c/m per
    category (None when empty). Columns ``<dept> n_empty`` say how many cases were left
    out of a mean because that category was empty.
    """
    df = pd.DataFrame(case_rows)
    if df.empty:
        return pd.DataFrame()
    rows = []
    departments = sorted(df["department"].unique())
    for doctor, sub in df.groupby("doctor", sort=False):
        row: dict = {"doctor": doctor}
        for dept in [*departments, "ALL"]:
            part = sub if dept == "ALL" else sub[sub["department"] == dept]
            scores = eq6([{c: (None if pd.isna(r[c]) else r[c]) for c in CATEGORIES}
                          for r in part.to_dict("records")])
            for cat in CATEGORIES:
                row[f"{dept} {SHORT[cat]}"] = round(scores[cat]["score"], 1)
            empties = {SHORT[c]: scores[c]["empty"] for c in CATEGORIES if scores[c]["empty"]}
            if empties:
                row[f"{dept} empty"] = ", ".join(f"{k} {v}" for k, v in empties.items())
        row["cases"] = len(sub)
        rows.append(row)
    return pd.DataFrame(rows)


def all_scores(t2: pd.DataFrame) -> pd.DataFrame:
    """doctor → ALL Sym./Test/Dis. (for the grid and Table 6)."""
    cols = {f"ALL {SHORT[c]}": SHORT[c] for c in CATEGORIES}
    return t2[["doctor", *cols]].rename(columns=cols).set_index("doctor")


def table3_grid(t2: pd.DataFrame, pattern: str) -> pd.DataFrame:
    """PLPF Table 3 / follow-up Fig. 10: SP scores per weighting × trajectory cell, for
    the policies trained per cell (empty when none was trained)."""
    if t2.empty:
        return pd.DataFrame(columns=["weighting", "metric"])
    scores = all_scores(t2)
    rows = []
    for doctor in scores.index:
        cell = grid_cell(doctor, pattern)
        if cell is None:
            continue
        for metric in scores.columns:
            rows.append({"weighting": cell[0], "trajectory": cell[1], "metric": metric,
                         "score": scores.loc[doctor, metric], "policy": doctor})
    if not rows:
        return pd.DataFrame(columns=["weighting", "metric"])
    long = pd.DataFrame(rows)
    wide = long.pivot_table(index=["weighting", "metric"], columns="trajectory",
                            values="score", aggfunc="first")
    wide.columns = [f"k={k}" for k in wide.columns]
    return wide.reset_index()


def table6(t2: pd.DataFrame, next_turn: pd.DataFrame, wanted: Mapping[str, str]) -> pd.DataFrame:
    """Follow-up Table 6: GPT-4 ranking vs Rethinker vs Rethinker + re-rank, as columns,
    for the policies that exist (CSPT Sym. and the next-turn GPD)."""
    scores = all_scores(t2) if not t2.empty else pd.DataFrame()
    gpd = next_turn.set_index("doctor")["gpd"] if not next_turn.empty else pd.Series(dtype=float)
    cols = {}
    for label, policy in wanted.items():
        match = [d for d in scores.index if table6_policy(d, policy)]
        if match:
            d = match[0]
            cols[label] = {"policy": d, "CSPT Sym.": scores.loc[d, "Sym."],
                           "Next-turn GPD": gpd.get(d, float("nan"))}
    if not cols:
        return pd.DataFrame(columns=["metric"])
    return pd.DataFrame(cols).rename_axis("metric").reset_index()


def fidelity_table(consult_rows: Sequence[dict]) -> pd.DataFrame:
    """Per doctor: patient sentences, volunteered and unsupported ones (beyond the paper)."""
    df = pd.DataFrame(consult_rows)
    if df.empty:
        return df
    agg = df.groupby("doctor", sort=False).agg(
        cases=("case", "count"), rounds=("rounds", "mean"),
        ended_by_marker=("ended_by", lambda s: int((s == "end_marker").sum())),
        failed=("ended_by", lambda s: int(s.str.endswith("failed").sum())),
        patient_sentences=("sentences", "sum"), volunteered=("volunteered", "sum"),
        unsupported=("unsupported", "sum"), empty_patient_turns=("empty_turns", "sum"))
    return agg.reset_index()
