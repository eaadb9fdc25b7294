"""Per-item scores of stage 07: value links to the ontology, imapScore on each relation
path (judge, ontology, +KG), the text baselines raw and on imaps, and the run's counts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pandas as pd

from medpref.contracts import ScoredQA
from medpref.imap.config import ImapParams
from medpref.imap.extraction import Extraction
from medpref.imap.items import ItemImaps
from medpref.imap.ontology import ConceptLinker, Lexicon, OntologyMatcher, count_links
from medpref.imap.relations import PairKey, RelationJudgement, combine, relation_pairs, same_text
from medpref.imap.score import Relation, imap_score
from medpref.imap.structure import imap_text
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


def _relate_fn(path: str, matcher: OntologyMatcher, item_id: str,
               judged: dict[PairKey, RelationJudgement] | None):
    """(term, label value, response value) → relation, for one item and one path."""
    def relate(term: str, lv: str, rv: str) -> Relation:
        if same_text(lv, rv):
            return Relation.EXACT       # the same text needs nobody's judgement
        verdict = (judged or {}).get((item_id, term, lv, rv))
        judge = verdict.relation if verdict else None
        if path == "judge":
            return judge or Relation.UNMATCHED
        kg = matcher.relate(term, lv, rv)
        return (kg or Relation.UNMATCHED) if path == "ontology" else combine(kg, judge)
    return relate


def imap_scores(im: ItemImaps, matcher: OntologyMatcher,
                judged: dict[PairKey, RelationJudgement] | None,
                lambda_reading: str = "share") -> dict[str, float]:
    """The item's imapScore for each relation path (judge, ontology, +KG)."""
    paths = {"imapScore (ontology)": "ontology"}
    if judged is not None:
        paths = {"imapScore (judge)": "judge", **paths, "imapScore +KG": "kg"}
    return {name: imap_score(im.label, im.response,
                             _relate_fn(path, matcher, im.item.id, judged),
                             lambda_reading).value
            for name, path in paths.items()}


def item_langs(items: Sequence[ScoredQA], lang: str) -> list[str]:
    """The language of each item's text metrics: detected (``auto``), the record's own
    ``lang`` field (``item``), or one given for all."""
    if lang == "item":
        return [i.lang for i in items]
    return [lang] * len(items)


def score_items(imaps: Sequence[ItemImaps], matcher: OntologyMatcher,
                judged: dict[PairKey, RelationJudgement] | None, encode, *,
                lang: str = "auto", lambda_reading: str = "share",
                bertscore: BertScorer | None = None) -> pd.DataFrame:
    """One row per item: human scores, baselines raw and +imap, imapScore variants."""
    items = [im.item for im in imaps]
    base = pd.DataFrame({
        "id": [i.id for i in items], "system": [i.system for i in items],
        "human_acc": [i.human.acc for i in items], "human_cmp": [i.human.cmp for i in items],
        "human_spc": [i.human.spc for i in items],
        "shared_terms": [len(im.shared_terms) for im in imaps],
        "label_pairs": [len(im.label_pairs) for im in imaps],
        "response_pairs": [len(im.response_pairs) for im in imaps]})
    langs = item_langs(items, lang)
    raw = text_metrics([i.reference for i in items], [i.response for i in items], encode,
                       langs=langs, bertscore=bertscore)
    on_imap = text_metrics([imap_text(im.label_pairs) for im in imaps],
                           [imap_text(im.response_pairs) for im in imaps], encode, " +imap",
                           langs=langs, bertscore=bertscore)
    ours = pd.DataFrame([imap_scores(im, matcher, judged, lambda_reading) for im in imaps])
    return pd.concat([base, raw, on_imap, ours], axis=1)


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
