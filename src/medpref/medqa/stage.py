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
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from medpref.contracts import Medicine, MedicineQAItem, PairwiseJudgement, read_jsonl
from medpref.llm import pairwise
from medpref.llm.client import LLMClient
from medpref.medqa.config import MedQAParams, ModelConfig
from medpref.medqa.database import (
    Encoder,
    MedicineTree,
    build_tree,
    embed_items,
    load_encoder,
    model_fingerprint,
)
from medpref.medqa.distill import DistilledQuery, distill, follow_rate, resolve_tool_mode
from medpref.medqa.judging import (
    BattleSlot,
    JudgedBattles,
    battle_plan,
    judge_battles,
    position_bias,
)
from medpref.medqa.ratings import EloScale, battles_from_judgements, rating_table
from medpref.medqa.read import Answer, read_answers
from medpref.medqa.retrieval import (
    RetrievalResult,
    chance_hit_rate,
    check_gold,
    evaluate_ranking,
    history_query,
    hit_rates,
    last_question_query,
    rank_items,
)
from medpref.params import repo_path
from medpref.prompts import load_prompt

HISTORY, LAST_QUESTION = "history", "last_question"


# -- 1-2: inputs and embeddings --------------------------------------------------------------

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
    model_id = f"{Path(p.embedding_model).name}:{model_fingerprint(repo_path(p.embedding_model))}"
    vecs, hit = embed_items(tree, encode, repo_path(p.embeddings_cache), model_id)
    return encode, vecs, hit


def name_vectors(p: MedQAParams, tree: MedicineTree, encode: Encoder) -> np.ndarray | None:
    """The generic names' vectors (document keys) when documents are ranked by name."""
    return encode(tree.names) if p.doc_level == "generic_name" else None


def read_subset(items: Sequence[MedicineQAItem], n: int, seed: int) -> list[MedicineQAItem]:
    """A seeded sample of ``n`` questions (in file order) for the Read step and battles."""
    picked = sorted(random.Random(seed).sample(range(len(items)), min(n, len(items))))
    return [items[i] for i in picked]


# -- 3: distill ----------------------------------------------------------------------------

def distilling_roles(p: MedQAParams) -> list[str]:
    return list(dict.fromkeys(m.role for m in p.models if m.retrieval == "distilled"))


def run_distill(p: MedQAParams, clients: Mapping[str, LLMClient],
                items: Sequence[MedicineQAItem]) -> dict[str, list[DistilledQuery]]:
    """Each distilling role's parsed calls, one batch per role."""
    out = {}
    for role in distilling_roles(p):
        client = clients[role]
        mode = resolve_tool_mode(p.tool_mode, client)
        template = load_prompt(p.distill_tools_prompt if mode == "native" else p.distill_prompt)
        out[role] = distill(items, client, template, mode, prefix=p.distill_prefix,
                            fallback=p.distill_fallback, max_turns=p.history_max_turns,
                            max_new_tokens=p.distill_max_new_tokens)
    return out


def distill_summary(distilled: Mapping[str, Sequence[DistilledQuery]]) -> pd.DataFrame:
    rows = []
    for role, qs in distilled.items():
        rows.append({"role": role, "model_id": qs[0].model_id if qs else "",
                     "tool_mode": qs[0].tool_mode if qs else "", "calls": len(qs),
                     "well_formed": sum(q.well_formed for q in qs),
                     "ins_follow_rate": follow_rate(qs),
                     "copied_example": sum(q.copied_example for q in qs),
                     "fallbacks": sum(q.fallback is not None for q in qs)})
    return pd.DataFrame(rows)


def malformed_reasons(distilled: Mapping[str, Sequence[DistilledQuery]]) -> pd.DataFrame:
    rows = [{"role": role, "reason": q.reason} for role, qs in distilled.items()
            for q in qs if not q.well_formed]
    if not rows:
        return pd.DataFrame(columns=["role", "reason", "count"])
    return pd.DataFrame(rows).value_counts().rename("count").reset_index()


# -- 4: retrieve ---------------------------------------------------------------------------

def distilled_source(role: str) -> str:
    return f"distilled:{role}"


def source_of(cfg: ModelConfig) -> str | None:
    """The query source whose evidence a configuration reads (None: closed book)."""
    return {"distilled": distilled_source(cfg.role), "last_question": LAST_QUESTION,
            "history": HISTORY, "none": None}[cfg.retrieval]


def query_sources(p: MedQAParams, items: Sequence[MedicineQAItem],
                  distilled: Mapping[str, Sequence[DistilledQuery]]) -> dict[str, list[str]]:
    """Query text per source and question: the two baselines and each role's distillate."""
    sources = {HISTORY: [history_query(it, p.history_max_turns) for it in items],
               LAST_QUESTION: [last_question_query(it) for it in items]}
    for role, qs in distilled.items():
        sources[distilled_source(role)] = [q.query_used for q in qs]
    return sources


def retrieve_all(sources: Mapping[str, Sequence[str]], items: Sequence[MedicineQAItem],
                 encode: Encoder, item_vecs: np.ndarray, tree: MedicineTree, keep: int,
                 name_vecs: np.ndarray | None = None) -> dict[str, list[RetrievalResult]]:
    """Rank the tree's items for every query of every source and locate the gold.
    ``name_vecs`` (the generic names' vectors): rank documents by name, as the paper
    does; None ranks them by their best item."""
    keys = [it.key for it in tree.items]
    names = tree.names
    out = {}
    for source, queries in sources.items():
        qvecs = encode(list(queries))
        orders = rank_items(qvecs, item_vecs)
        doc_orders = ([[names[i] for i in o] for o in rank_items(qvecs, name_vecs)]
                      if name_vecs is not None else [None] * len(orders))
        out[source] = [evaluate_ranking(it, source, q, order, keys, keep, docs)
                       for it, q, order, docs in zip(items, queries, orders, doc_orders)]
    return out


def _hr_columns(results: Sequence[RetrievalResult], ks: Sequence[int]) -> dict[str, float]:
    doc = hit_rates([r.doc_rank for r in results], ks)
    attr = hit_rates([r.attr_rank for r in results], ks)
    return {**{f"doc_HR@{k}": v for k, v in doc.items()},
            **{f"attr_HR@{k}": v for k, v in attr.items()}}


def chance_row(items: Sequence[MedicineQAItem], tree: MedicineTree, ks: Sequence[int]) -> dict:
    """HR@k of a uniformly random ranking, averaged over the questions."""
    n_docs, n_items = len(tree.medicines), len(tree.items)
    row = {f"doc_HR@{k}": chance_hit_rate(n_docs, 1, k) for k in ks}
    for k in ks:
        row[f"attr_HR@{k}"] = float(np.mean([chance_hit_rate(n_items, len(it.gold_attributes), k)
                                             for it in items]))
    return row


def retrieval_table(results: Mapping[str, Sequence[RetrievalResult]], items, tree,
                    ks: Sequence[int], model_ids: Mapping[str, str],
                    distilled: Mapping[str, Sequence[DistilledQuery]] | None = None
                    ) -> pd.DataFrame:
    """Table 3 layout: HR@k at document and attribute level for each query source.

    A malformed call falls back to the last question, so a distilled row mixes the
    model's queries with the baseline's; each distilled row is followed by the same
    source over its well-formed calls only, beside the Last-question row over the same
    questions (what distillation adds where the model did call the tool)."""
    rows = [{"query": "random ranking (chance)", "model_id": "", "questions": len(items),
             **chance_row(items, tree, ks)}]
    for source, res in results.items():
        role = source.split(":", 1)[1] if source.startswith("distilled:") else ""
        label = {HISTORY: "History", LAST_QUESTION: "Last question"}.get(
            source, f"Distilled ({role})")
        rows.append({"query": label, "model_id": model_ids.get(role, ""),
                     "questions": len(res), **_hr_columns(res, ks)})
        if role and distilled and role in distilled:
            rows.extend(_well_formed_rows(role, res, results[LAST_QUESTION], distilled[role],
                                          ks, model_ids.get(role, "")))
    return pd.DataFrame(rows)


def _well_formed_rows(role: str, res: Sequence[RetrievalResult],
                      last: Sequence[RetrievalResult], calls: Sequence[DistilledQuery],
                      ks: Sequence[int], model_id: str) -> list[dict]:
    ok = {q.item_id for q in calls if q.well_formed}
    mine = [r for r in res if r.item_id in ok]
    base = [r for r in last if r.item_id in ok]
    if not mine:
        return [{"query": f"Distilled ({role}), well-formed calls", "model_id": model_id,
                 "questions": 0}]
    return [{"query": f"Distilled ({role}), well-formed calls", "model_id": model_id,
             "questions": len(mine), **_hr_columns(mine, ks)},
            {"query": f"Last question, same {len(base)} questions", "model_id": "",
             "questions": len(base), **_hr_columns(base, ks)}]


# -- 5: read -------------------------------------------------------------------------------

def run_read(p: MedQAParams, clients: Mapping[str, LLMClient], tree: MedicineTree,
             subset: Sequence[MedicineQAItem], results: Mapping[str, Sequence[RetrievalResult]]
             ) -> list[Answer]:
    """Every configuration's answer to every question of the read subset."""
    by_source = {s: {r.item_id: r for r in res} for s, res in results.items()}

    def evidence_of(cfg: ModelConfig, item_id: str) -> Sequence[int]:
        return by_source[source_of(cfg)][item_id].top_items[:p.read_top_k]

    templates = {"read": load_prompt(p.read_prompt),
                 "closed_book": load_prompt(p.closed_book_prompt)}
    return read_answers(p.models, subset, clients, tree, evidence_of, templates,
                        p.history_max_turns, p.read_max_new_tokens)


# -- 6: battles and ratings ---------------------------------------------------------------

@dataclass
class BattleRun:
    slots: list[BattleSlot]
    judged: JudgedBattles
    skipped: list[dict] = field(default_factory=list)


def run_battles(p: MedQAParams, judge: LLMClient, subset: Sequence[MedicineQAItem],
                answers: Sequence[Answer]) -> BattleRun:
    """Judge every pair on every read item in both orders (failed answers skip the slot)."""
    texts = {(a.config, a.item_id): a.text for a in answers if a.error is None}
    slots = battle_plan([m.name for m in p.models], [it.id for it in subset])
    ready = [s for s in slots
             if (s.model_a, s.item_id) in texts and (s.model_b, s.item_id) in texts]
    skipped = [{"id": s.id, "reason": "an answer of this pair failed"} for s in slots
               if s not in ready]
    judged = judge_battles(ready, {it.id: it for it in subset}, texts, judge,
                           load_prompt(p.judge_prompt), p.history_max_turns,
                           p.judge_max_new_tokens)
    return BattleRun(slots, judged, skipped)


def ratings_for(judgements: Sequence[PairwiseJudgement], p: MedQAParams, seed: int,
                source: str) -> pd.DataFrame:
    table = rating_table(battles_from_judgements(judgements, p.elo_game), k=p.elo_k,
                         initial=p.elo_initial, n_shuffles=p.elo_shuffles, n_boot=p.bootstrap,
                         ci=p.ci, prior_ties=p.bt_prior_ties, seed=seed, point=p.elo_point,
                         scale=EloScale(p.elo_scale, p.elo_base))
    table.insert(0, "verdicts", source)
    return table


def stored_judgements(p: MedQAParams) -> list[PairwiseJudgement]:
    """Verdicts from elsewhere (``medqa.stored_verdicts``), in the contract's shape."""
    return [] if p.stored_verdicts is None else read_jsonl(repo_path(p.stored_verdicts),
                                                           PairwiseJudgement)


def order_agreement(judgements: Sequence[PairwiseJudgement]) -> float:
    """Share of battles judged in both orders whose two verdicts name the same winner."""
    return pairwise.order_agreement(((j.item, j.model_a, j.model_b), j.order, j.winner)
                                    for j in judgements if j.order)


# -- 7: the models table --------------------------------------------------------------------

def models_table(p: MedQAParams, distilled: Mapping[str, Sequence[DistilledQuery]],
                 results: Mapping[str, Sequence[RetrievalResult]], ratings: pd.DataFrame,
                 model_ids: Mapping[str, str]) -> pd.DataFrame:
    """Table 2 layout: per configuration, follow rate, HR@k (all questions), Elo and rank."""
    elo = ratings.set_index("model") if not ratings.empty else pd.DataFrame()
    rows = []
    for cfg in p.models:
        source = source_of(cfg)
        row = {"model": cfg.name, "role": cfg.role, "model_id": model_ids.get(cfg.role, ""),
               "retrieval": cfg.retrieval,
               "ins_follow_rate": follow_rate(distilled[cfg.role])
               if cfg.retrieval == "distilled" else float("nan")}
        hr = _hr_columns(results[source], p.hr_ks) if source else {}
        row.update({c: hr.get(c, float("nan")) for c in
                    [f"{lvl}_HR@{k}" for lvl in ("doc", "attr") for k in p.hr_ks]})
        has = cfg.name in elo.index
        row.update({"elo": elo.loc[cfg.name, "elo"] if has else float("nan"),
                    "elo_rank": int(elo.loc[cfg.name, "elo_rank"]) if has else pd.NA,
                    "bt": elo.loc[cfg.name, "bt"] if has else float("nan")})
        rows.append(row)
    table = pd.DataFrame(rows)
    table["elo_rank"] = table["elo_rank"].astype("Int64")
    return table



# -- records and metrics -------------------------------------------------------------------

def retrieval_records(results: Mapping[str, Sequence[RetrievalResult]], tree: MedicineTree
                      ) -> list[dict]:
    """One row per (source, question): the query, gold ranks and the top item keys."""
    return [{"item": r.item_id, "source": r.source, "query": r.query, "doc_rank": r.doc_rank,
             "attr_rank": r.attr_rank, "top_items": [list(tree.items[i].key) for i in r.top_items]}
            for res in results.values() for r in res]


def stage_metrics(tree: MedicineTree, items: Sequence[MedicineQAItem],
                  subset: Sequence[MedicineQAItem],
                  distilled: Mapping[str, Sequence[DistilledQuery]],
                  battles: BattleRun, game: str) -> dict:
    """The numbers a reader checks first: sizes, follow rates, judge behaviour."""
    judgements = battles.judged.judgements
    return {"medicines": len(tree.medicines), "attribute_items": len(tree.items),
            "questions": len(items), "read_items": len(subset),
            "ins_follow_rate": {r: follow_rate(q) for r, q in distilled.items()},
            "copied_example_calls": {r: sum(x.copied_example for x in q)
                                     for r, q in distilled.items()},
            "judge_calls": len(battles.judged.raw), "verdicts": len(judgements),
            "unparsable_verdicts": len(battles.judged.unparsable),
            "skipped_slots": len(battles.skipped),
            "elo_games": len(battles_from_judgements(judgements, game)),
            "order_agreement": order_agreement(judgements),
            "judge_positions": position_bias(battles.judged.raw)}


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
    roles = list(dict.fromkeys([m.role for m in p.models] + [p.judge_role]))
    clients = {r: stage.role(r) for r in roles}
    with stage.step("distill"):
        distilled = run_distill(p, clients, items)
    cached, results, table3, hr_fig = _retrieve(stage, p, tree, items, distilled, clients)
    subset = read_subset(items, p.n_read_items, stage.seed)
    with stage.step("read"):
        answers = run_read(p, clients, tree, subset, results)
    with stage.step("judge"):
        battles = run_battles(p, clients[p.judge_role], subset, answers)
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
