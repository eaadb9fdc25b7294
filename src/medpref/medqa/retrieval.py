"""Retrieval over the medicine tree and its hit rates (RagPULSE Tables 2 and 3).

A query is embedded and every attribute item is ranked by cosine similarity (ties by
database order, so rankings are deterministic). Two rankings follow from it:

* **attribute level** — the items themselves; a hit at k when one of the top-k items is
  (gold medicine, a gold attribute). An item with several gold attributes is hit by any.
* **document level** — a ranking of the medicines; a hit at k when the gold medicine is
  among the first k. Two ways to rank them (``medqa.doc_level``): ``generic_name``, the
  paper's ("only searching the generic name of the medicine"): the query against the
  embedded generic names, the document keys K^n; or ``best_item``: the medicines in the
  order of their best-ranked attribute item (a node ranks by its best child).

HR@k is the share of questions with a hit at k. With 52 medicines, HR@50 at document
level is ~1 whatever the query (a random ranking already scores 50/52 ≈ 0.96); it is
reported for the layout of Table 3. :func:`chance_hit_rate` gives that random baseline.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from math import comb

import numpy as np

from medpref.contracts import ContractError, MedicineQAItem
from medpref.medqa.config import MedQAParams
from medpref.medqa.database import Encoder, MedicineTree
from medpref.prompts import format_dialogue


def rank_items(query_vecs: np.ndarray, item_vecs: np.ndarray) -> np.ndarray:
    """Item indices per query, most similar first (vectors are L2-normalised)."""
    scores = np.atleast_2d(query_vecs) @ item_vecs.T
    return np.argsort(-scores, axis=1, kind="stable")


def document_ranking(item_order: Iterable[int], item_medicine: Sequence[str]) -> list[str]:
    """Medicines in the order of their first (best) item in an item ranking."""
    seen: dict[str, None] = {}
    for i in item_order:
        seen.setdefault(item_medicine[i], None)
    return list(seen)


def first_hit_rank(ranked: Sequence, gold: set) -> int | None:
    """1-based rank of the first element of ``ranked`` in ``gold``; None if absent."""
    for pos, key in enumerate(ranked, start=1):
        if key in gold:
            return pos
    return None


def hit_rates(ranks: Sequence[int | None], ks: Sequence[int]) -> dict[int, float]:
    """HR@k for each k: share of first-hit ranks ≤ k (a missing hit never counts)."""
    if not ranks:
        raise ValueError("hit rates of an empty set of questions are undefined")
    return {k: sum(1 for r in ranks if r is not None and r <= k) / len(ranks) for k in ks}


def chance_hit_rate(n_candidates: int, n_gold: int, k: int) -> float:
    """HR@k of a uniformly random ranking: 1 − C(n−g, k) / C(n, k)."""
    if k >= n_candidates:
        return 1.0
    return 1.0 - comb(n_candidates - n_gold, k) / comb(n_candidates, k)


# -- queries --------------------------------------------------------------------------

def last_question_query(item: MedicineQAItem) -> str:
    """Table 3's "Last Question" baseline: the patient's new question alone."""
    return item.question


def history_query(item: MedicineQAItem, max_turns: int) -> str:
    """Table 3's "History" baseline: the dialogue (last ``max_turns`` turns) + question."""
    lines = format_dialogue(item.history[-max_turns:])
    return f"{lines}\nPatient: {item.question}".strip()


# -- evaluation of one ranking ---------------------------------------------------------

@dataclass(frozen=True)
class RetrievalResult:
    """Where the gold evidence landed for one question and one query source."""

    item_id: str
    source: str
    query: str
    doc_rank: int | None
    attr_rank: int | None
    top_items: tuple[int, ...]


def evaluate_ranking(item: MedicineQAItem, source: str, query: str, order: Sequence[int],
                     item_keys: Sequence[tuple[str, str]], keep: int,
                     doc_order: Sequence[str] | None = None) -> RetrievalResult:
    """Gold ranks at both levels for one question's item ranking; keeps the top ``keep``.
    ``doc_order``: the medicines ranked by their generic names (None: by best item)."""
    medicines = [k[0] for k in item_keys]
    gold_items = {(item.gold_medicine, a) for a in item.gold_attributes}
    attr_rank = first_hit_rank([item_keys[i] for i in order], gold_items)
    docs = doc_order if doc_order is not None else document_ranking(order, medicines)
    doc_rank = first_hit_rank(docs, {item.gold_medicine})
    return RetrievalResult(item.id, source, query, doc_rank, attr_rank,
                           tuple(int(i) for i in order[:keep]))


def check_gold(items: Sequence[MedicineQAItem], item_keys: Sequence[tuple[str, str]],
               path: str) -> None:
    """Every question's gold medicine and attributes must exist in the database.

    Raises :class:`ContractError` naming the file, the record number and the field.
    """
    keys = set(item_keys)
    medicines = {k[0] for k in keys}
    for line, item in enumerate(items, start=1):
        if item.gold_medicine not in medicines:
            raise ContractError(path, line, "gold_medicine", f"item {item.id}: "
                                f"'{item.gold_medicine}' is not in the medicine database")
        if not item.gold_attributes:
            raise ContractError(path, line, "gold_attributes",
                                f"item {item.id}: at least one attribute is needed")
        for attribute in item.gold_attributes:
            if (item.gold_medicine, attribute) not in keys:
                raise ContractError(path, line, "gold_attributes", f"item {item.id}: "
                                    f"'{item.gold_medicine}' has no attribute '{attribute}'")


def name_vectors(p: MedQAParams, tree: MedicineTree, encode: Encoder) -> np.ndarray | None:
    """The generic names' vectors (document keys) when documents are ranked by name."""
    return encode(tree.names) if p.doc_level == "generic_name" else None


def retrieve_all(sources: Mapping[str, Sequence[str]], items: Sequence[MedicineQAItem],
                 encode: Encoder, item_vecs: np.ndarray, tree: MedicineTree, keep: int,
                 name_vecs: np.ndarray | None = None) -> dict[str, list[RetrievalResult]]:
    """Rank the tree's items for every query of every source and locate the gold.
    ``name_vecs`` (the generic names' vectors): rank documents by name, as the paper
    does; None ranks them by their best item."""
    keys = [it.key for it in tree.items]
    names = tree.names
    out = {}
    for source, queries in sources.items():
        qvecs = encode(list(queries))
        orders = rank_items(qvecs, item_vecs)
        doc_orders = ([[names[i] for i in o] for o in rank_items(qvecs, name_vecs)]
                      if name_vecs is not None else [None] * len(orders))
        out[source] = [evaluate_ranking(it, source, q, order, keys, keep, docs)
                       for it, q, order, docs in zip(items, queries, orders, doc_orders)]
    return out
