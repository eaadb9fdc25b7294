"""Stage 07 (imapScore): extract imaps with the judge, relate values, score, correlate.

1. **Question imaps** — one judge request per distinct question (Query + Constraint).
2. **Answer imaps** — one per distinct reference and per response, conditioned on the
   question and its imap (:mod:`medpref.imap.extraction`: greedy, or the paper's three
   samples at T = 0.9 keeping the pairs that repeat).
3. **Relations** — per value pair of a shared term: by the judge (one one-word call per
   pair), by the ontology, and both combined (+KG).
4. **Scores** — the baselines on raw texts and on imaps (+imap), imapScore (Eq. 1) per
   relation path; Spearman/Kendall with the human scores in Table 2's layout.

:func:`run` does it all for a notebook. Every model computation is a per-item record under
``reports/07_imapscore/records/`` (raw completions next to their parse, value relations
and links, the text metrics), and the tables and the figure are built from those records
alone (:mod:`medpref.imap.outputs`), so parsing, scoring and correlating can be redone
without the model (``medpref tables 07_imapscore``).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from medpref.contracts import ScoredQA
from medpref.embedding import load_encoder
from medpref.imap.config import ImapParams
from medpref.imap.correlation import table_caption
from medpref.imap.extraction import (
    Extraction,
    extract_answer_imaps,
    extract_question_imaps,
    resolve_mode,
)
from medpref.imap.items import (
    ItemImaps,
    assemble_imaps,
    human_summary,
    imap_example,
    load_scored_qa,
)
from medpref.imap.ontology import link_records
from medpref.imap.outputs import OUTPUTS, extraction_records
from medpref.imap.relations import relate_by_judge
from medpref.imap.scoring import (
    build_matcher,
    item_records,
    link_values,
    relation_records,
    run_metrics,
)
from medpref.imap.textmetrics import load_bertscore
from medpref.llm.client import LLMClient
from medpref.params import repo_path
from medpref.prompts import load_prompt


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


def _relate(stage, p: ImapParams, judge: LLMClient, imaps: list[ItemImaps]):
    with stage.step("ontology_links"):
        encode = load_encoder(repo_path(p.embedding_model))
        matcher = build_matcher(p, encode)
        links = link_values(matcher, imaps)
    with stage.step("judge_relations"):
        judged = relate_by_judge(p, judge, imaps, stage.seed)
    return encode, matcher, links, judged


def run(stage) -> ImapOutputs:
    """Stage 07 end to end: the model calls and computations (imaps, relations, value
    links, text metrics), then its records and the tables and figure built from them
    (:data:`medpref.imap.outputs.OUTPUTS`); not the metrics."""
    p: ImapParams = stage.p
    items = load_scored_qa(p)
    judge = stage.role(p.judge_role)
    questions, answers = _extract_all(stage, p, judge, items)
    imaps = assemble_imaps(p, items, questions, answers)
    extractions = [*questions.values(), *answers.values()]
    encode, matcher, links, judged = _relate(stage, p, judge, imaps)
    # an explicit "Inform-None" is an answer too; an unreadable completion is not
    stage.check_yield(sum(bool(e.parsed.pairs) or e.parsed.none for e in extractions),
                      len(extractions), what="readable imaps")
    with stage.step("text_metrics"):
        bert = (load_bertscore(repo_path(p.embedding_model), p.bertscore_layer)
                if p.bertscore_layer is not None else None)
        item_rows = item_records(imaps, encode, lang=p.metrics_lang, bertscore=bert,
                                 encoder=p.embedding_model)
    with stage.step("tables"):
        built = OUTPUTS.write(stage.reports_dir, {
            "extractions": extraction_records(extractions, judge.model_id),
            "relations": relation_records(imaps, matcher, judged, judge.model_id),
            "value_links": link_records(links, matcher.linker.lexicon),
            "items": item_rows,
        }, stage.params)
    mode = resolve_mode(p.extraction.mode, judge)
    wide = built["correlations"]
    metrics = run_metrics(imaps, extractions, judged, links, built["scores"])
    metrics["table2_ave_rho"] = {r["Metric"]: (None if pd.isna(r["AVE ρ"]) else r["AVE ρ"])
                                 for r in wide.to_dict("records")}
    out = ImapOutputs(
        items, human_summary(items), mode, imaps, extractions, built["parse_summary"],
        built["links"], judged, built["scores"], built["correlations_long"], wide,
        table_caption(p, len(items), mode), built["correlation_heatmap"], metrics,
        {p.judge_role: judge.model_id, "embedding": p.embedding_model},
        {c.prompt: load_prompt(c.prompt).sha for c in map(p.call, p.CALLS)})
    stage.note_provenance(models=out.models, prompts=out.prompts)
    return out
