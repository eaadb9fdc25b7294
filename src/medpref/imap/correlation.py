"""Sample-level Spearman ρ and Kendall τ of metrics with human scores (Table 2's layout).

As in the paper, correlations are computed within each system's responses (one column
group per system: ACC, CMP, SPC, each ρ and τ, ×100) and ``AVE`` averages a metric's
values over systems and dimensions. A metric or human score that is constant within a
group has no rank correlation: the cell is empty (NaN) and AVE averages the defined
cells only (``n_undefined`` says how many were left out).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from medpref.imap.config import ImapParams
from medpref.imap.textmetrics import BERTSCORE, TEXT_METRICS
from medpref.metrics.human import rank_correlations

DIMENSIONS = ("acc", "cmp", "spc")
DIM_LABELS = {"acc": "ACC", "cmp": "CMP", "spc": "SPC"}


def correlations(scores: pd.DataFrame, metrics: Sequence[str], group: str = "system",
                 dims: Sequence[str] = DIMENSIONS) -> pd.DataFrame:
    """Long table: one row per (metric, group, dimension) with rho, tau and n."""
    rows = []
    for name, part in scores.groupby(group, sort=True):
        for metric in metrics:
            for dim in dims:
                rho, tau = rank_correlations(part[metric], part[f"human_{dim}"])
                rows.append({"metric": metric, group: name, "dim": dim,
                             "rho": rho, "tau": tau, "n": len(part)})
    return pd.DataFrame(rows)


def table2(long: pd.DataFrame, metrics: Sequence[str], group: str = "system",
           scale: float = 100.0, decimals: int = 0) -> pd.DataFrame:
    """Wide Table 2: rows = metrics (in order), columns ``<group> <DIM> ρ|τ`` then AVE."""
    out = pd.DataFrame({"Metric": list(metrics)}).set_index("Metric")
    for name in sorted(long[group].unique()):
        for dim in DIMENSIONS:
            part = long[(long[group] == name) & (long["dim"] == dim)].set_index("metric")
            for stat, sym in (("rho", "ρ"), ("tau", "τ")):
                out[f"{name} {DIM_LABELS[dim]} {sym}"] = part[stat].reindex(out.index) * scale
    for stat, sym in (("rho", "ρ"), ("tau", "τ")):
        means = long.groupby("metric")[stat].mean()
        out[f"AVE {sym}"] = means.reindex(out.index) * scale
    out["n_undefined"] = long.groupby("metric")["rho"].apply(lambda s: int(s.isna().sum())
                                                             ).reindex(out.index)
    return out.round(decimals).reset_index()


def heatmap_frame(long: pd.DataFrame, metrics: Sequence[str], group: str = "system",
                  stat: str = "rho") -> pd.DataFrame:
    """metric × (group DIM) matrix of one statistic, for the figure."""
    frame = long.assign(col=long[group].astype(str) + " " + long["dim"].map(DIM_LABELS))
    wide = frame.pivot(index="metric", columns="col", values=stat)
    return wide.reindex(index=list(metrics))


def plot_heatmap(long: pd.DataFrame, metrics: Sequence[str], title: str,
                 group: str = "system", stat: str = "rho"):
    """A matplotlib figure: Spearman ρ ×100 per metric and column group (NaN blank)."""
    import seaborn as sns

    from medpref.reports import figure, format_number

    data = heatmap_frame(long, metrics, group, stat) * 100
    fig, ax = figure(figsize=(1.0 + 0.75 * data.shape[1], 0.9 + 0.38 * data.shape[0]))
    labels = data.map(format_number)  # never "-0"
    sns.heatmap(data, annot=labels, fmt="", cmap="RdBu_r", vmin=-100, vmax=100,
                cbar_kws={"label": f"{'Spearman ρ' if stat == 'rho' else 'Kendall τ'} ×100"},
                ax=ax)
    ax.set_xlabel("")
    ax.set_ylabel("")
    ax.set_title(title)
    fig.tight_layout()
    return fig


IMAP_SCORES = ("imapScore (judge)", "imapScore (ontology)", "imapScore +KG")


def metric_order(judge_relations: bool = True, bertscore: bool = True) -> list[str]:
    """Table 2's rows: each baseline then its +imap, then the imapScore variants."""
    bases = [b for b in TEXT_METRICS if bertscore or b != BERTSCORE]
    rows = [m for base in bases for m in (base, f"{base} +imap")]
    return rows + ([*IMAP_SCORES] if judge_relations else ["imapScore (ontology)"])


def table_caption(p: ImapParams, n_items: int, extraction_mode: str) -> str:
    """What the correlation table shows, including what "human" means for the source."""
    if p.source == "embedded":
        human = ("human scores: the embedded synthetic triples' ACC/CMP/SPC ratings (0-5)")
    else:
        human = ("human scores: the MTS-Dialog correlation study rated facts, not "
                 "ACC/CMP/SPC; here ACC = FactualPrecision, CMP = FactualRecall, SPC = "
                 "1 - Edit Distance (Correction) (all 0-1), so 'SPC' is not a specificity "
                 "rating, and the texts are dialogue summaries, not answers to questions")
    return (f"Spearman ρ and Kendall τ (×100) of each metric with human scores, within each "
            f"system's responses ({n_items} items, source: {p.source}); AVE is the mean over "
            f"systems and dimensions of the defined cells (n_undefined: cells left out "
            f"because a metric or score was constant). {human}. Rows: the paper's Table 2 "
            f"has 14 metrics; here ROUGE-1/2/L and BLEU-4 (language-aware tokens: one per "
            f"Han character; BLEU with sacrebleu 13a/zh), BERTScore-F1 on the embedded "
            f"MiniLM (the paper's BERTScore uses larger encoders), the MiniLM sentence "
            f"cosine (not a paper metric), and imapScore (λ read as a "
            f"{p.lambda_reading} of containment pairs; imaps extracted {extraction_mode}"
            f"{' x' + str(p.extraction.samples) if extraction_mode == 'sampled' else ''}).")
