"""Stage 01's run: sample splits, predict trajectories, write the unlabeled set."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from medpref.contracts import Dialogue, UnlabeledItem, read_jsonl
from medpref.llm.client import LLMClient
from medpref.params import repo_path
from medpref.prompts import load_prompt
from medpref.sampling.config import SamplingParams
from medpref.sampling.trajectory import (
    ContinuationError,
    Split,
    choose_exemplar,
    continuation_messages,
    make_item,
    parse_continuation,
    sample_splits,
)

#: The generated continuation starts as the doctor's line (small models need the nudge).
ANSWER_PREFIX = "Doctor:"


def load_source_dialogues(p: SamplingParams) -> list[Dialogue]:
    """The dialogues to split: the embedded corpus or a real set through its adapter."""
    if p.source == "embedded":
        return read_jsonl(repo_path(p.dialogues), Dialogue)
    from medpref.data import adapters

    loader = {"mts_dialog": adapters.mts_dialogues, "aci_bench": adapters.aci_dialogues}[p.source]
    return loader(split=p.source_split, limit=p.source_limit)


@dataclass
class UnlabeledSet:
    items: list[UnlabeledItem]
    rejected: list[dict] = field(default_factory=list)
    prompt_sha: str = ""


def build_unlabeled(p: SamplingParams, client: LLMClient, seed: int,
                    dialogues: list[Dialogue], pool: list[Dialogue]) -> UnlabeledSet:
    """Every split gets a generated candidate, or is recorded as rejected and dropped."""
    template = load_prompt(p.prompt)
    splits = sample_splits(dialogues, p.n_items, p.future_rounds, p.min_future_rounds, seed)
    pending: dict[int, Split] = dict(enumerate(splits))
    accepted: dict[int, tuple] = {}
    rejected: list[dict] = []
    for attempt in range(p.max_attempts):
        if not pending:
            break
        order = sorted(pending)
        exemplars = {i: choose_exemplar(pending[i], pool, attempt, seed) for i in order}
        messages = [continuation_messages(template, pending[i], exemplars[i], p.future_rounds,
                                          p.exemplar_max_turns, p.history_max_turns)
                    for i in order]
        completions = client.chat_many(messages, prefix=ANSWER_PREFIX,
                                       max_new_tokens=p.max_new_tokens)
        for i, comp in zip(order, completions):
            split = pending[i]
            try:
                if not comp.ok:
                    raise ContinuationError(f"model call failed: {comp.error}")
                cont = parse_continuation(comp.text, p.future_rounds, split.history[-1].text,
                                          truncated=comp.finish_reason == "length",
                                          prefix=ANSWER_PREFIX)
            except ContinuationError as exc:
                rejected.append({"split": i, "dialogue_id": split.dialogue_id,
                                 "turn_index": split.turn_index, "attempt": attempt,
                                 "exemplar_id": exemplars[i].id, "reason": str(exc),
                                 "raw": comp.text})
                continue
            accepted[i] = (cont, {"exemplar_id": exemplars[i].id, "attempt": attempt,
                                  "generator": client.model_id, "prompt_sha": template.sha,
                                  "parse_notes": cont.notes})
            del pending[i]
    items = [make_item(n + 1, splits[i], *accepted[i]) for n, i in enumerate(sorted(accepted))]
    return UnlabeledSet(items, rejected, template.sha)


def summarise(result: UnlabeledSet, n_requested: int) -> pd.DataFrame:
    """One row per candidate source: counts and mean lengths (words, rounds)."""
    rows = []
    for item in result.items:
        for c in item.candidates:
            rows.append({"source": c.source, "history_turns": len(item.history),
                         "response_words": len(c.response.split()),
                         "future_rounds": len(c.future) / 2})
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=["source", "candidates", "history_turns",
                                     "response_words", "future_rounds"])
    table = df.groupby("source").agg(candidates=("source", "size"),
                                     history_turns=("history_turns", "mean"),
                                     response_words=("response_words", "mean"),
                                     future_rounds=("future_rounds", "mean")).round(2)
    return table.reset_index()


def metrics(result: UnlabeledSet, n_requested: int) -> dict:
    dropped = n_requested - len(result.items)
    return {"items_requested": n_requested, "items_written": len(result.items),
            "items_dropped": dropped, "malformed_continuations": len(result.rejected),
            "yield": round(len(result.items) / max(1, n_requested), 4)}
