"""The scored question-answer items of stage 07 and the imaps assembled for each."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from medpref.contracts import ScoredQA, read_jsonl
from medpref.imap.config import ImapParams
from medpref.imap.extraction import (
    Extraction,
    question_id,
    question_imap,
    reference_id,
    response_id,
)
from medpref.imap.structure import ImapPair, values_by_term
from medpref.params import repo_path


def load_scored_qa(p: ImapParams) -> list[ScoredQA]:
    """The embedded triples, or the MTS-Dialog correlation study (first N dialogues, all
    four systems of each) through its adapter."""
    if p.source == "embedded":
        return read_jsonl(repo_path(p.data), ScoredQA)
    from medpref.data.adapters import load_mts_correlation_study

    records = load_mts_correlation_study()
    dialogues = list(dict.fromkeys(r.dialogue_id for r in records))[:p.mts_max_dialogues]
    keep = set(dialogues)
    return [r for r in records if r.dialogue_id in keep]


def human_summary(items: Sequence[ScoredQA]) -> pd.DataFrame:
    """Items and mean human scores per system."""
    df = pd.DataFrame([{"system": i.system, "acc": i.human.acc, "cmp": i.human.cmp,
                        "spc": i.human.spc} for i in items])
    return df.groupby("system").agg(items=("acc", "size"), acc=("acc", "mean"),
                                    cmp=("cmp", "mean"), spc=("spc", "mean")).round(3)


@dataclass
class ItemImaps:
    """An item's label and response Inform values by term (the inputs of Eq. 1)."""

    item: ScoredQA
    question: list[ImapPair]
    label_pairs: list[ImapPair]
    response_pairs: list[ImapPair]
    label: dict[str, list[str]]
    response: dict[str, list[str]]

    @property
    def shared_terms(self) -> list[str]:
        return [t for t in self.label if t in self.response]


def assemble_imaps(p: ImapParams, items: Sequence[ScoredQA], questions: dict[str, Extraction],
                   answers: dict[str, Extraction]) -> list[ItemImaps]:
    """Each item's question imap and its label/response Inform values by term."""
    out = []
    for item in items:
        label = answers[reference_id(item)].parsed.pairs
        response = answers[response_id(item)].parsed.pairs
        out.append(ItemImaps(item, question_imap(questions.get(question_id(item)),
                                                 p.fallback_query_term),
                             label, response,
                             values_by_term(label, max_values=p.max_values_per_term),
                             values_by_term(response, max_values=p.max_values_per_term)))
    return out


def imap_example(im: ItemImaps) -> pd.DataFrame:
    """One item's imaps as rows (side, component, term, value), for display."""
    rows = [("question", q) for q in im.question] + [("label", q) for q in im.label_pairs] + \
        [("response", q) for q in im.response_pairs]
    return pd.DataFrame([{"item": im.item.id, "side": side, "component": q.component,
                          "term": q.term, "value": q.value} for side, q in rows],
                        columns=["item", "side", "component", "term", "value"])
