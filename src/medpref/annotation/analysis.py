"""What the strategies decided: counts, ties, margins and which candidate source wins.

* :func:`summary_table` — per strategy: items, decisive, ties, unusable, tie ratio, pairs,
  wins per source and the sampled:generated win ratio, with PLPF's reported ratio
  (1.2 : 1, Appendix C) as a reference row;
* :func:`source_preferences` + :func:`plot_source_preferences` — the follow-up's Fig. 11
  (share of items where the sampled or the generated candidate wins, or it is a tie);
* :func:`margin_table` + :func:`plot_margins` — the CAI score differences against the tie
  threshold (how many pairs survive a threshold set for GPT-scale REMs).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from medpref.annotation.pairs import Decision
from medpref.turns.turn_quality import check_turn

#: PLPF Appendix C: wins of sampled (real doctor) vs predicted trajectories, 1.2 : 1.
PLPF_REPORTED_WIN_RATIO = 1.2
PREFERENCE_COLUMNS = ("sampled", "generated", "tie", "unusable")
COUNT_COLUMNS = ("items", "decisive", "ties", "unusable", "pairs", "sampled_wins",
                 "generated_wins")


def decision_counts(decisions: Sequence[Decision]) -> dict[str, int]:
    """Items per preference category (winner's source, tie, or no usable decision)."""
    counts = dict.fromkeys(PREFERENCE_COLUMNS, 0)
    for d in decisions:
        if d.outcome in ("1", "2"):
            key = d.winner_source or "unusable"
            counts[key] = counts.get(key, 0) + 1
        elif d.outcome == "tie":
            counts["tie"] += 1
        else:
            counts["unusable"] += 1
    return counts


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 3) if b else None


def strategy_row(name: str, decisions: Sequence[Decision], n_pairs: int) -> dict:
    c = decision_counts(decisions)
    decisive = c["sampled"] + c["generated"]
    margins = pd.Series([d.margin for d in decisions if d.margin is not None], dtype=float)
    return {"strategy": name, "items": len(decisions), "decisive": decisive,
            "ties": c["tie"], "unusable": c["unusable"],
            "tie_ratio": _ratio(c["tie"], decisive + c["tie"]), "pairs": n_pairs,
            "sampled_wins": c["sampled"], "generated_wins": c["generated"],
            "win_ratio_sampled_generated": _ratio(c["sampled"], c["generated"]),
            "margin_mean": round(margins.mean(), 3) if len(margins) else None,
            "margin_median": round(margins.median(), 3) if len(margins) else None}


def summary_table(results) -> pd.DataFrame:
    """One row per strategy (``results``: objects with name, decisions, pairs) + PLPF's."""
    rows = [strategy_row(r.name, r.decisions, len(r.pairs)) for r in results]
    rows.append({"strategy": "PLPF reported (App. C, cai_dep)",
                 "win_ratio_sampled_generated": PLPF_REPORTED_WIN_RATIO})
    table = pd.DataFrame(rows, columns=list(rows[0]))
    for col in COUNT_COLUMNS:  # counts print as integers; the reference row leaves them blank
        table[col] = table[col].astype("Int64").astype(object).where(table[col].notna(), "")
    return table


def source_preferences(results) -> pd.DataFrame:
    """Share of items per category, per strategy (rows sum to 1): Fig. 11's data."""
    rows = []
    for r in results:
        c = decision_counts(r.decisions)
        n = max(1, sum(c.values()))
        rows.append({"strategy": r.name, **{k: round(v / n, 4) for k, v in c.items()},
                     "items": sum(c.values())})
    return pd.DataFrame(rows)


def plot_source_preferences(prefs: pd.DataFrame):
    """Stacked horizontal bars: sampled wins, generated wins, tie, unusable."""
    from medpref.reports import figure

    colors = {"sampled": "#4C72B0", "generated": "#DD8452", "tie": "#BBBBBB",
              "unusable": "#E5E5E5"}
    fig, ax = figure(figsize=(7, 0.6 * len(prefs) + 1.2))
    left = pd.Series(0.0, index=prefs.index)
    for col in PREFERENCE_COLUMNS:
        ax.barh(prefs["strategy"], prefs[col], left=left, color=colors[col],
                label={"sampled": "sampled (real doctor) wins",
                       "generated": "generated wins"}.get(col, col))
        left += prefs[col]
    ax.set_xlim(0, 1)
    ax.invert_yaxis()
    ax.set_xlabel("share of items")
    ax.set_title("Which candidate each strategy prefers (cf. follow-up Fig. 11)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=4, fontsize=8,
              frameon=False)
    return fig


def margin_table(results, tie_threshold: float) -> pd.DataFrame:
    """Quantiles of the score difference per strategy that has margins (CAI)."""
    rows = []
    for r in results:
        m = pd.Series([d.margin for d in r.decisions if d.margin is not None], dtype=float)
        if m.empty:
            continue
        rows.append({"strategy": r.name, "scored": len(m), "min": m.min(),
                     "q25": m.quantile(0.25), "median": m.median(), "q75": m.quantile(0.75),
                     "max": m.max(), "above_threshold": int((m >= tie_threshold).sum()),
                     "tie_threshold": tie_threshold})
    return pd.DataFrame(rows, columns=["strategy", "scored", "min", "q25", "median", "q75",
                                       "max", "above_threshold", "tie_threshold"])


def plot_margins(results, tie_threshold: float):
    """Histogram of |s1 − s2| per CAI strategy, with the tie threshold marked."""
    from medpref.reports import figure

    with_margins = [r for r in results if any(d.margin is not None for d in r.decisions)]
    fig, axes = figure(1, max(1, len(with_margins)), figsize=(4 * max(1, len(with_margins)), 3),
                             squeeze=False)
    for ax, r in zip(axes[0], with_margins):
        m = [d.margin for d in r.decisions if d.margin is not None]
        ax.hist(m, bins=20, color="#4C72B0")
        ax.axvline(tie_threshold, color="#C44E52", linestyle="--",
                   label=f"tie threshold {tie_threshold:g}")
        ax.set_title(r.name)
        ax.set_xlabel("|s(c1) − s(c2)|")
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("items")
    fig.tight_layout()
    return fig


#: Thresholds the sweep reports: the papers' 1.0 down to what a small REM's flat scores need.
SWEEP_THRESHOLDS = (1.0, 0.5, 0.25, 0.1, 0.05, 0.0)


def threshold_sweep(results, thresholds: Sequence[float] = SWEEP_THRESHOLDS) -> pd.DataFrame:
    """Pairs that would survive each tie threshold (before top-N), per CAI strategy.

    Read off the margins already computed, so choosing a threshold for a given REM needs
    no new model call.
    """
    rows = []
    for r in results:
        m = [d.margin for d in r.decisions if d.margin is not None]
        if not m:
            continue
        rows.append({"strategy": r.name, **{f"t={t:g}": sum(x >= t for x in m)
                                            for t in thresholds}, "scored": len(m)})
    return pd.DataFrame(rows)


def pair_quality(results) -> dict[str, dict[str, int]]:
    """Per strategy, whether its pairs prefer a usable turn: a candidate is *degenerate*
    when the turn-quality checks flag it as the doctor's next turn (out of role, leaked
    prompt text, a repeated or copied sentence, or nothing said; ``medpref.turns``).
    ``real_over_degenerate`` counts pairs whose chosen turn is the dialogue's own (sampled)
    and whose rejected turn is degenerate; ``degenerate_over_real`` the reverse."""
    def degenerate(text: str, prompt) -> bool:
        return not check_turn(text, "doctor", [t.text for t in prompt]).passes

    out: dict[str, dict[str, int]] = {}
    for name, result in results.items():
        counts = dict.fromkeys(("pairs", "chosen_degenerate", "rejected_degenerate",
                                "real_over_degenerate", "degenerate_over_real"), 0)
        for pair in result.pairs:
            bad_chosen = degenerate(pair.chosen, pair.prompt)
            bad_rejected = degenerate(pair.rejected, pair.prompt)
            counts["pairs"] += 1
            counts["chosen_degenerate"] += bad_chosen
            counts["rejected_degenerate"] += bad_rejected
            counts["real_over_degenerate"] += (pair.chosen_source == "sampled" and bad_rejected
                                               and not bad_chosen)
            counts["degenerate_over_real"] += (pair.rejected_source == "sampled" and bad_chosen
                                               and not bad_rejected)
        out[name] = counts
    return out
