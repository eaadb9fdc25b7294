"""Where the Retrieve step's queries come from: the two baselines (the whole history, the
last question) and each distilling role's ``search_engine`` calls."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from medpref.contracts import MedicineQAItem
from medpref.medqa.config import MedQAParams, ModelConfig
from medpref.medqa.distill import DistilledQuery
from medpref.medqa.retrieval import history_query, last_question_query

HISTORY, LAST_QUESTION = "history", "last_question"


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
