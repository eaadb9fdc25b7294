"""Stage 06's run: Distill → Retrieve → Read on MedicineQA, then battles and ratings.

The notebook calls these functions in order and shows what they return:

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
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from medpref.contracts import Medicine, MedicineQAItem, PairwiseJudgement, read_jsonl
from medpref.llm.client import LLMClient
from medpref.medqa.config import MedQAParams, ModelConfig
from medpref.medqa.database import (Encoder, MedicineTree, build_tree, embed_items,
                                    load_encoder, model_fingerprint)
from medpref.medqa.distill import DistilledQuery, distill, follow_rate, resolve_tool_mode
from medpref.medqa.judging import (BattleSlot, JudgedBattles, battle_plan, judge_battles,
                                   position_bias)
from medpref.medqa.ratings import battles_from_judgements, rating_table
from medpref.medqa.read import Answer, read_answers
from medpref.medqa.retrieval import (RetrievalResult, chance_hit_rate, check_gold,
                                     evaluate_ranking, hit_rates, history_query,
                                     last_question_query, rank_items)
from medpref.params import repo_path
from medpref.prompts import load_prompt

HISTORY, LAST_QUESTION = "history", "last_question"


class StepTimer:
    """Wall time of each step, in seconds (reported in metrics.json)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = round(self.seconds.get(name, 0.0) + time.perf_counter() - t0, 2)


def output_paths(p: MedQAParams) -> dict[str, Path]:
    data, rep = repo_path(p.output_dir), repo_path(p.reports)
    return {"distilled": data / "distilled.jsonl", "retrievals": data / "retrievals.jsonl",
            "answers": data / "answers.jsonl", "verdicts": data / "verdicts.jsonl",
            "embeddings": repo_path(p.embeddings_cache),
            "table2": rep / "table2_models", "table3": rep / "table3_retrieval",
            "ratings": rep / "ratings", "malformed": rep / "malformed_calls.jsonl",
            "malformed_reasons": rep / "malformed_reasons",
            "unparsable": rep / "unparsable_verdicts.jsonl", "hr_figure": rep / "hr_at_k.png",
            "elo_figure": rep / "elo.png", "metrics": rep / "metrics.json",
            "ledger": rep / "ledger.json", "provenance": rep / "provenance.json"}


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
                 encode: Encoder, item_vecs: np.ndarray, tree: MedicineTree, keep: int
                 ) -> dict[str, list[RetrievalResult]]:
    """Rank the tree's items for every query of every source and locate the gold."""
    keys = [it.key for it in tree.items]
    out = {}
    for source, queries in sources.items():
        orders = rank_items(encode(list(queries)), item_vecs)
        out[source] = [evaluate_ranking(it, source, q, order, keys, keep)
                       for it, q, order in zip(items, queries, orders)]
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
                    ks: Sequence[int], model_ids: Mapping[str, str]) -> pd.DataFrame:
    """Table 3 layout: HR@k at document and attribute level for each query source."""
    rows = [{"query": "random ranking (chance)", "model_id": "", "questions": len(items),
             **chance_row(items, tree, ks)}]
    for source, res in results.items():
        role = source.split(":", 1)[1] if source.startswith("distilled:") else ""
        label = {HISTORY: "History", LAST_QUESTION: "Last question"}.get(
            source, f"Distilled ({role})")
        rows.append({"query": label, "model_id": model_ids.get(role, ""),
                     "questions": len(res), **_hr_columns(res, ks)})
    return pd.DataFrame(rows)


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
    table = rating_table(battles_from_judgements(judgements), k=p.elo_k, initial=p.elo_initial,
                         n_shuffles=p.elo_shuffles, n_boot=p.bootstrap, ci=p.ci,
                         prior_ties=p.bt_prior_ties, seed=seed)
    table.insert(0, "verdicts", source)
    return table


def stored_judgements(p: MedQAParams) -> list[PairwiseJudgement]:
    """Verdicts from elsewhere (``medqa.stored_verdicts``), in the contract's shape."""
    return [] if p.stored_verdicts is None else read_jsonl(repo_path(p.stored_verdicts),
                                                           PairwiseJudgement)


def order_agreement(judgements: Sequence[PairwiseJudgement]) -> float:
    """Share of battles judged in both orders whose two verdicts name the same winner."""
    pairs: dict[tuple, dict[str, str]] = {}
    for j in judgements:
        if j.order:
            pairs.setdefault((j.item, j.model_a, j.model_b), {})[j.order] = j.winner
    both = [v for v in pairs.values() if len(v) == 2]
    return sum(v["ab"] == v["ba"] for v in both) / len(both) if both else float("nan")


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
                  battles: BattleRun, embeddings_cached: bool, timer: StepTimer) -> dict:
    """The numbers a reader checks first: sizes, follow rates, judge behaviour, wall time."""
    judgements = battles.judged.judgements
    return {"medicines": len(tree.medicines), "attribute_items": len(tree.items),
            "questions": len(items), "read_items": len(subset),
            "ins_follow_rate": {r: follow_rate(q) for r, q in distilled.items()},
            "copied_example_calls": {r: sum(x.copied_example for x in q)
                                     for r, q in distilled.items()},
            "judge_calls": len(battles.judged.raw), "verdicts": len(judgements),
            "unparsable_verdicts": len(battles.judged.unparsable),
            "skipped_slots": len(battles.skipped),
            "battles": len(battles_from_judgements(judgements)),
            "order_agreement": order_agreement(judgements),
            "judge_positions": position_bias(battles.judged.raw),
            "embeddings_cache_hit": embeddings_cached,
            "wall_s": {**timer.seconds, "total": round(sum(timer.seconds.values()), 2)}}
