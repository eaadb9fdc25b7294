"""How well n-gram text metrics follow human scores (no model call).

Input: records of the "Medical QA with human scores" contract in any language —
``question``, ``reference``, ``response`` (or ``prediction``), ``human`` (a mapping of
dimension → score), optional ``system`` and ``lang``. Each metric scores every
(reference, response) pair; Spearman ρ and Kendall τ-b with each human dimension are
computed within each system and averaged over systems (imapScore Table 2's way: ``AVE``)
and over all records pooled.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import kendalltau, spearmanr

from medpref.metrics.text import bleu4, rouge

Scorer = Callable[[str, str, str], float]   # (reference, response, lang) -> score


def rank_correlations(metric: Sequence[float], human: Sequence[float]) -> tuple[float, float]:
    """(Spearman ρ, Kendall τ-b); NaN when either side is constant or has < 3 points."""
    x, y = np.asarray(metric, dtype=float), np.asarray(human, dtype=float)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan"), float("nan")
    return float(spearmanr(x, y).statistic), float(kendalltau(x, y).statistic)


def _r(kind: str) -> Scorer:
    return lambda ref, hyp, lang: rouge(ref, hyp, lang=lang)[kind].f1


NGRAM_SCORERS: dict[str, Scorer] = {
    "ROUGE-1": _r("rouge1"), "ROUGE-2": _r("rouge2"), "ROUGE-L": _r("rougeL"),
    "BLEU-4": lambda ref, hyp, lang: bleu4(ref, hyp, lang=lang),
}


def read_records(path: str | Path) -> list[dict]:
    """JSONL records; ``prediction`` is read as ``response``. Raises naming the line."""
    out = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        rec = json.loads(line)
        rec.setdefault("response", rec.get("prediction"))
        missing = [k for k in ("reference", "response", "human") if rec.get(k) is None]
        if missing or not isinstance(rec["human"], dict):
            raise ValueError(f"{path}:{n}: needs reference, response (or prediction) and "
                             f"a human mapping (missing: {missing or ['human as a mapping']})")
        out.append(rec)
    return out


def score_records(records: Sequence[Mapping], scorers: Mapping[str, Scorer],
                  lang: str = "auto") -> pd.DataFrame:
    """One row per record: system, every metric, every human dimension (``human_<dim>``).
    ``lang``: ``auto`` (detect per pair), ``item`` (the record's ``lang``), ``zh``/``en``."""
    rows = []
    for rec in records:
        pair_lang = rec.get("lang", "auto") if lang == "item" else lang
        row = {"system": rec.get("system", "all")}
        row.update({name: f(rec["reference"], rec["response"], pair_lang)
                    for name, f in scorers.items()})
        row.update({f"human_{d}": float(v) for d, v in rec["human"].items()})
        rows.append(row)
    return pd.DataFrame(rows)


def correlation_table(scores: pd.DataFrame, metrics: Iterable[str]) -> pd.DataFrame:
    """Rows = metrics; per human dimension: ρ and τ (×100) averaged over systems (AVE,
    defined cells only) and pooled over all records; ``zero_share`` = records scoring 0."""
    dims = [c[len("human_"):] for c in scores.columns if c.startswith("human_")]
    rows = []
    for metric in metrics:
        row: dict = {"metric": metric, "zero_share": round(float((scores[metric] == 0).mean()), 3)}
        for dim in dims:
            per = [rank_correlations(part[metric], part[f"human_{dim}"])
                   for _, part in scores.groupby("system")]
            pooled = rank_correlations(scores[metric], scores[f"human_{dim}"])
            for i, sym in enumerate(("rho", "tau")):
                defined = [v[i] for v in per if v[i] == v[i]]
                row[f"{dim} {sym} AVE"] = 100 * sum(defined) / len(defined) if defined else None
                row[f"{dim} {sym} pooled"] = 100 * pooled[i]
        rows.append(row)
    return pd.DataFrame(rows).round(1)
