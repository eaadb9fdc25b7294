"""Spearman/Kendall of the n-gram text metrics with human scores, per dimension (no LLM).

Usage:
    PYTHONPATH=src python scripts/text_metric_correlations.py data/embedded/qa_human_scores.jsonl
    PYTHONPATH=src python scripts/text_metric_correlations.py --mts        # MTS-Dialog study
    ... --lang item|auto|zh|en      (default auto: one token per Han character when present)
    ... --legacy                    (adds the pre-fix rows: [a-z0-9]+ tokens for ROUGE and BLEU)

Input: JSONL of the "Medical QA with human scores" contract (question, reference,
response or prediction, human: {dimension: score}, optional system and lang), any
language. ``--mts`` reads MTS-Dialog's correlation study from the shared data folder
(``$MEDPREF_SHARED_DATA``) through ``medpref.data.adapters``.
"""

from __future__ import annotations

import argparse
import re

import pandas as pd

from medpref.metrics.human import NGRAM_SCORERS, correlation_table, read_records, score_records


def legacy_scorers() -> dict:
    """The tokenisation before the shared metrics module, for before/after comparisons:
    rouge-score's default tokenizer ([a-z0-9]+, so Chinese text has no tokens) and NLTK
    BLEU-4 (smoothing 1) over the same tokens."""
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)

    def toks(t):
        return re.findall(r"[a-z0-9]+", t.lower())

    def r(kind):
        return lambda ref, hyp, lang: (scorer.score(ref, hyp)[kind].fmeasure
                                       if toks(ref) and toks(hyp) else 0.0)

    def b(ref, hyp, lang):
        if not toks(ref) or not toks(hyp):
            return 0.0
        return sentence_bleu([toks(ref)], toks(hyp),
                             smoothing_function=SmoothingFunction().method1)

    return {"ROUGE-1 (legacy)": r("rouge1"), "ROUGE-2 (legacy)": r("rouge2"),
            "ROUGE-L (legacy)": r("rougeL"), "BLEU-4 (legacy)": b}


def load(args) -> list[dict]:
    if args.mts:
        from medpref.data.adapters import load_mts_correlation_study

        return [r.model_dump() for r in load_mts_correlation_study()]
    return read_records(args.path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path", nargs="?", help="JSONL of scored QA records")
    ap.add_argument("--mts", action="store_true", help="MTS-Dialog correlation study")
    ap.add_argument("--lang", default="auto", choices=["auto", "item", "zh", "en"])
    ap.add_argument("--legacy", action="store_true", help="add the pre-fix tokenisation rows")
    args = ap.parse_args()
    if not args.mts and not args.path:
        ap.error("give a JSONL path or --mts")
    records = load(args)
    scorers = {**NGRAM_SCORERS, **(legacy_scorers() if args.legacy else {})}
    scores = score_records(records, scorers, args.lang)
    table = correlation_table(scores, list(scorers))
    systems = scores["system"].nunique()
    print(f"{len(records)} records, {systems} systems; ρ/τ ×100 with human scores, "
          f"AVE = mean over systems (within-system correlations), pooled = all records")
    with pd.option_context("display.width", 250, "display.max_columns", 50):
        print(table.to_string(index=False))


if __name__ == "__main__":
    main()
