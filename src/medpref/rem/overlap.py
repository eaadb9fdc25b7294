"""Which REM rows share text with evaluation-split dialogues.

The held-out evaluations draw their states from the ``eval`` part of the dialogue split
(``shared.split``), so no REM training row may carry their text. Text is shared when a
run of ``n`` consecutive words (``rem.construction.overlap_words``) of an evaluation
dialogue occurs in the row and in no training or development dialogue: a run that those
share too is a stock phrase of the written corpus ("is there any chance you could be
pregnant"), not the evaluation dialogue's own text; copied sentences are caught.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from medpref.contracts import Dialogue, RemAnnotation
from medpref.data.split import DialogueSplit


def word_runs(text: str, n: int) -> set[tuple[str, ...]]:
    """Every run of ``n`` consecutive lower-cased words of ``text``."""
    words = re.findall(r"[a-z0-9']+", text.lower())
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def history_text(history: Iterable) -> str:
    return " ".join(t["text"] if isinstance(t, dict) else t.text for t in history)


def eval_runs(dialogues: Sequence[Dialogue], split: DialogueSplit, n: int
              ) -> dict[str, set[tuple[str, ...]]]:
    """Per eval-split dialogue, its runs of ``n`` words that no train or dev dialogue has."""
    runs = {d.id: word_runs(history_text(d.turns), n) for d in dialogues}
    stock = set().union(*(r for i, r in runs.items() if split.parts.get(i) != "eval"))
    return {i: r - stock for i, r in runs.items() if split.parts.get(i) == "eval"}


def eval_overlaps(rows: Sequence[RemAnnotation | dict], dialogues: Sequence[Dialogue],
                  split: DialogueSplit, n: int) -> dict[str, list[str]]:
    """Row id → the eval-split dialogues whose own text (runs of ``n`` words found in no
    other part's dialogue) the row shares; rows that share none are left out."""
    evals = eval_runs(dialogues, split, n)
    found = {}
    for row in rows:
        rid, hist = (row["id"], row["history"]) if isinstance(row, dict) else (row.id,
                                                                               row.history)
        runs = word_runs(history_text(hist), n)
        hits = sorted(i for i, e in evals.items() if runs & e)
        if hits:
            found[rid] = hits
    return found


def hand_training_rows(hand: Sequence[RemAnnotation], dialogues: Sequence[Dialogue],
                       split: DialogueSplit, n: int) -> list[RemAnnotation]:
    """The hand rows the REM may train on: split ``train`` and no text shared with an
    evaluation-split dialogue."""
    train = [a for a in hand if getattr(a, "split", None) == "train"]
    held = eval_overlaps(train, dialogues, split, n)
    return [a for a in train if a.id not in held]
