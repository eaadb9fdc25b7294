"""Stage 05's run: extract imaps with the judge, relate values, score, correlate.

1. **Question imap** — one judge call per distinct question (Query + Constraint).
2. **Answer imaps** — one call per distinct reference and per response, conditioned on
   the question and its imap; the answer is started as ``Inform-<first Query term>-`` so
   label and response inform the same term (a nudge small models need).
3. **Relations** — per value pair of a shared term: by the judge (one one-word call per
   pair), by the ontology, and both combined (+KG).
4. **Scores** — imapScore (Eq. 1) per relation path, and the baselines on raw texts and
   on imaps (+imap).

Every completion is kept raw next to its parse (``extractions.jsonl``,
``relations.jsonl``), so parsing can be redone without the model.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from medpref.contracts import ScoredQA, read_jsonl
from medpref.imap.config import ImapParams
from medpref.imap.ontology import (ConceptLinker, Lexicon, OntologyMatcher, count_links,
                                   normalise)
from medpref.imap.relations import (OPTION_PREFIX, RELATION_OPTIONS, combine,
                                    parse_relation, relation_from_options)
from medpref.imap.score import Relation, imap_score
from medpref.imap.structure import (ANSWER_COMPONENTS, QUESTION_COMPONENTS, ImapPair,
                                    ParsedImap, format_imap, imap_text, parse_imap,
                                    query_terms, values_by_term)
from medpref.imap.textmetrics import TEXT_METRICS, text_metrics
from medpref.llm.client import LLMClient
from medpref.llm.types import ChatRequest
from medpref.params import repo_path
from medpref.prompts import load_prompt

QUESTION_PREFIX = "Query-"
IMAP_SCORES = ("imapScore (judge)", "imapScore (ontology)", "imapScore +KG")


def metric_order(judge_relations: bool = True) -> list[str]:
    """Table 2's rows: each baseline then its +imap, then the imapScore variants."""
    rows = [m for base in TEXT_METRICS for m in (base, f"{base} +imap")]
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


def text_key(*texts: str) -> str:
    return hashlib.sha256("\x1f".join(texts).encode()).hexdigest()[:12]


def clip_words(text: str, max_words: int) -> str:
    words = text.split()
    return text.strip() if len(words) <= max_words else " ".join(words[:max_words]) + " ..."


# -- extraction --------------------------------------------------------------------------
@dataclass
class Extraction:
    """One judge call for an imap: the raw completion and its parse."""

    kind: str                 # question | reference | response
    key: str
    item_ids: list[str]
    prefix: str
    raw: str
    finish_reason: str | None
    error: str | None
    parsed: ParsedImap
    prompt_sha: str

    def to_record(self) -> dict:
        return {"kind": self.kind, "key": self.key, "item_ids": self.item_ids,
                "prompt_sha": self.prompt_sha, "prefix": self.prefix, "raw": self.raw,
                "finish_reason": self.finish_reason, "error": self.error,
                **self.parsed.to_record()}


Job = tuple[str, list, str, list[str]]  # (kind, messages, prefix, item ids)


def _extract(client: LLMClient, jobs: dict[str, Job], allowed: Sequence[str],
             max_new_tokens: int, prompt_sha: str) -> dict[str, Extraction]:
    """Answer every job in one batch (prefixes may differ) and parse each completion."""
    keys = list(jobs)
    gen = client.params(max_new_tokens=max_new_tokens)
    comps = client.complete([ChatRequest.of(jobs[k][1], gen, prefix=jobs[k][2]) for k in keys])
    out: dict[str, Extraction] = {}
    for k, comp in zip(keys, comps):
        kind, _, prefix, item_ids = jobs[k]
        parsed = (parse_imap(prefix + comp.text, allowed,
                             truncated=comp.finish_reason == "length")
                  if comp.ok else ParsedImap(notes=[f"model call failed: {comp.error}"]))
        out[k] = Extraction(kind, k, item_ids, prefix, comp.text, comp.finish_reason,
                            comp.error, parsed, prompt_sha)
    return out


def extract_question_imaps(p: ImapParams, client: LLMClient, items: Sequence[ScoredQA]
                           ) -> dict[str, Extraction]:
    """Query + Constraint of every distinct question, keyed by :func:`text_key`."""
    template = load_prompt(p.question_prompt)
    jobs: dict[str, Job] = {}
    for item in items:
        key = text_key(item.question)
        if key not in jobs:
            msgs = template.render(question=clip_words(item.question, p.question_max_words))
            jobs[key] = ("question", msgs, QUESTION_PREFIX, [])
        jobs[key][3].append(item.id)
    return _extract(client, jobs, QUESTION_COMPONENTS, p.max_new_tokens_question, template.sha)


def question_imap(extraction: Extraction | None, fallback_term: str) -> list[ImapPair]:
    """The question's pairs, with a fallback Query when the judge gave none."""
    pairs = list(extraction.parsed.pairs) if extraction else []
    if not query_terms(pairs):
        pairs.insert(0, ImapPair("Query", fallback_term, "?"))
    return pairs


def extract_answer_imaps(p: ImapParams, client: LLMClient, items: Sequence[ScoredQA],
                         questions: dict[str, Extraction]) -> dict[str, Extraction]:
    """Inform pairs of every distinct reference (``ref:<key>``) and response (``res:<id>``)."""
    template = load_prompt(p.answer_prompt)
    jobs: dict[str, Job] = {}
    for item in items:
        q_pairs = question_imap(questions.get(text_key(item.question)), p.fallback_query_term)
        prefix = f"Inform-{query_terms(q_pairs)[0]}-"
        question = clip_words(item.question, p.question_max_words)
        for kind, key, answer in (("reference", "ref:" + text_key(item.question, item.reference),
                                   item.reference),
                                  ("response", "res:" + item.id, item.response)):
            if key not in jobs:
                msgs = template.render(question=question, question_imap=format_imap(q_pairs),
                                       answer=clip_words(answer, p.answer_max_words))
                jobs[key] = (kind, msgs, prefix, [])
            jobs[key][3].append(item.id)
    return _extract(client, jobs, ANSWER_COMPONENTS, p.max_new_tokens_answer, template.sha)


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


def parse_summary(extractions: Iterable[Extraction]) -> pd.DataFrame:
    """Per kind: calls, parsed (≥1 pair), Inform-None, empty, mean pairs, malformed items."""
    rows = [{"kind": e.kind, "parsed": bool(e.parsed.pairs), "none": e.parsed.none,
             "failed": e.error is not None, "pairs": len(e.parsed.pairs),
             "malformed": len(e.parsed.malformed), "cut": e.finish_reason == "length"}
            for e in extractions]
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    return df.groupby("kind", sort=False).agg(
        calls=("kind", "size"), with_pairs=("parsed", "sum"), inform_none=("none", "sum"),
        failed=("failed", "sum"), mean_pairs=("pairs", "mean"),
        malformed_items=("malformed", "sum"), cut_by_limit=("cut", "sum")).round(2).reset_index()


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


def relate_by_judge(p: ImapParams, client: LLMClient, imaps: Sequence[ItemImaps]
                    ) -> dict[PairKey, RelationJudgement] | None:
    """One judgement per value pair, all in one batch; None when ``judge_relations`` is
    off (the ontology path needs no judge). Same-text pairs are exact without a call."""
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
    comps = client.chat_many(msgs, max_new_tokens=p.max_new_tokens_relation)
    out = {}
    for key, comp in zip(jobs, comps):
        rel, reason = parse_relation(comp.text) if comp.ok else (None, f"model call failed: "
                                                                      f"{comp.error}")
        out[key] = RelationJudgement(*key, comp.text, None, comp.error, rel, reason)
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
                judged: dict[PairKey, RelationJudgement] | None) -> dict[str, float]:
    """The item's imapScore for each relation path (judge, ontology, +KG)."""
    paths = {"imapScore (ontology)": "ontology"}
    if judged is not None:
        paths = {"imapScore (judge)": "judge", **paths, "imapScore +KG": "kg"}
    return {name: imap_score(im.label, im.response, _relate_fn(path, matcher, im.item.id, judged)).value
            for name, path in paths.items()}


# -- scores and tables ---------------------------------------------------------------------
def score_items(imaps: Sequence[ItemImaps], matcher: OntologyMatcher,
                judged: dict[PairKey, RelationJudgement] | None, encode) -> pd.DataFrame:
    """One row per item: human scores, baselines raw and +imap, imapScore variants."""
    items = [im.item for im in imaps]
    base = pd.DataFrame({
        "id": [i.id for i in items], "system": [i.system for i in items],
        "human_acc": [i.human.acc for i in items], "human_cmp": [i.human.cmp for i in items],
        "human_spc": [i.human.spc for i in items],
        "shared_terms": [len(im.shared_terms) for im in imaps],
        "label_pairs": [len(im.label_pairs) for im in imaps],
        "response_pairs": [len(im.response_pairs) for im in imaps]})
    raw = text_metrics([i.reference for i in items], [i.response for i in items], encode)
    on_imap = text_metrics([imap_text(im.label_pairs) for im in imaps],
                           [imap_text(im.response_pairs) for im in imaps], encode, " +imap")
    ours = pd.DataFrame([imap_scores(im, matcher, judged) for im in imaps])
    return pd.concat([base, raw, on_imap, ours], axis=1)


@dataclass
class Timer:
    """Wall-clock seconds per named step (reported in metrics.json)."""

    seconds: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def step(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = round(time.perf_counter() - t0, 2)


def output_paths(p: ImapParams) -> dict[str, Path]:
    data, reports = repo_path(p.output_dir), repo_path(p.reports)
    return {"extractions": data / "extractions.jsonl", "relations": data / "relations.jsonl",
            "scores": reports / "scores", "correlations": reports / "correlations",
            "correlations_long": reports / "correlations_long",
            "parse_summary": reports / "parse_summary", "links": reports / "links",
            "heatmap": reports / "correlation_heatmap.png",
            "metrics": reports / "metrics.json", "ledger": reports / "ledger.json",
            "provenance": reports / "provenance.json"}


def run_metrics(items: Sequence[ItemImaps], extractions: Sequence[Extraction],
                judged: dict | None, links: dict, scores: pd.DataFrame, timer: Timer) -> dict:
    """Counts, parse rates, link coverage, mean scores and wall times of a run."""
    n = max(1, len(extractions))
    return {
        "items": len(items), "systems": sorted(scores["system"].unique().tolist()),
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
                        for c in scores.columns if c.startswith("imapScore")},
        "wall_seconds": timer.seconds}


def table_caption(p: ImapParams, n_items: int) -> str:
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
            f"because a metric or score was constant). {human}.")
