"""Table 2 and Table 3 metrics of NoteChat (pure functions, tested by hand values).

* **Similarity** — ROUGE-1/2/Lsum F1 (×100) of a generated dialogue against the
  reference dialogue, one utterance a line (ROUGE-Lsum splits on lines).
* **Factuality** — concept precision/recall/F1 (×100) between the CUI sets of the
  generated and the reference dialogue (negation is not part of the match).
* **Extractiveness** — ROUGE-1/2/L F1 of the generated dialogue against the note
  (src→hypo).
* **Diversity** — Texygen self-BLEU (the paper's metric) across a system's whole corpus:
  each utterance scored by BLEU-4 against every other utterance of the system's
  dialogues, averaged; lower is more diverse. Computed for all utterances, the doctor's
  only and the patient's only (:func:`corpus_diversity`). sacrebleu's sentence BLEU
  (``13a`` / ``zh`` tokens, ``exp`` smoothing), via :mod:`medpref.metrics.text`.
* **Statistics** (Table 2) — utterances, words, concept mentions per dialogue; words per
  utterance and medical-term density (concept mentions / words, %) per role.

Tokens are language-aware (:mod:`medpref.metrics.text`): one per Han character, so
Chinese dialogues are counted and compared at all. Empty inputs do not divide by zero: a
score that has nothing to score is 0.0 (ROUGE, concepts) or None (self-BLEU of fewer
than two utterances).
"""

from __future__ import annotations

from collections.abc import Sequence

from medpref.contracts import Turn
from medpref.metrics import text as tm


def words(text: str) -> list[str]:
    """Words for counts: one per Han character, letter/digit runs otherwise."""
    return tm.words(text)


def dialogue_text(turns: Sequence[Turn]) -> str:
    """Utterances one a line, without speaker tags."""
    return "\n".join(t.text for t in turns)


def rouge_f1(reference: str, prediction: str) -> dict[str, float]:
    """ROUGE-1/2/L/Lsum F1 ×100 (0 when either side is empty), language-aware tokens."""
    return {k: 100.0 * v.f1 for k, v in tm.rouge(reference, prediction).items()}


def concept_prf(predicted: set[str], reference: set[str]) -> dict[str, float]:
    """Precision, recall, F1 ×100 of two concept sets (0 where a side is empty)."""
    hit = len(predicted & reference)
    p = hit / len(predicted) if predicted else 0.0
    r = hit / len(reference) if reference else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return {"concept_p": 100 * p, "concept_r": 100 * r, "concept_f1": 100 * f}


def corpus_diversity(dialogues: Sequence[Sequence[Turn]], sample: int | None = None,
                     seed: int = 0) -> dict[str, float | None]:
    """Texygen self-BLEU of a system's utterances across all its dialogues (all, doctor,
    patient); ``sample`` hypotheses per corpus (None: every utterance)."""
    turns = [t for d in dialogues for t in d]
    return {f"sbleu_{who}": tm.self_bleu([t.text for t in turns if who == "all" or t.role == who],
                                         sample=sample, seed=seed)
            for who in ("all", "doctor", "patient")}


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
