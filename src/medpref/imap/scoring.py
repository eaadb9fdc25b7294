"""Per-item scores of stage 07: value links to the ontology, imapScore on each relation
path (judge, ontology, +KG), the text baselines raw and on imaps, and the run's counts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import pandas as pd

from medpref.contracts import ScoredQA
from medpref.imap.config import ImapParams
from medpref.imap.extraction import Extraction, question_id, reference_id, response_id
from medpref.imap.items import ItemImaps
from medpref.imap.ontology import ConceptLinker, Lexicon, OntologyMatcher, count_links
from medpref.imap.relations import PairKey, RelationJudgement, combine, relation_pairs, same_text
from medpref.imap.score import Relation, imap_score
from medpref.imap.structure import ImapPair, imap_text
from medpref.imap.textmetrics import BertScorer, text_metrics
from medpref.params import repo_path


def build_matcher(p: ImapParams, encode=None) -> OntologyMatcher:
    """The ontology: a user's UMLS when ``umls_dir`` is set, else the embedded lexicon."""
    folder = repo_path(p.umls_dir) if p.umls_dir else repo_path(p.lexicon)
    lexicon = Lexicon.from_rrf(folder, sabs=p.umls_sabs)
    linker = ConceptLinker(lexicon, encode if p.link_min_similarity is not None else None,
                           p.link_min_similarity)
    return OntologyMatcher(linker, p.max_hops)


def link_values(matcher: OntologyMatcher, imaps: Sequence[ItemImaps]) -> dict:
    """Link every Inform value once (batched embedding fallback); returns value → Link."""
    values = [v for im in imaps for side in (im.label, im.response)
              for vs in side.values() for v in vs]
    return matcher.linker.link_many(values)


#: one item's value pairs: (term, label value, response value) → (the judge's relation,
#: the ontology's relation), either None where it gave none
PairRelations = Mapping[tuple[str, str, str], tuple[Relation | None, Relation | None]]

#: imapScore rows of Table 2 and the relation path each reads
IMAP_PATHS = {"imapScore (judge)": "judge", "imapScore (ontology)": "ontology",
              "imapScore +KG": "kg"}


def path_relation(path: str, judge: Relation | None, kg: Relation | None) -> Relation:
    """A value pair's relation on one path: the judge's, the ontology's, or both (+KG)."""
    if path == "judge":
        return judge or Relation.UNMATCHED
    if path == "ontology":
        return kg or Relation.UNMATCHED
    return combine(kg, judge)


def imap_scores(label: Mapping[str, Sequence[str]], response: Mapping[str, Sequence[str]],
                relations: PairRelations, judge_relations: bool = True,
                lambda_reading: str = "share") -> dict[str, float]:
    """One item's imapScore for each relation path (judge, ontology, +KG; the ontology's
    only without judge relations). The same text is exact without anybody's judgement."""
    paths = {n: p for n, p in IMAP_PATHS.items() if judge_relations or p == "ontology"}

    def relate_on(path: str):
        def relate(term: str, lv: str, rv: str) -> Relation:
            if same_text(lv, rv):
                return Relation.EXACT
            return path_relation(path, *relations.get((term, lv, rv), (None, None)))
        return relate

    return {name: imap_score(label, response, relate_on(path), lambda_reading).value
            for name, path in paths.items()}


def relation_records(imaps: Sequence[ItemImaps], matcher: OntologyMatcher,
                     judged: dict[PairKey, RelationJudgement] | None,
                     model_id: str | None = None) -> list[dict]:
    """One record per value pair of a shared term (:func:`relation_pairs`): the judge's
    answer where it was asked (raw text or option probabilities, parsed relation) and the
    ontology's relation (its value links may come from the embedding fallback)."""
    rows = []
    for item_id, term, lv, rv in relation_pairs(imaps):
        verdict = (judged or {}).get((item_id, term, lv, rv))
        kg = matcher.relate(term, lv, rv)
        rows.append({
            "item_id": item_id, "term": term, "label_value": lv, "response_value": rv,
            "asked": verdict is not None, "model_id": model_id if verdict else None,
            "raw": verdict.raw if verdict else None, "probs": verdict.probs if verdict else None,
            "error": verdict.error if verdict else None,
            "judge": verdict.relation.value if verdict and verdict.relation else None,
            "reason": verdict.reason if verdict else None,
            "ontology": kg.value if kg else None})
    return rows


def pair_relations(rows: Sequence[Mapping]) -> dict[str, dict[tuple[str, str, str],
                                                              tuple[Relation | None,
                                                                    Relation | None]]]:
    """Relation records by item: item id → :data:`PairRelations`."""
    out: dict[str, dict] = {}
    for r in rows:
        judge = Relation(r["judge"]) if r["judge"] else None
        kg = Relation(r["ontology"]) if r["ontology"] else None
        out.setdefault(r["item_id"], {})[(r["term"], r["label_value"],
                                          r["response_value"])] = (judge, kg)
    return out


def item_langs(items: Sequence[ScoredQA], lang: str) -> list[str]:
    """The language of each item's text metrics: detected (``auto``), the record's own
    ``lang`` field (``item``), or one given for all."""
    if lang == "item":
        return [i.lang for i in items]
    return [lang] * len(items)


def item_records(imaps: Sequence[ItemImaps], encode, *, lang: str = "auto",
                 bertscore: BertScorer | None = None, encoder: str | None = None
                 ) -> list[dict]:
    """One record per item: its human scores, the ids of its three imap extractions, and
    the text metrics on the raw texts and on the imaps (+imap), BERTScore and the MiniLM
    cosine included (model computations: recorded, so no table needs the encoder)."""
    items = [im.item for im in imaps]
    langs = item_langs(items, lang)
    raw = text_metrics([i.reference for i in items], [i.response for i in items], encode,
                       langs=langs, bertscore=bertscore)
    on_imap = text_metrics([imap_text(im.label_pairs) for im in imaps],
                           [imap_text(im.response_pairs) for im in imaps], encode, " +imap",
                           langs=langs, bertscore=bertscore)
    metrics = pd.concat([raw, on_imap], axis=1).to_dict("records")
    return [{"id": i.id, "system": i.system,
             "human": {"acc": i.human.acc, "cmp": i.human.cmp, "spc": i.human.spc},
             "question": question_id(i), "reference": reference_id(i),
             "response": response_id(i), "encoder": encoder, "metrics": m}
            for i, m in zip(items, metrics)]


def score_row(item: Mapping, label_pairs: Sequence[ImapPair], response_pairs: Sequence[ImapPair],
              label: Mapping[str, Sequence[str]], response: Mapping[str, Sequence[str]],
              relations: PairRelations, judge_relations: bool = True,
              lambda_reading: str = "share") -> dict:
    """One row of the scores table from an item record, its imaps and its value pairs'
    relations: human scores, imap sizes, text metrics, imapScore variants."""
    return {"id": item["id"], "system": item["system"],
            **{f"human_{d}": item["human"][d] for d in ("acc", "cmp", "spc")},
            "shared_terms": sum(t in response for t in label),
            "label_pairs": len(label_pairs), "response_pairs": len(response_pairs),
            **item["metrics"],
            **imap_scores(label, response, relations, judge_relations, lambda_reading)}


def score_items(imaps: Sequence[ItemImaps], matcher: OntologyMatcher,
                judged: dict[PairKey, RelationJudgement] | None, encode, *,
                lang: str = "auto", lambda_reading: str = "share",
                bertscore: BertScorer | None = None) -> pd.DataFrame:
    """One row per item (the scores table), through the records the stage writes."""
    rows = item_records(imaps, encode, lang=lang, bertscore=bertscore)
    relations = pair_relations(relation_records(imaps, matcher, judged))
    return pd.DataFrame([score_row(r, im.label_pairs, im.response_pairs, im.label, im.response,
                                   relations.get(im.item.id, {}), judged is not None,
                                   lambda_reading)
                         for r, im in zip(rows, imaps)])


def run_metrics(items: Sequence[ItemImaps], extractions: Sequence[Extraction],
                judged: dict | None, links: dict, scores: pd.DataFrame) -> dict:
    """Counts, parse rates, link coverage and mean scores of a run (scores only)."""
    n = max(1, len(extractions))
    return {
        "items": len(items), "systems": int(scores["system"].nunique()),
        "extraction_calls": len(extractions),
        "extractions_with_pairs": sum(bool(e.parsed.pairs) for e in extractions),
        "extraction_parse_rate": round(sum(bool(e.parsed.pairs) for e in extractions) / n, 4),
        "items_with_shared_terms": int((scores["shared_terms"] > 0).sum()),
        "value_pairs": len(relation_pairs(items)),
        "relation_calls": len(judged) if judged is not None else 0,
        "relation_answers_parsed": sum(j.relation is not None for j in (judged or {}).values()),
        "judge_relations": dict(Counter(j.relation.value if j.relation else "unparsed"
                                        for j in (judged or {}).values())),
        "value_links": count_links(links.values()),
        "mean_scores": {c: round(float(scores[c].mean()), 4)
                        for c in scores.columns if c.startswith("imapScore")}}
