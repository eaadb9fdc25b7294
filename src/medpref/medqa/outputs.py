"""Stage 08's outputs, declared once: its per-item records and the tables built from them.

Every model answer the stage's tables read is a record (``reports/08_medqa/records/``):
the Distill calls, the retrieval ranks of every query source, the Read answers and the
judge's verdicts. The tables and figures below are pure functions of those records and
the params, so ``medpref tables`` rebuilds them with no model call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from medpref.contracts import PairwiseJudgement
from medpref.medqa.distill import DistilledQuery
from medpref.medqa.retrieval import RetrievalResult
from medpref.medqa.sources import HISTORY, LAST_QUESTION, distilled_source
from medpref.outputs import Data, Figure, Records, StageOutputs, Table

Rows = Mapping[str, list[dict[str, Any]]]


# -- records → the stage's objects ----------------------------------------------------------

def distilled_of(records: Rows) -> dict[str, list[DistilledQuery]]:
    """Distill calls by role, in record order."""
    out: dict[str, list[DistilledQuery]] = {}
    fields = DistilledQuery.__dataclass_fields__
    for row in records["distilled"]:
        q = DistilledQuery(**{k: row[k] for k in fields})
        out.setdefault(q.role, []).append(q)
    return out


def results_of(records: Rows) -> dict[str, list[RetrievalResult]]:
    """Retrieval results by query source, in record order."""
    out: dict[str, list[RetrievalResult]] = {}
    for row in records["retrievals"]:
        out.setdefault(row["source"], []).append(RetrievalResult(
            row["item"], row["source"], row["query"], row["doc_rank"], row["attr_rank"], ()))
    return out


def judgements_of(records: Rows) -> list[PairwiseJudgement]:
    return [PairwiseJudgement.model_validate({k: v for k, v in r.items() if k != "key"})
            for r in records["verdicts"]]


def model_ids(records: Rows) -> dict[str, str]:
    """role → model id, as the Distill and Read records name them."""
    ids = {r["role"]: r["model_id"] for r in records["answers"]}
    ids.update({r["role"]: r["model_id"] for r in records["distilled"]})
    return ids


def _sizes(records: Rows) -> tuple[int, int, dict[str, int]]:
    rows = records["retrievals"]
    first = rows[0] if rows else {"n_medicines": 0, "n_items": 0}
    return first["n_medicines"], first["n_items"], {r["item"]: r["n_gold"] for r in rows}


# -- builders -------------------------------------------------------------------------------

def malformed_table(records: Rows, params) -> pd.DataFrame:
    from medpref.medqa.tables import malformed_reasons

    return malformed_reasons(distilled_of(records))


def retrieval_table(records: Rows, params) -> pd.DataFrame:
    from medpref.medqa.tables import retrieval_table as table3

    n_docs, n_items, n_gold = _sizes(records)
    return table3(results_of(records), n_gold, (n_docs, n_items), params.medqa.hr_ks,
                  model_ids(records), distilled_of(records))


def ratings_table(records: Rows, params) -> pd.DataFrame:
    from medpref.medqa.ratings import ratings_for, stored_judgements

    p = params.medqa
    ratings = ratings_for(judgements_of(records), p, params.shared.seed, "stage")
    stored = stored_judgements(p)
    if stored:
        ratings = pd.concat([ratings, ratings_for(stored, p, params.shared.seed, "stored")],
                            ignore_index=True)
    return ratings


def models_table(records: Rows, params) -> pd.DataFrame:
    from medpref.medqa.tables import models_table as table2

    ratings = ratings_table(records, params)
    return table2(params.medqa, distilled_of(records), results_of(records),
                  ratings[ratings["verdicts"] == "stage"], model_ids(records))


def hr_figure(records: Rows, params):
    from medpref.medqa.plots import hr_curves

    results = results_of(records)
    labels = {HISTORY: "History", LAST_QUESTION: "Last question",
              **{distilled_source(r): f"Distilled ({r})" for r in distilled_of(records)}}
    n_docs, n_items, _ = _sizes(records)
    return hr_curves(results, labels, n_docs, n_items, params.medqa.hr_ks)


def elo_figure(records: Rows, params):
    from medpref.medqa.plots import rating_intervals

    return rating_intervals(ratings_table(records, params))


def retrieval_rows(results: Mapping[str, Sequence[RetrievalResult]], tree, items
                   ) -> list[dict[str, Any]]:
    """One record per (source, question): the query, the gold ranks, the top item keys,
    and the sizes the chance row needs."""
    n_gold = {it.id: len(it.gold_attributes) for it in items}
    return [{"source": r.source, "item": r.item_id, "query": r.query, "doc_rank": r.doc_rank,
             "attr_rank": r.attr_rank, "n_gold": n_gold[r.item_id],
             "n_medicines": len(tree.medicines), "n_items": len(tree.items),
             "top_items": [list(tree.items[i].key) for i in r.top_items]}
            for res in results.values() for r in res]


OUTPUTS = StageOutputs("08_medqa", (
    Records("distilled", "every Distill call: raw answer, parsed query, well-formed or why not",
            key=("role", "model_id", "item_id", "raw")),
    Records("retrievals", "gold ranks of every query source on every question",
            key=("source", "item", "query")),
    Records("answers", "every configuration's Read answer", key=("config", "item_id", "text")),
    Records("verdicts", "the judge's parsed verdicts (PairwiseJudgement)",
            key=("id", "judge", "raw")),
    Records("unparsable_verdicts", "judge answers that named no verdict, and skipped slots",
            key=("id", "raw")),
    Table("malformed_reasons", malformed_table),
    Table("table3_retrieval", retrieval_table),
    Figure("hr_at_k", hr_figure),
    Table("ratings", ratings_table, floatfmt=".1f"),
    Figure("elo", elo_figure),
    Table("table2_models", models_table),
    Data("data/08_medqa/db_embeddings.npz", persist=True, doc="item vectors (recomputed "
         "only when the database or the encoder changes)"),
))
