"""The reports of stage 06: Table 2, PLPF Table 3 grid, follow-up Table 6, next turn, and
beside each comparison table its intervals, paired verdicts and minimum detectable
differences (:mod:`medpref.metrics.intervals`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from medpref.metrics.intervals import shown_mde
from medpref.simulation.doctors import table6_policy
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
        if "kind" in sub:
            row["kind"] = sub["kind"].iloc[0]
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


def table3_grid(t2: pd.DataFrame, cells: Mapping[str, tuple[str, int]]) -> pd.DataFrame:
    """PLPF Table 3 / follow-up Fig. 10: SP scores per weighting × trajectory cell, for
    the policies trained per cell (``cells``: doctor → its cell; empty when none was
    trained)."""
    if t2.empty:
        return pd.DataFrame(columns=["weighting", "metric"])
    scores = all_scores(t2)
    rows = []
    for doctor in scores.index:
        cell = cells.get(doctor)
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
    """Per doctor: patient sentences, volunteered and unsupported ones (beyond the paper),
    and the patient's lines (not fallbacks) that are not in a patient's voice."""
    df = pd.DataFrame(consult_rows)
    if df.empty:
        return df
    agg = df.groupby("doctor", sort=False).agg(
        cases=("case", "count"), rounds=("rounds", "mean"),
        ended_by_marker=("ended_by", lambda s: int((s == "end_marker").sum())),
        failed=("ended_by", lambda s: int(s.str.endswith("failed").sum())),
        patient_sentences=("sentences", "sum"), volunteered=("volunteered", "sum"),
        unsupported=("unsupported", "sum"), empty_patient_turns=("empty_turns", "sum"),
        role_swaps=("role_swaps", "sum"), dont_know=("dont_know", "sum"),
        **{k: (k, "sum") for k in VOICE_COLUMNS if k in df})
    agg["unsupported_share"] = agg["unsupported"] / agg["patient_sentences"].clip(lower=1)
    if "voice_lines" in agg:   # lines not in the patient's voice (medpref.simulation.voice)
        agg["voice_faulty_share"] = agg["voice_faulty"] / agg["voice_lines"].clip(lower=1)
    return agg.reset_index()


#: the patient-voice counts of a consultation row (second person, field labels, markdown,
#: results nobody asked for; the third person needs the case and is left to the script)
VOICE_COLUMNS = ("voice_lines", "voice_faulty", "voice_second_person", "voice_field_label",
                 "voice_markdown", "voice_unrequested_result")


def with_kind(df: pd.DataFrame, kinds: Mapping[str, str], column: str = "doctor"
              ) -> pd.DataFrame:
    """``df`` with a ``kind`` column (model | control) right after ``column``: the
    controls are labelled rows of every table that lists doctors."""
    if df.empty and column not in df:
        return df
    out = df.drop(columns=["kind"], errors="ignore")
    out.insert(list(out.columns).index(column) + 1, "kind",
               [kinds.get(d, "model") for d in out[column]])
    return out


# -- intervals and paired comparisons (beyond the paper) ----------------------------------

def table2_intervals(per_case: pd.DataFrame, n_boot: int = 2000, seed: int = 0
                     ) -> pd.DataFrame:
    """Per doctor and category: the ALL score (Eq. 6, %) with a bootstrap 95 % interval
    over cases, and the number of cases it averages."""
    from medpref.metrics.intervals import bootstrap_ci

    rows = []
    for doctor, sub in per_case.groupby("doctor", sort=False):
        for cat in CATEGORIES:
            vals = [100.0 * v for v in sub[cat] if not pd.isna(v)]
            iv = bootstrap_ci(vals, n_boot=n_boot, seed=seed)
            rows.append({"doctor": doctor, "metric": SHORT[cat], "score": iv.estimate,
                         "ci_lo": iv.lo, "ci_hi": iv.hi, "cases": iv.n})
    return pd.DataFrame(rows, columns=TABLE2_CI_COLUMNS)


#: Columns of the Table 2 companions, written even when there is no row (one SP case, or
#: one doctor), so a reader always finds a header.
TABLE2_CI_COLUMNS = ["doctor", "metric", "score", "ci_lo", "ci_hi", "cases"]
TABLE2_PAIRED_COLUMNS = ["doctor", "vs", "metric", "cases", "diff", "ci_lo", "ci_hi", "p_value",
                         "mde", "verdict"]


def table2_paired(per_case: pd.DataFrame, references: Sequence[str] = ("base", "sft"),
                  n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Every doctor against each reference doctor, per category, paired over the cases
    both were graded on: difference in points, bootstrap 95 % interval, sign-flip
    p-value, the minimum difference this many cases could detect (α .05, power .8) and
    the verdict (``PairedComparison.verdict``: "no detectable difference" unless the
    interval excludes 0 and the sign-flip p is below .05)."""
    from medpref.metrics.intervals import paired_difference

    wide = {cat: per_case.pivot_table(index="case", columns="doctor", values=cat,
                                      aggfunc="first", dropna=False) for cat in CATEGORIES}
    rows = []
    for ref in references:
        for doctor in per_case["doctor"].unique():
            if doctor == ref or ref not in set(per_case["doctor"]):
                continue
            for cat in CATEGORIES:
                w = wide[cat]
                if doctor not in w or ref not in w:
                    continue
                both = w[[doctor, ref]].dropna()
                if both.empty:
                    continue
                cmp = paired_difference(100.0 * both[doctor].to_numpy(),
                                        100.0 * both[ref].to_numpy(), n_boot=n_boot, seed=seed)
                rows.append({"doctor": doctor, "vs": ref, "metric": SHORT[cat], "cases": cmp.n,
                             "diff": cmp.diff, "ci_lo": cmp.lo, "ci_hi": cmp.hi,
                             "p_value": cmp.p_value, "mde": shown_mde(cmp),
                             "verdict": cmp.verdict()})
    return pd.DataFrame(rows, columns=TABLE2_PAIRED_COLUMNS)


# -- companions of PLPF Table 3 and follow-up Table 6: intervals and paired verdicts ------

#: The column each comparison table is paired against: PLPF Table 3's baseline weighting
#: (Avg, w = 1) at the same trajectory length; follow-up Table 6's GPT-4 ranking.
GRID_REFERENCE = "avg"
TABLE6_REFERENCE = "GPT4"
COMPARISON_COLUMNS = ["n", "score", "ci_lo", "ci_hi", "vs", "paired_n", "diff", "diff_lo",
                      "diff_hi", "p_value", "mde", "verdict"]
GRID_CI_COLUMNS = ["weighting", "trajectory", "metric", "policy", *COMPARISON_COLUMNS]
TABLE6_CI_COLUMNS = ["metric", "column", "policy", *COMPARISON_COLUMNS]


def compare_scores(mine: pd.Series, ref: pd.Series | None, vs: str, n_boot: int = 2000,
                   seed: int = 0) -> dict:
    """One row of a companion table. ``mine`` and ``ref``: a score per unit (case or
    item, the index; NaN: none). ``mine``'s mean with a bootstrap 95 % interval over its
    units; against ``ref`` (None: this row is the reference) the paired difference over
    the units both have, its interval, sign-flip p, the minimum difference this many
    units could detect (α .05, power .8) and the verdict: "higher" / "lower" (the sign
    of mine − ref) when the interval excludes 0 and p < .05, else "no detectable
    difference"."""
    from medpref.metrics.intervals import bootstrap_ci, paired_difference

    mine = mine.dropna()
    iv = bootstrap_ci(mine.to_numpy(), n_boot=n_boot, seed=seed)
    row = {"n": iv.n, "score": iv.estimate, "ci_lo": iv.lo, "ci_hi": iv.hi, "vs": vs,
           **dict.fromkeys(["paired_n", "diff", "diff_lo", "diff_hi", "p_value", "mde"],
                           float("nan"))}
    if ref is None:
        return {**row, "vs": "", "verdict": "reference"}
    both = pd.concat([mine.rename("mine"), ref.rename("ref")], axis=1, join="inner").dropna()
    if both.empty:
        return {**row, "verdict": "no paired units"}
    cmp = paired_difference(both["mine"].to_numpy(), both["ref"].to_numpy(), n_boot=n_boot,
                            seed=seed)
    return {**row, "paired_n": cmp.n, "diff": cmp.diff, "diff_lo": cmp.lo, "diff_hi": cmp.hi,
            "p_value": cmp.p_value, "mde": shown_mde(cmp), "verdict": cmp.verdict()}


def _case_scores(per_case: pd.DataFrame, doctor: str, cat: str) -> pd.Series:
    """A doctor's per-case score of one category in points (NaN: empty category)."""
    sub = per_case[per_case["doctor"] == doctor]
    return 100.0 * sub.set_index("case")[cat].astype(float)


def table3_intervals(per_case: pd.DataFrame, cells: Mapping[str, tuple[str, int]],
                     reference: str = GRID_REFERENCE,
                     n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Companion of :func:`table3_grid`: per cell (weighting × trajectory) and category,
    the score with its interval over cases, and the cell against the ``reference``
    weighting's cell of the same trajectory length, paired by case."""
    cells = {} if per_case.empty else {
        d: cells[d] for d in per_case["doctor"].unique() if d in cells}
    by_cell = {c: d for d, c in cells.items()}
    rows = []
    for doctor, (weighting, k) in sorted(cells.items(), key=lambda x: (x[1][1], x[1][0])):
        ref = by_cell.get((reference, k))
        for cat in CATEGORIES:
            mine = _case_scores(per_case, doctor, cat)
            other = None if weighting == reference else (
                _case_scores(per_case, ref, cat) if ref else pd.Series(dtype=float))
            row = compare_scores(mine, other, f"{reference} k={k}", n_boot, seed)
            if weighting != reference and ref is None:
                row["verdict"] = f"no {reference} k={k} cell"
            rows.append({"weighting": weighting, "trajectory": k, "metric": SHORT[cat],
                         "policy": doctor, **row})
    return pd.DataFrame(rows, columns=GRID_CI_COLUMNS)


def _gpd_points(nt_rows: Sequence[dict], doctor: str) -> pd.Series:
    """A doctor's GPT-Distance points per next-turn item (NaN: no usable verdict)."""
    from medpref.simulation.nextturn import item_values

    vals = {r["item"]: item_values(r)["gpd"] for r in nt_rows
            if r["doctor"] == doctor and r.get("prediction") is not None}
    return pd.Series({i: float("nan") if v is None else v for i, v in vals.items()},
                     dtype=float)


def table6_intervals(per_case: pd.DataFrame, nt_rows: Sequence[dict],
                     wanted: Mapping[str, str], reference: str = TABLE6_REFERENCE,
                     n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Companion of :func:`table6`: per column that has a policy, CSPT Sym. (points per
    case) and next-turn GPD (points per item, lower is better) with their intervals, and
    the column against the ``reference`` column, paired by case or by item."""
    doctors = set(per_case["doctor"]) if not per_case.empty else set()
    doctors |= {r["doctor"] for r in nt_rows}
    present = {label: next(d for d in sorted(doctors) if table6_policy(d, policy))
               for label, policy in wanted.items()
               if any(table6_policy(d, policy) for d in doctors)}
    series = {"CSPT Sym.": lambda d: (_case_scores(per_case, d, "symptoms")
                                      if not per_case.empty else pd.Series(dtype=float)),
              "Next-turn GPD": lambda d: _gpd_points(nt_rows, d)}
    rows = []
    for metric, of in series.items():
        for label, doctor in present.items():
            mine = of(doctor)
            if mine.dropna().empty:
                continue
            ref = None if label == reference else (
                of(present[reference]) if reference in present else pd.Series(dtype=float))
            row = compare_scores(mine, ref, reference, n_boot, seed)
            if label != reference and reference not in present:
                row["verdict"] = f"no {reference} policy"
            rows.append({"metric": metric, "column": label, "policy": doctor, **row})
    return pd.DataFrame(rows, columns=TABLE6_CI_COLUMNS)


def doctor_behaviour(rows: Sequence[dict]) -> pd.DataFrame:
    """Per doctor, the means of the per-consultation behaviour counts (see
    ``behaviour.behaviour_row``): questions, repetition, echoes, and the patient's answers."""
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    g = df.groupby("doctor", sort=False)
    out = pd.DataFrame({
        "consultations": g["case"].count(),
        "doctor_turns": g["doctor_turns"].sum(),
        "question_share": g["question_turns"].sum() / g["doctor_turns"].sum().clip(lower=1),
        "repetition_share": g["repetition_share"].mean(),
        "echo_share": g["echo_sentences"].sum() / g["doctor_sentences"].sum().clip(lower=1),
        "words_per_turn": g["doctor_words"].sum() / g["doctor_turns"].sum().clip(lower=1),
        "patient_sentences": g["sentences"].sum(),
        "patient_unsupported_share": g["unsupported"].sum() / g["sentences"].sum().clip(lower=1),
        "patient_dont_know": g["dont_know"].sum(),
        "patient_role_swaps": g["role_swaps"].sum(),
        "patient_empty_turns": g["empty_turns"].sum(),
        # the patient's replies that gave no case text: nothing asked, or nothing answerable
        "fallback_share": g["fallbacks"].sum() / g["patient_replies"].sum().clip(lower=1),
        "patient_nothing_asked": g["nothing_asked"].sum()})
    return out.reset_index()


# -- the controls: the instrument's range and its gate (beyond the paper) ----------------

RANGE_COLUMNS = ["metric", "range_cases", "range_diff", "range_lo", "range_hi", "doctor", "vs",
                 "mde", "mde_share_of_range", "reading"]


def range_reading(range_diff: float, mde: float) -> str:
    """Whether a comparison's minimum detectable difference fits inside the instrument's
    range (positive control minus negative control, in points)."""
    if pd.isna(range_diff):
        return "no range (a control is missing)"
    if range_diff <= 0:
        return "no range: the positive control does not score above the negative one"
    if pd.isna(mde):
        return "MDE not estimable"
    return "MDE inside the range" if mde <= range_diff else "MDE larger than the range"


def _range_of(per_case: pd.DataFrame, top: str, bottom: str, cat: str, n_boot: int,
              seed: int) -> dict:
    """``top`` minus ``bottom`` in one category, paired by case (NaN: either missing)."""
    from medpref.metrics.intervals import paired_difference

    out = dict.fromkeys(["range_cases", "range_diff", "range_lo", "range_hi"], float("nan"))
    if per_case.empty or not {top, bottom} <= set(per_case["doctor"]):
        return out
    both = pd.concat([_case_scores(per_case, top, cat).rename("top"),
                      _case_scores(per_case, bottom, cat).rename("bottom")],
                     axis=1, join="inner").dropna()
    if both.empty:
        return out
    cmp = paired_difference(both["top"].to_numpy(), both["bottom"].to_numpy(), n_boot=n_boot,
                            seed=seed)
    return {"range_cases": cmp.n, "range_diff": cmp.diff, "range_lo": cmp.lo,
            "range_hi": cmp.hi}


def table2_range(per_case: pd.DataFrame, paired: pd.DataFrame, kinds: Mapping[str, str],
                 top: str = "control_script", bottom: str = "control_lecture",
                 n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Per category: ``top`` minus ``bottom`` paired by case (points, bootstrap 95 %
    interval): the distance between a clinician's script and a lecture, the widest the
    instrument shows; beside it each model doctor's paired comparison (``paired``, Table
    2's) with its minimum detectable difference and whether that fits inside the range
    (one row per comparison; a category without one keeps a row for its range)."""
    models = (paired[[kinds.get(d, "model") == "model" for d in paired["doctor"]]]
              if not paired.empty else paired)
    rows = []
    for cat in CATEGORIES:
        rng = _range_of(per_case, top, bottom, cat, n_boot, seed)
        mine = models[models["metric"] == SHORT[cat]] if not models.empty else models
        for _, cmp in mine.iterrows():
            share = (cmp["mde"] / rng["range_diff"] if rng["range_diff"] > 0
                     else float("nan"))
            rows.append({"metric": SHORT[cat], **rng, "doctor": cmp["doctor"], "vs": cmp["vs"],
                         "mde": cmp["mde"], "mde_share_of_range": share,
                         "reading": range_reading(rng["range_diff"], cmp["mde"])})
        if mine.empty:
            rows.append({"metric": SHORT[cat], **rng, "doctor": "", "vs": "",
                         "mde": float("nan"), "mde_share_of_range": float("nan"),
                         "reading": "no model comparison"})
    return pd.DataFrame(rows, columns=RANGE_COLUMNS)


def _negative_verdict(sub: pd.DataFrame, cat: str, max_pass: float) -> dict:
    """A negative control's Eq. 6 score over its cases against the cap (None: no case)."""
    vals = sub[cat].dropna().astype(float)
    score = 100.0 * vals.mean() if len(vals) else float("nan")
    limit = 100.0 * max_pass
    return {"cases": len(vals), "score": score, "rule": "≤", "limit": limit,
            "expected_coverage": float("nan"),
            "passed": None if pd.isna(score) else bool(score <= limit + 1e-9)}


def _positive_verdict(sub: pd.DataFrame, cat: str,
                      expected: Mapping[tuple[str, str], float | None], fraction: float) -> dict:
    """A positive control's mean over the cases whose expected coverage is known, against
    ``fraction`` × that coverage's mean over the same cases (None: no such case)."""
    pairs = [(float(v), expected[(c, cat)]) for c, v in zip(sub["case"], sub[cat])
             if not pd.isna(v) and expected.get((c, cat)) is not None]
    if not pairs:
        return {"cases": 0, "score": float("nan"), "rule": "≥", "limit": float("nan"),
                "expected_coverage": float("nan"), "passed": None}
    score = 100.0 * sum(v for v, _ in pairs) / len(pairs)
    cover = 100.0 * sum(e for _, e in pairs) / len(pairs)
    return {"cases": len(pairs), "score": score, "rule": "≥", "limit": fraction * cover,
            "expected_coverage": cover, "passed": bool(score >= fraction * cover - 1e-9)}


GATE_COLUMNS = ["control", "polarity", "metric", "cases", "score", "rule", "limit",
                "expected_coverage", "passed"]


def controls_gate(per_case: pd.DataFrame, polarity: Mapping[str, str],
                  expected: Mapping[tuple[str, str], float | None], max_negative_pass: float,
                  script_fraction: float) -> pd.DataFrame:
    """Each control's verdict per category, in points. A negative control: its Eq. 6 score
    over all its cases must be ≤ ``max_negative_pass``. A positive one: its mean over the
    cases with a known expected coverage (``expected[(case, category)]``: a clinician's
    reading of what the script asks) must be ≥ ``script_fraction`` × that coverage's
    mean over the same cases; none known: not gated (``passed`` None)."""
    rows = []
    for control, pol in polarity.items():
        sub = per_case[per_case["doctor"] == control] if not per_case.empty else per_case
        if sub.empty:
            continue
        for cat in CATEGORIES:
            verdict = (_negative_verdict(sub, cat, max_negative_pass) if pol == "negative"
                       else _positive_verdict(sub, cat, expected, script_fraction))
            rows.append({"control": control, "polarity": pol, "metric": SHORT[cat], **verdict})
    return pd.DataFrame(rows, columns=GATE_COLUMNS)
