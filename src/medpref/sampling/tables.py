"""Stage 01's tables from its per-candidate records (no text: counts and lengths only).

:func:`candidate_records` turns the unlabeled items into one row per candidate: its item
and source, the history's and the response's length, the future's length and complete
rounds, and for a generated candidate the rounds its one-shot continuation gave and why
round-by-round completion stopped short. Every table of the stage is a function of those
rows and ``sampling.future_rounds``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from medpref.contracts import UnlabeledItem
from medpref.outputs import content_key
from medpref.sampling.rounds import complete_rounds

Row = dict[str, Any]

#: what a short sampled future's ``failure`` says (a real dialogue has no more turns)
REAL_DIALOGUE_ENDS = "the real dialogue ends"

SOURCES = ("sampled", "generated (one-shot)", "generated")


def candidate_records(items: Sequence[UnlabeledItem]) -> list[Row]:
    """One row per candidate, keyed by a hash of its item's history and the candidate
    (response, future, source); no text is copied."""
    rows = []
    for item in items:
        meta = item.meta or {}
        history = [t.model_dump(mode="json") for t in item.history]
        for c in item.candidates:
            rounds = complete_rounds(c.future)
            generated = c.source == "generated"
            rows.append({
                "key": content_key("candidates", item.id, history, c.model_dump(mode="json")),
                "item": item.id, "dialogue_id": meta.get("dialogue_id"),
                "split_turn": meta.get("split_turn"), "source": c.source,
                "history_turns": len(item.history), "response_words": len(c.response.split()),
                "future_turns": len(c.future), "complete_rounds": rounds,
                "one_shot_rounds": meta.get("one_shot_rounds", rounds) if generated else None,
                "round_by_round_failure": meta.get("round_by_round_failure")
                if generated else None})
    return rows


def short_rows(rows: Sequence[Row], requested: int) -> list[Row]:
    """Every candidate with fewer complete future rounds than ``requested`` (kept, and
    reported): why a generated one stopped, or that the real dialogue ends."""
    return [{"item_id": r["item"], "source": r["source"], "complete_rounds":
             r["complete_rounds"], "requested": requested,
             "failure": r["round_by_round_failure"] if r["source"] == "generated"
             else REAL_DIALOGUE_ENDS}
            for r in rows if r["complete_rounds"] < requested]


def short_table(rows: Sequence[Row], requested: int) -> pd.DataFrame:
    return pd.DataFrame(short_rows(rows, requested),
                        columns=["item_id", "source", "complete_rounds", "requested", "failure"])


def future_rounds_table(rows: Sequence[Row], requested: int) -> pd.DataFrame:
    """Candidates per number of complete future rounds: sampled, generated after the
    one-shot continuation, and generated after round-by-round completion."""
    counts: dict[str, list[int]] = {s: [] for s in SOURCES}
    for r in rows:
        counts[r["source"]].append(r["complete_rounds"])
        if r["source"] == "generated":
            counts["generated (one-shot)"].append(r["one_shot_rounds"])
    return pd.DataFrame([{"complete_rounds": n, **{k: v.count(n) for k, v in counts.items()}}
                         for n in range(requested + 1)])


def summary_table(rows: Sequence[Row]) -> pd.DataFrame:
    """One row per candidate source: counts and mean lengths (turns, words, rounds)."""
    df = pd.DataFrame([{"source": r["source"], "history_turns": r["history_turns"],
                        "response_words": r["response_words"],
                        "future_rounds": r["future_turns"] / 2} for r in rows])
    if df.empty:
        return pd.DataFrame(columns=["source", "candidates", "history_turns",
                                     "response_words", "future_rounds"])
    table = df.groupby("source").agg(candidates=("source", "size"),
                                     history_turns=("history_turns", "mean"),
                                     response_words=("response_words", "mean"),
                                     future_rounds=("future_rounds", "mean")).round(2)
    return table.reset_index()
