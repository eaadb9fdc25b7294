"""Stage 07 (imapScore): extract imaps with the judge, relate values, score, correlate.

1. **Question imaps** — one judge request per distinct question (Query + Constraint).
2. **Answer imaps** — one per distinct reference and per response, conditioned on the
   question and its imap (:mod:`medpref.imap.extraction`: greedy, or the paper's three
   samples at T = 0.9 keeping the pairs that repeat).
3. **Relations** — per value pair of a shared term: by the judge (one one-word call per
   pair), by the ontology, and both combined (+KG).
4. **Scores** — imapScore (Eq. 1) per relation path, and the baselines on raw texts and
   on imaps (+imap); Spearman/Kendall with the human scores in Table 2's layout.

:func:`run` does it all for a notebook; every completion is kept raw next to its parse
(``extractions.jsonl``, ``relations.jsonl``), so parsing can be redone without the model.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from medpref.contracts import ScoredQA, read_jsonl
from medpref.imap.config import ImapParams
from medpref.imap.extraction import (
    Extraction,
    extract_answer_imaps,
    extract_question_imaps,
    parse_summary,
    question_imap,
    resolve_mode,
    text_key,
)
from medpref.imap.ontology import ConceptLinker, Lexicon, OntologyMatcher, count_links, normalise
from medpref.imap.relations import (
    OPTION_PREFIX,
    RELATION_OPTIONS,
    combine,
    parse_relation,
    relation_from_options,
)
from medpref.imap.score import Relation, imap_score
from medpref.imap.structure import ImapPair, imap_text, values_by_term
from medpref.imap.textmetrics import (
    BERTSCORE,
    TEXT_METRICS,
    BertScorer,
    load_bertscore,
    load_encoder,
    text_metrics,
)
from medpref.llm.client import LLMClient
from medpref.params import repo_path
from medpref.prompts import load_prompt

IMAP_SCORES = ("imapScore (judge)", "imapScore (ontology)", "imapScore +KG")


def metric_order(judge_relations: bool = True, bertscore: bool = True) -> list[str]:
    """Table 2's rows: each baseline then its +imap, then the imapScore variants."""
    bases = [b for b in TEXT_METRICS if bertscore or b != BERTSCORE]
    rows = [m for base in bases for m in (base, f"{base} +imap")]
    return rows + ([*IMAP_SCORES] if judge_relations else ["imapScore (ontology)"])


# -- data --------------------------------------------------------------------------------
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
        label = answers["ref:" + text_key(item.question, item.reference)].parsed.pairs
        response = answers["res:" + item.id].parsed.pairs
        out.append(ItemImaps(item, question_imap(questions.get(text_key(item.question)),
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


# -- relations ---------------------------------------------------------------------------
PairKey = tuple[str, str, str, str]   # (item id, term, label value, response value)


@dataclass
class RelationJudgement:
    """The judge's answer for one label-response value pair: raw (text or option
    probabilities) and parsed."""

    item_id: str
    term: str
    label_value: str
    response_value: str
    raw: str | None
    probs: dict[str, float] | None
    error: str | None
    relation: Relation | None
    reason: str | None

    def to_record(self) -> dict:
        return {"item_id": self.item_id, "term": self.term, "label_value": self.label_value,
                "response_value": self.response_value, "raw": self.raw, "probs": self.probs,
                "error": self.error, "relation": self.relation.value if self.relation else None,
                "reason": self.reason}


def relation_pairs(imaps: Sequence[ItemImaps]) -> list[PairKey]:
    """Every (item, shared term, label value, response value) to relate."""
    return [(im.item.id, t, lv, rv) for im in imaps for t in im.shared_terms
            for lv in im.label[t] for rv in im.response[t]]


def relate_by_judge(p: ImapParams, client: LLMClient, imaps: Sequence[ItemImaps],
                    seed: int = 0) -> dict[PairKey, RelationJudgement] | None:
    """One judgement per value pair, all in one batch; None when ``judge_relations`` is
    off (the ontology path needs no judge). Same-text pairs are exact without a call.
    In the sampled extraction mode a generated relation is asked ``samples`` times and
    kept when it repeats ``min_agree`` times (the paper's rule for relations too)."""
    if not p.judge_relations:
        return None
    template = load_prompt(p.relation_prompt)
    jobs = [k for k in relation_pairs(imaps) if not _same_text(k[2], k[3])]
    msgs = [template.render(term=t, label_value=lv, response_value=rv) for _, t, lv, rv in jobs]
    if p.relation_mode == "options":
        scored = client.option_scores(msgs, list(RELATION_OPTIONS), OPTION_PREFIX) if msgs else []
        return {k: RelationJudgement(*k, None, {o: round(v, 6) for o, v in s.probs.items()},
                                     None, relation_from_options(s.probs), None) if s.ok else
                RelationJudgement(*k, None, None, s.error, None, f"model call failed: {s.error}")
                for k, s in zip(jobs, scored)}
    if resolve_mode(p.extraction.mode, client) == "sampled":
        return _sampled_relations(p, client, jobs, msgs, seed)
    comps = client.chat_many(msgs, max_new_tokens=p.max_new_tokens_relation, temperature=0.0)
    out = {}
    for key, comp in zip(jobs, comps):
        rel, reason = _parse_comp(comp)
        out[key] = RelationJudgement(*key, comp.text, None, comp.error, rel, reason)
    return out


def _parse_comp(comp) -> tuple[Relation | None, str | None]:
    return parse_relation(comp.text) if comp.ok else (None, f"model call failed: {comp.error}")


def _sampled_relations(p: ImapParams, client: LLMClient, jobs: list[PairKey], msgs: list,
                       seed: int) -> dict[PairKey, RelationJudgement]:
    ep = p.extraction
    samples = [client.chat_many(msgs, max_new_tokens=p.max_new_tokens_relation,
                                temperature=ep.temperature, top_p=ep.top_p, seed=seed + k)
               for k in range(ep.samples)]
    out = {}
    for j, key in enumerate(jobs):
        comps = [s[j] for s in samples]
        parsed = [_parse_comp(c)[0] for c in comps]
        votes = Counter(r for r in parsed if r is not None).most_common(1)
        rel = votes[0][0] if votes and votes[0][1] >= ep.min_agree else None
        reason = None if rel else f"no relation in >= {ep.min_agree} of {ep.samples} samples"
        out[key] = RelationJudgement(*key, "\n---\n".join(c.text for c in comps), None,
                                     next((c.error for c in comps if not c.ok), None),
                                     rel, reason)
    return out


def _same_text(a: str, b: str) -> bool:
    return bool(normalise(a)) and normalise(a) == normalise(b)


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
        if _same_text(lv, rv):
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


# -- scores and tables ---------------------------------------------------------------------
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


def table_caption(p: ImapParams, n_items: int, extraction_mode: str) -> str:
    """What the correlation table shows, including what "human" means for the source."""
    if p.source == "embedded":
        human = ("human scores: the embedded synthetic triples' ACC/CMP/SPC ratings (0-5)")
    else:
        human = ("human scores: the MTS-Dialog correlation study rated facts, not "
                 "ACC/CMP/SPC; here ACC = FactualPrecision, CMP = FactualRecall, SPC = "
                 "1 - Edit Distance (Correction) (all 0-1), so 'SPC' is not a specificity "
                 "rating, and the texts are dialogue summaries, not answers to questions")
    return (f"Spearman ρ and Kendall τ (×100) of each metric with human scores, within each "
            f"system's responses ({n_items} items, source: {p.source}); AVE is the mean over "
            f"systems and dimensions of the defined cells (n_undefined: cells left out "
            f"because a metric or score was constant). {human}. Rows: the paper's Table 2 "
            f"has 14 metrics; here ROUGE-1/2/L and BLEU-4 (language-aware tokens: one per "
            f"Han character; BLEU with sacrebleu 13a/zh), BERTScore-F1 on the embedded "
            f"MiniLM (the paper's BERTScore uses larger encoders), the MiniLM sentence "
            f"cosine (not a paper metric), and imapScore (λ read as a "
            f"{p.lambda_reading} of containment pairs; imaps extracted {extraction_mode}"
            f"{' x' + str(p.extraction.samples) if extraction_mode == 'sampled' else ''}).")


# -- the stage -------------------------------------------------------------------------
@dataclass
class ImapOutputs:
    """What stage 07 shows and writes: tables, the figure, raw completions, metrics."""

    items: list[ScoredQA]
    human: pd.DataFrame
    extraction_mode: str
    imaps: list[ItemImaps]
    extractions: list[Extraction]
    parse: pd.DataFrame
    links: pd.DataFrame
    judged: dict | None
    scores: pd.DataFrame
    correlations_long: pd.DataFrame
    table2: pd.DataFrame
    caption: str
    heatmap: object
    metrics: dict
    models: dict[str, str]
    prompts: dict[str, str]

    @property
    def example(self) -> pd.DataFrame:
        return imap_example(self.imaps[0])


def _extract_all(stage, p: ImapParams, judge: LLMClient, items: list[ScoredQA]):
    with stage.step("question_imaps"):
        questions = extract_question_imaps(p, judge, items, stage.seed)
    with stage.step("answer_imaps"):
        answers = extract_answer_imaps(p, judge, items, questions, stage.seed)
    return questions, answers


def _relate_and_score(stage, p: ImapParams, judge: LLMClient, imaps: list[ItemImaps]):
    from medpref.imap.ontology import link_table

    with stage.step("ontology_links"):
        encode = load_encoder(repo_path(p.embedding_model))
        matcher = build_matcher(p, encode)
        links = link_values(matcher, imaps)
    with stage.step("judge_relations"):
        judged = relate_by_judge(p, judge, imaps, stage.seed)
    with stage.step("scores"):
        bert = (load_bertscore(repo_path(p.embedding_model), p.bertscore_layer)
                if p.bertscore_layer is not None else None)
        scores = score_items(imaps, matcher, judged, encode, lang=p.metrics_lang,
                             lambda_reading=p.lambda_reading, bertscore=bert)
    link_rows = pd.DataFrame(link_table(links, matcher.linker.lexicon))
    return links, link_rows, judged, scores


def run(stage) -> ImapOutputs:
    """Stage 07 end to end: imaps, relations, scores, correlations; writes the outputs."""
    from medpref.imap.correlation import correlations, plot_heatmap, table2

    p: ImapParams = stage.p
    items = load_scored_qa(p)
    judge = stage.role(p.role)
    questions, answers = _extract_all(stage, p, judge, items)
    imaps = assemble_imaps(p, items, questions, answers)
    extractions = [*questions.values(), *answers.values()]
    links, link_rows, judged, scores = _relate_and_score(stage, p, judge, imaps)
    # an explicit "Inform-None" is an answer too; an unreadable completion is not
    stage.check_yield(sum(bool(e.parsed.pairs) or e.parsed.none for e in extractions),
                      len(extractions), what="readable imaps")
    order = metric_order(p.judge_relations, p.bertscore_layer is not None)
    long = correlations(scores, order)
    wide = table2(long, order)
    mode = resolve_mode(p.extraction.mode, judge)
    caption = table_caption(p, len(items), mode)
    metrics = run_metrics(imaps, extractions, judged, links, scores)
    metrics["table2_ave_rho"] = {r["Metric"]: (None if pd.isna(r["AVE ρ"]) else r["AVE ρ"])
                                 for r in wide.to_dict("records")}
    out = ImapOutputs(
        items, human_summary(items), mode, imaps,
        extractions, parse_summary(extractions), link_rows, judged, scores, long, wide,
        caption, plot_heatmap(long, order, f"Spearman ρ with human scores ({p.source})"),
        metrics, {p.role: judge.model_id, "embedding": p.embedding_model},
        {n: load_prompt(n).sha for n in (p.question_prompt, p.answer_prompt,
                                         p.relation_prompt)})
    write_outputs(stage, out)
    return out


def write_outputs(stage, out: ImapOutputs) -> None:
    from medpref.contracts import write_jsonl
    from medpref.reports import save_figure, write_table

    write_jsonl(stage.data("extractions.jsonl"), [e.to_record() for e in out.extractions])
    write_jsonl(stage.data("relations.jsonl"),
                [j.to_record() for j in (out.judged or {}).values()])
    write_table(out.parse, stage.report("parse_summary"))
    write_table(out.links, stage.report("links"))
    write_table(out.scores, stage.report("scores"))
    write_table(out.correlations_long, stage.report("correlations_long"))
    write_table(out.table2, stage.report("correlations"), floatfmt=".0f")
    save_figure(out.heatmap, stage.report("correlation_heatmap.png"))
