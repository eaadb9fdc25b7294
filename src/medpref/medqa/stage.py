"""Stage 08 (MedicineQA): Distill → Retrieve → Read, then battles and ratings.

:func:`run` calls these steps in order and returns what the notebook shows:

1. :func:`load_inputs` — the medicine tree and the questions (gold checked against it);
2. :func:`embed_database` — item vectors (cached on disk) and the query encoder;
3. :func:`run_distill` — every distilling role writes a ``search_engine`` call per question;
4. :func:`retrieve_all` — rankings for each query source (History, Last question and each
   role's distilled queries) → :func:`retrieval_table` (Table 3 layout);
5. :func:`run_read` — each model configuration answers the read subset;
6. :func:`run_battles` — pairwise verdicts by the judge → :func:`ratings_for` (Elo, BT);
7. :func:`models_table` (Table 2 layout), figures, metrics.

The steps' code lives in the domain modules (``distill``, ``sources``, ``retrieval``,
``read``, ``judging``, ``ratings``, ``tables``); this module opens the inputs, runs the
steps under the stage's timer, applies the guard and writes the outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from medpref.contracts import Medicine, MedicineQAItem, read_jsonl
from medpref.identity import content_id
from medpref.medqa.config import MedQAParams
from medpref.medqa.database import (
    Encoder,
    MedicineTree,
    build_tree,
    embed_items,
    load_encoder,
)
from medpref.medqa.distill import DistilledQuery, run_distill
from medpref.medqa.judging import BattleRun, run_battles
from medpref.medqa.ratings import ratings_for, stored_judgements
from medpref.medqa.read import Answer, read_subset, run_read
from medpref.medqa.retrieval import (
    RetrievalResult,
    check_gold,
    name_vectors,
    retrieval_records,
    retrieve_all,
)
from medpref.medqa.sources import HISTORY, LAST_QUESTION, distilled_source, query_sources
from medpref.medqa.tables import (
    distill_summary,
    malformed_reasons,
    models_table,
    retrieval_table,
    stage_metrics,
)
from medpref.params import repo_path
from medpref.prompts import load_prompt

# -- inputs and embeddings --------------------------------------------------------------

def load_inputs(p: MedQAParams) -> tuple[MedicineTree, list[MedicineQAItem]]:
    """The medicine tree and the questions; every gold key must exist in the tree."""
    tree = build_tree(read_jsonl(repo_path(p.medicines), Medicine), p.item_text)
    items = read_jsonl(repo_path(p.questions), MedicineQAItem)
    check_gold(items, [it.key for it in tree.items], p.questions)
    if p.n_distill_items is not None:
        items = items[:p.n_distill_items]
    return tree, items


def embed_database(p: MedQAParams, tree: MedicineTree) -> tuple[Encoder, np.ndarray, bool]:
    """The query encoder and the item vectors (from the cache when it matches)."""
    encode = load_encoder(repo_path(p.embedding_model), p.embedding_batch_size)
    model_id = f"{Path(p.embedding_model).name}:{content_id(repo_path(p.embedding_model))}"
    vecs, hit = embed_items(tree, encode, repo_path(p.embeddings_cache), model_id)
    return encode, vecs, hit


# -- the stage ------------------------------------------------------------------------------

@dataclass
class MedQAOutputs:
    """What stage 08 shows and writes."""

    tree: MedicineTree
    items: list[MedicineQAItem]
    embeddings_cached: bool
    distilled: dict[str, list[DistilledQuery]]
    distill_summary: pd.DataFrame
    malformed_reasons: pd.DataFrame
    results: dict[str, list[RetrievalResult]]
    table3: pd.DataFrame
    hr_figure: object
    subset: list[MedicineQAItem]
    answers: list[Answer]
    battles: BattleRun
    ratings: pd.DataFrame
    elo_figure: object
    table2: pd.DataFrame
    metrics: dict
    models: dict[str, str]
    prompts: dict[str, str]

    def example_answers(self) -> str:
        """The first read question and every configuration's answer, as text."""
        one = self.subset[0]
        lines = [f"Q ({one.id}, gold {one.gold_medicine}/{', '.join(one.gold_attributes)}): "
                 f"{one.question}\n"]
        lines += [f"[{a.config}] evidence {a.evidence_keys}\n  {a.text}\n"
                  for a in self.answers if a.item_id == one.id]
        return "\n".join(lines)


def _retrieve(stage, p: MedQAParams, tree, items, distilled, clients):
    from medpref.medqa import plots

    with stage.step("embed_database"):
        encode, item_vecs, cached = embed_database(p, tree)
    with stage.step("retrieve"):
        sources = query_sources(p, items, distilled)
        results = retrieve_all(sources, items, encode, item_vecs, tree,
                               keep=max(p.read_top_k, 10),
                               name_vecs=name_vectors(p, tree, encode))
    model_ids = {r: c.model_id for r, c in clients.items()}
    table3 = retrieval_table(results, items, tree, p.hr_ks, model_ids, distilled)
    labels = {HISTORY: "History", LAST_QUESTION: "Last question",
              **{distilled_source(r): f"Distilled ({r})" for r in distilled}}
    fig = plots.hr_curves(results, labels, len(tree.medicines), len(tree.items), p.hr_ks)
    return cached, results, table3, fig


def _rate(stage, p: MedQAParams, battles: BattleRun) -> pd.DataFrame:
    with stage.step("ratings"):
        ratings = ratings_for(battles.judged.judgements, p, stage.seed, "stage")
        stored = stored_judgements(p)
        if stored:
            ratings = pd.concat([ratings, ratings_for(stored, p, stage.seed, "stored")],
                                ignore_index=True)
    return ratings


def run(stage) -> MedQAOutputs:
    """Stage 08 end to end; writes the records, tables and figures (not the metrics)."""
    from medpref.medqa import plots

    p: MedQAParams = stage.p
    with stage.step("load"):
        tree, items = load_inputs(p)
    roles = list(dict.fromkeys([m.role for m in p.models] + [p.judge_call.role]))
    clients = {r: stage.role(r) for r in roles}
    with stage.step("distill"):
        distilled = run_distill(p, clients, items)
    cached, results, table3, hr_fig = _retrieve(stage, p, tree, items, distilled, clients)
    subset = read_subset(items, p.n_read_items, stage.seed)
    with stage.step("read"):
        answers = run_read(p, clients, tree, subset, results)
    with stage.step("judge"):
        battles = run_battles(p, clients[p.judge_call.role], subset, answers)
    stage.check_yield(sum(a.error is None for a in answers), len(answers), what="answers")
    ratings = _rate(stage, p, battles)
    model_ids = {r: c.model_id for r, c in clients.items()}
    table2 = models_table(p, distilled, results, ratings[ratings["verdicts"] == "stage"],
                          model_ids)
    prompt_names = [p.distill_prompt, p.distill_tools_prompt, p.read_prompt,
                    p.closed_book_prompt, p.judge_prompt]
    out = MedQAOutputs(
        tree, items, cached, distilled, distill_summary(distilled), malformed_reasons(distilled),
        results, table3, hr_fig, subset, answers, battles, ratings,
        plots.rating_intervals(ratings), table2,
        stage_metrics(tree, items, subset, distilled, battles, p.elo_game),
        {**model_ids, "embeddings": p.embedding_model},
        {n: load_prompt(n).sha for n in prompt_names})
    write_outputs(stage, out)
    return out


def write_outputs(stage, out: MedQAOutputs) -> None:
    from medpref.contracts import write_jsonl
    from medpref.reports import save_figure, write_table

    calls = [q for qs in out.distilled.values() for q in qs]
    write_jsonl(stage.data("distilled.jsonl"), [q.to_record() for q in calls])
    write_jsonl(stage.report("malformed_calls.jsonl"),
                [q.to_record() for q in calls if not q.well_formed])
    write_table(out.malformed_reasons, stage.report("malformed_reasons"))
    write_jsonl(stage.data("retrievals.jsonl"), retrieval_records(out.results, out.tree))
    write_table(out.table3, stage.report("table3_retrieval"))
    save_figure(out.hr_figure, stage.report("hr_at_k.png"))
    write_jsonl(stage.data("answers.jsonl"), [a.to_record() for a in out.answers])
    write_jsonl(stage.data("verdicts.jsonl"), out.battles.judged.judgements)
    write_jsonl(stage.report("unparsable_verdicts.jsonl"),
                out.battles.judged.unparsable + out.battles.skipped)
    write_table(out.ratings, stage.report("ratings"), floatfmt=".1f")
    save_figure(out.elo_figure, stage.report("elo.png"))
    write_table(out.table2, stage.report("table2_models"))
