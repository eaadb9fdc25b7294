"""Table 2 and Table 3 metrics of NoteChat (pure functions, tested by hand values).

* **Similarity** — ROUGE-1/2/Lsum F1 (×100) of a generated dialogue against the
  reference dialogue, one utterance a line (ROUGE-Lsum splits on lines).
* **Factuality** — concept precision/recall/F1 (×100) between the CUI sets of the
  generated and the reference dialogue (negation is not part of the match).
* **Extractiveness** — ROUGE-1/2/L F1 of the generated dialogue against the note
  (src→hypo).
* **Diversity** — self-BLEU: each utterance scored by BLEU-4 against the dialogue's
  other utterances as references, averaged; lower is more diverse. Computed for all
  utterances, the doctor's only and the patient's only. NLTK's BLEU with smoothing
  method 1 (ε = 0.1 for empty n-gram counts), so short turns do not score 0 by default.
* **Statistics** (Table 2) — utterances, words, concept mentions per dialogue; words per
  utterance and medical-term density (concept mentions / words, %) per role.

Empty inputs do not divide by zero: a score that has nothing to score is 0.0 (ROUGE,
concepts) or None (self-BLEU of fewer than two utterances; left out of means).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

from medpref.contracts import Turn

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def words(text: str) -> list[str]:
    """Lower-cased word tokens (BLEU tokens and word counts)."""
    return _WORD.findall(text.lower())


def dialogue_text(turns: Sequence[Turn]) -> str:
    """Utterances one a line, without speaker tags."""
    return "\n".join(t.text for t in turns)


@lru_cache(maxsize=1)
def _rouge_scorer():
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL", "rougeLsum"],
                                    use_stemmer=True)


def rouge_f1(reference: str, prediction: str) -> dict[str, float]:
    """ROUGE-1/2/L/Lsum F1 ×100 (0 when either side is empty)."""
    if not reference.strip() or not prediction.strip():
        return {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0, "rougeLsum": 0.0}
    scores = _rouge_scorer().score(reference, prediction)
    return {k: 100.0 * v.fmeasure for k, v in scores.items()}


def concept_prf(predicted: set[str], reference: set[str]) -> dict[str, float]:
    """Precision, recall, F1 ×100 of two concept sets (0 where a side is empty)."""
    hit = len(predicted & reference)
    p = hit / len(predicted) if predicted else 0.0
    r = hit / len(reference) if reference else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return {"concept_p": 100 * p, "concept_r": 100 * r, "concept_f1": 100 * f}


def self_bleu(utterances: Sequence[str]) -> float | None:
    """Mean BLEU-4 of each utterance against the others (None for < 2 utterances)."""
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    tokens = [w for w in (words(u) for u in utterances) if w]
    if len(tokens) < 2:
        return None
    smooth = SmoothingFunction().method1
    scores = [sentence_bleu(tokens[:i] + tokens[i + 1:], hyp, smoothing_function=smooth)
              for i, hyp in enumerate(tokens)]
    return sum(scores) / len(scores)


def diversity(turns: Sequence[Turn]) -> dict[str, float | None]:
    return {"sbleu_all": self_bleu([t.text for t in turns]),
            "sbleu_doctor": self_bleu([t.text for t in turns if t.role == "doctor"]),
            "sbleu_patient": self_bleu([t.text for t in turns if t.role == "patient"])}


def dialogue_stats(turns: Sequence[Turn], mentions_per_turn: Sequence[int]) -> dict[str, float]:
    """Table 2 statistics of one dialogue; ``mentions_per_turn`` = concepts per turn."""
    out: dict[str, float] = {"utterances": len(turns),
                             "words": sum(len(words(t.text)) for t in turns),
                             "medical": sum(mentions_per_turn)}
    for role in ("doctor", "patient"):
        idx = [i for i, t in enumerate(turns) if t.role == role]
        n_words = sum(len(words(turns[i].text)) for i in idx)
        n_med = sum(mentions_per_turn[i] for i in idx)
        out[f"{role}_words_per_utt"] = n_words / len(idx) if idx else 0.0
        out[f"{role}_term_density"] = 100.0 * n_med / n_words if n_words else 0.0
    return out
