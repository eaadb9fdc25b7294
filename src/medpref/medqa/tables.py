"""Stage 08's tables and headline numbers: the distillation summary, Table 3 (HR@k per
query source), Table 2 (per model configuration) and the run's metrics."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from medpref.contracts import MedicineQAItem
from medpref.medqa.config import MedQAParams
from medpref.medqa.database import MedicineTree
from medpref.medqa.distill import DistilledQuery, follow_rate
from medpref.medqa.judging import BattleRun, order_agreement, position_bias
from medpref.medqa.ratings import battles_from_judgements
from medpref.medqa.retrieval import RetrievalResult, chance_hit_rate, hit_rates
from medpref.medqa.sources import HISTORY, LAST_QUESTION, source_of


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


def hr_columns(results: Sequence[RetrievalResult], ks: Sequence[int]) -> dict[str, float]:
    doc = hit_rates([r.doc_rank for r in results], ks)
    attr = hit_rates([r.attr_rank for r in results], ks)
    return {**{f"doc_HR@{k}": v for k, v in doc.items()},
            **{f"attr_HR@{k}": v for k, v in attr.items()}}


def chance_row(n_gold: Mapping[str, int], sizes: tuple[int, int], ks: Sequence[int]) -> dict:
    """HR@k of a uniformly random ranking, averaged over the questions (``n_gold``: each
    question's number of gold attribute items; ``sizes``: medicines, attribute items)."""
    n_docs, n_items = sizes
    row = {f"doc_HR@{k}": chance_hit_rate(n_docs, 1, k) for k in ks}
    for k in ks:
        row[f"attr_HR@{k}"] = float(np.mean([chance_hit_rate(n_items, g, k)
                                             for g in n_gold.values()]))
    return row


def retrieval_table(results: Mapping[str, Sequence[RetrievalResult]], n_gold: Mapping[str, int],
                    sizes: tuple[int, int], ks: Sequence[int], model_ids: Mapping[str, str],
                    distilled: Mapping[str, Sequence[DistilledQuery]] | None = None
                    ) -> pd.DataFrame:
    """Table 3 layout: HR@k at document and attribute level for each query source.

    A malformed call falls back to the last question, so a distilled row mixes the
    model's queries with the baseline's; each distilled row is followed by the same
    source over its well-formed calls only, beside the Last-question row over the same
    questions (what distillation adds where the model did call the tool)."""
    rows = [{"query": "random ranking (chance)", "model_id": "", "questions": len(n_gold),
             **chance_row(n_gold, sizes, ks)}]
    for source, res in results.items():
        role = source.split(":", 1)[1] if source.startswith("distilled:") else ""
        label = {HISTORY: "History", LAST_QUESTION: "Last question"}.get(
            source, f"Distilled ({role})")
        rows.append({"query": label, "model_id": model_ids.get(role, ""),
                     "questions": len(res), **hr_columns(res, ks)})
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
             "questions": len(mine), **hr_columns(mine, ks)},
            {"query": f"Last question, same {len(base)} questions", "model_id": "",
             "questions": len(base), **hr_columns(base, ks)}]


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
        hr = hr_columns(results[source], p.hr_ks) if source else {}
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
