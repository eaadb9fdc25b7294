"""Stage 08 (MedicineQA): Distill → Retrieve → Read, then battles and ratings.

:func:`run` calls these steps in order and returns what the notebook shows:

1. :func:`load_inputs` — the medicine tree and the questions (gold checked against it);
2. :func:`embed_database` — item vectors (cached on disk) and the query encoder;
3. :func:`run_distill` — every distilling role writes a ``search_engine`` call per question;
4. :func:`retrieve_all` — rankings for each query source (History, Last question and each
   role's distilled queries) → Table 3 (:func:`medpref.medqa.tables.retrieval_table`);
5. :func:`run_read` — each model configuration answers the read subset;
6. :func:`run_battles` — pairwise verdicts by the judge;
7. the records of every call, and from them alone the tables and figures
   (:mod:`medpref.medqa.outputs`: Elo and Bradley–Terry, Table 2 layout), then metrics.

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
from medpref.embedding import load_encoder
from medpref.identity import content_id
from medpref.medqa.config import MedQAParams
from medpref.medqa.database import (
    Encoder,
    MedicineTree,
    build_tree,
    embed_items,
)
from medpref.medqa.distill import DistilledQuery, run_distill
from medpref.medqa.judging import BattleRun, run_battles
from medpref.medqa.outputs import OUTPUTS, retrieval_rows
from medpref.medqa.read import Answer, read_subset, run_read
from medpref.medqa.retrieval import (
    RetrievalResult,
    check_gold,
    name_vectors,
    retrieve_all,
)
from medpref.medqa.sources import query_sources
from medpref.medqa.tables import distill_summary, stage_metrics
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


def _retrieve(stage, p: MedQAParams, tree, items, distilled):
    with stage.step("embed_database"):
        encode, item_vecs, cached = embed_database(p, tree)
    with stage.step("retrieve"):
        sources = query_sources(p, items, distilled)
        results = retrieve_all(sources, items, encode, item_vecs, tree,
                               keep=max(p.read_top_k, 10),
                               name_vecs=name_vectors(p, tree, encode))
    return cached, results


def run(stage) -> MedQAOutputs:
    """Stage 08 end to end: the model calls, then its records and the tables and figures
    built from them (:data:`medpref.medqa.outputs.OUTPUTS`); not the metrics."""
    p: MedQAParams = stage.p
    with stage.step("load"):
        tree, items = load_inputs(p)
    roles = list(dict.fromkeys([m.role for m in p.models] + [p.judge_call.role]))
    clients = {r: stage.role(r) for r in roles}
    with stage.step("distill"):
        distilled = run_distill(p, clients, items)
    cached, results = _retrieve(stage, p, tree, items, distilled)
    subset = read_subset(items, p.n_read_items, stage.seed)
    with stage.step("read"):
        answers = run_read(p, clients, tree, subset, results)
    with stage.step("judge"):
        battles = run_battles(p, clients[p.judge_call.role], subset, answers)
    stage.check_yield(sum(a.error is None for a in answers), len(answers), what="answers")
    with stage.step("tables"):
        built = OUTPUTS.write(stage.reports_dir, {
            "distilled": [q.to_record() for qs in distilled.values() for q in qs],
            "retrievals": retrieval_rows(results, tree, items),
            "answers": [a.to_record() for a in answers],
            "verdicts": [j.model_dump(mode="json", exclude_none=True)
                         for j in battles.judged.judgements],
            "unparsable_verdicts": battles.judged.unparsable + battles.skipped,
        }, stage.params)
    model_ids = {r: c.model_id for r, c in clients.items()}
    prompt_names = [p.call(name).prompt for name in p.CALLS]
    out = MedQAOutputs(
        tree, items, cached, distilled, distill_summary(distilled), built["malformed_reasons"],
        results, built["table3_retrieval"], built["hr_at_k"], subset, answers, battles,
        built["ratings"], built["elo"], built["table2_models"],
        stage_metrics(tree, items, subset, distilled, battles, p.elo_game),
        {**model_ids, "embeddings": p.embedding_model},
        {n: load_prompt(n).sha for n in prompt_names})
    stage.note_provenance(models=out.models, prompts=out.prompts)
    return out
