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

from dataclasses import dataclass

import pandas as pd

from medpref.contracts import ScoredQA
from medpref.imap.config import ImapParams
from medpref.imap.correlation import metric_order, table_caption
from medpref.imap.extraction import (
    Extraction,
    extract_answer_imaps,
    extract_question_imaps,
    parse_summary,
    resolve_mode,
)
from medpref.imap.items import (
    ItemImaps,
    assemble_imaps,
    human_summary,
    imap_example,
    load_scored_qa,
)
from medpref.imap.relations import (
    relate_by_judge,
)
from medpref.imap.scoring import build_matcher, link_values, run_metrics, score_items
from medpref.imap.textmetrics import (
    load_bertscore,
    load_encoder,
)
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
