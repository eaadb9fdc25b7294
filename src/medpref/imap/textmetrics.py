"""Baseline text metrics of Table 2, on raw texts or on imaps (+imap).

The n-gram metrics come from the shared, language-aware :mod:`medpref.metrics.text`:
ROUGE-1/2/L F1 over lower-cased tokens with one token per Han character (Porter stemming
for English) and sentence BLEU-4 with sacrebleu's standard tokens (``13a``, or ``zh`` for
Chinese). Two embedding rows use the embedded MiniLM (all-MiniLM-L6-v2):

* **BERTScore-F1 (MiniLM)** — BERTScore (Zhang et al. 2020, the ``bert-score`` package)
  on MiniLM's last layer, no idf, no baseline rescaling. The paper's BERTScore rows use
  larger encoders; this is the same metric on a small model.
* **MiniLM cosine** — cosine similarity of the two sentence embeddings (not a metric of
  the paper; kept as a cheap reference row).

An empty text (an imap the judge could not extract) scores 0 on every metric.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from medpref.embedding import Encoder
from medpref.metrics.text import bleu4, rouge, tokenize

NGRAM_METRICS = ("ROUGE-1", "ROUGE-2", "ROUGE-L", "BLEU-4")
BERTSCORE = "BERTScore-F1 (MiniLM)"
COSINE = "MiniLM cosine"
TEXT_METRICS = (*NGRAM_METRICS, BERTSCORE, COSINE)

BertScorer = Callable[[Sequence[str], Sequence[str]], list[float]]


def ngram_scores(reference: str, response: str, lang: str = "auto") -> dict[str, float]:
    """ROUGE-1/2/L F1 and BLEU-4 of one pair (fractions)."""
    r = rouge(reference, response, lang=lang)
    return {"ROUGE-1": r["rouge1"].f1, "ROUGE-2": r["rouge2"].f1, "ROUGE-L": r["rougeL"].f1,
            "BLEU-4": bleu4(reference, response, lang=lang)}


def _offline() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"          # set before loading: no download attempts
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def _check_model(path: Path) -> None:
    if not (path / "modules.json").exists():
        raise FileNotFoundError(f"no sentence-transformers model at '{path}'; run `make setup`")


def load_bertscore(path: str | Path, layer: int) -> BertScorer:
    """BERTScore F1 on a local encoder's ``layer`` (bert-score package; offline)."""
    _offline()
    _check_model(Path(path))
    from bert_score import BERTScorer

    scorer = BERTScorer(model_type=str(path), num_layers=layer, device="cpu", batch_size=32)

    def score(references: Sequence[str], responses: Sequence[str]) -> list[float]:
        _, _, f1 = scorer.score(list(responses), list(references), verbose=False)
        return [float(x) for x in f1]

    return score


def _both_sides(reference: str, response: str) -> bool:
    return bool(tokenize(reference)) and bool(tokenize(response))


def embedding_similarity(references: Sequence[str], responses: Sequence[str],
                         encode: Encoder) -> list[float]:
    """Cosine similarity of each reference-response pair (0 where a side is empty)."""
    refs, hyps = encode(list(references)), encode(list(responses))
    sims = np.sum(refs * hyps, axis=1)
    return [float(s) if _both_sides(r, h) else 0.0
            for s, r, h in zip(sims, references, responses)]


def bertscore_f1(references: Sequence[str], responses: Sequence[str],
                 scorer: BertScorer) -> list[float]:
    """BERTScore F1 of each pair (0 where a side is empty; empty pairs are not scored)."""
    keep = [i for i, (r, h) in enumerate(zip(references, responses)) if _both_sides(r, h)]
    out = [0.0] * len(references)
    if keep:
        for i, f in zip(keep, scorer([references[i] for i in keep],
                                     [responses[i] for i in keep])):
            out[i] = f
    return out


def text_metrics(references: Sequence[str], responses: Sequence[str], encode: Encoder,
                 suffix: str = "", *, langs: Sequence[str] | None = None,
                 bertscore: BertScorer | None = None) -> pd.DataFrame:
    """One row per pair: the n-gram metrics, BERTScore (when a scorer is given) and the
    embedding cosine (column names + ``suffix``). ``langs``: one per pair (``auto``,
    ``zh``, ``en``); None detects each pair's language from its text."""
    if len(references) != len(responses):
        raise ValueError("references and responses differ in length")
    langs = list(langs) if langs is not None else ["auto"] * len(references)
    rows = [ngram_scores(r, h, lang) for r, h, lang in zip(references, responses, langs)]
    df = pd.DataFrame(rows, columns=list(NGRAM_METRICS))
    if bertscore is not None:
        df[BERTSCORE] = bertscore_f1(references, responses, bertscore) if rows else []
    df[COSINE] = embedding_similarity(references, responses, encode) if rows else []
    return df.add_suffix(suffix)
