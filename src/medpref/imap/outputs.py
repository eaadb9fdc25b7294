"""Stage 07's outputs, declared once: its per-item records and the tables built from them.

Every model computation the stage's tables read is a record (``reports/07_imapscore/
records/``):

* ``extractions`` — every imap request of the judge (one per distinct question, distinct
  reference and response): the raw completion (every sample in sampled mode) and its
  parse;
* ``relations`` — every value pair of a shared term of an item: the judge's answer where
  it was asked (raw text or option probabilities, and the parsed relation) and the
  ontology's relation (whose value links may come from the MiniLM embedding fallback);
* ``value_links`` — every Inform value's link to the ontology;
* ``items`` — every scored item: its human scores, the ids of its three extractions, and
  the text metrics on the raw texts and on the imaps (ROUGE, BLEU, and the MiniLM
  BERTScore and cosine, which need the encoder).

The tables and the figure are pure functions of those records and the params: the
imaps are read back from the extractions (``max_values_per_term``), imapScore (Eq. 1) is
recomputed on each relation path from the recorded relations (``lambda_reading``,
``judge_relations``), and the correlations from the scores. ``medpref tables`` rebuilds
them with no model call. No record holds an item's question, reference or response text
as such, but the imaps' values are words of those texts, and a small judge's raw
completion may echo a piece of its prompt: records of a run on the MTS-Dialog study
(``imapscore.source: mts_correlation``) carry such fragments of licensed data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from medpref.imap.correlation import correlations, metric_order, plot_heatmap, table2
from medpref.imap.extraction import Extraction, parse_summary
from medpref.imap.ontology import LINK_COLUMNS
from medpref.imap.scoring import pair_relations, score_row
from medpref.imap.structure import ImapPair, values_by_term
from medpref.outputs import Figure, Records, StageOutputs, Table

Rows = Mapping[str, list[dict[str, Any]]]


# -- the stage's objects → records ---------------------------------------------------------

def extraction_records(extractions: Sequence[Extraction], model_id: str) -> list[dict]:
    """Every extraction as a record, with the judge's model id after its request id."""
    rows = []
    for e in extractions:
        rec = e.to_record()
        rows.append({"kind": rec.pop("kind"), "id": rec.pop("id"), "model_id": model_id,
                     **rec})
    return rows


# -- records → the stage's objects ----------------------------------------------------------

def extractions_of(records: Rows) -> list[Extraction]:
    return [Extraction.from_record(r) for r in records["extractions"]]


def _pairs(extractions: Mapping[str, Mapping], item: Mapping, side: str) -> list[ImapPair]:
    """An item's reference or response pairs, from the extraction its record names."""
    request = item[side]
    if request not in extractions:
        raise ValueError(f"records/items.jsonl: item '{item['id']}' field '{side}' names "
                         f"extraction '{request}', which records/extractions.jsonl lacks")
    return [ImapPair(*pair) for pair in extractions[request]["pairs"]]


def order_of(params) -> list[str]:
    """Table 2's metric rows for these params."""
    p = params.imapscore
    return metric_order(p.judge_relations, p.bertscore_layer is not None)


# -- builders -------------------------------------------------------------------------------

def parse_table(records: Rows, params) -> pd.DataFrame:
    return parse_summary(extractions_of(records))


def links_table(records: Rows, params) -> pd.DataFrame:
    return pd.DataFrame([{c: r[c] for c in LINK_COLUMNS} for r in records["value_links"]],
                        columns=list(LINK_COLUMNS))


def scores_table(records: Rows, params) -> pd.DataFrame:
    """One row per item: human scores, imap sizes, text metrics (as recorded) and the
    imapScore of each relation path (recomputed from the recorded relations)."""
    p = params.imapscore
    extractions = {r["id"]: r for r in records["extractions"]}
    relations = pair_relations(records["relations"])
    rows = []
    for item in records["items"]:
        label_pairs = _pairs(extractions, item, "reference")
        response_pairs = _pairs(extractions, item, "response")
        rows.append(score_row(
            item, label_pairs, response_pairs,
            values_by_term(label_pairs, max_values=p.max_values_per_term),
            values_by_term(response_pairs, max_values=p.max_values_per_term),
            relations.get(item["id"], {}), p.judge_relations, p.lambda_reading))
    return pd.DataFrame(rows)


def correlations_long_table(records: Rows, params) -> pd.DataFrame:
    return correlations(scores_table(records, params), order_of(params))


def correlations_table(records: Rows, params) -> pd.DataFrame:
    """Table 2's layout (×100, whole numbers)."""
    return table2(correlations_long_table(records, params), order_of(params))


def heatmap_figure(records: Rows, params):
    return plot_heatmap(correlations_long_table(records, params), order_of(params),
                        f"Spearman ρ with human scores ({params.imapscore.source})")


OUTPUTS = StageOutputs("07_imapscore", (
    Records("extractions", "every imap request of the judge: raw completion(s), the parse "
            "(pairs, malformed items, Inform-None, notes), model id, prompt hash",
            key=("kind", "id", "model_id", "prompt_sha", "prefix", "raw", "samples")),
    Records("relations", "every value pair of a shared term: the judge's answer where asked "
            "(raw or option probabilities, parsed relation) and the ontology's relation",
            key=("item_id", "term", "label_value", "response_value", "model_id", "raw",
                 "probs", "ontology")),
    Records("value_links", "every Inform value's link to the ontology (string span or "
            "MiniLM embedding fallback)", key=("value", "how", "cuis", "matched")),
    Records("items", "every scored item: human scores, its extractions' ids, the text "
            "metrics on raw texts and on imaps (ROUGE, BLEU, MiniLM BERTScore and cosine)",
            key=("id", "system", "human", "question", "reference", "response", "encoder",
                 "metrics")),
    Table("parse_summary", parse_table),
    Table("links", links_table),
    Table("scores", scores_table),
    Table("correlations_long", correlations_long_table),
    Table("correlations", correlations_table, floatfmt=".0f"),
    Figure("correlation_heatmap", heatmap_figure),
))
