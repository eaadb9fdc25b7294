"""Params of stage 08 (``medqa`` section of params.yaml)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from medpref.llm.calls import CallParams, CallSlot, SectionCalls, default_calls
from medpref.llm.types import CallSpec
from medpref.params import StrictModel
from medpref.stagekit import GuardParams

#: How a configuration gets its evidence: its own distilled query, a baseline query
#: (the whole history, or the last question: Table 3's rows), or none (closed book).
RetrievalMode = Literal["distilled", "last_question", "history", "none"]


class ModelConfig(StrictModel):
    """One competitor of the Elo battles: a role (which model) and a retrieval mode."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    role: str = "policy"
    retrieval: RetrievalMode = "distilled"


def _default_models() -> list[ModelConfig]:
    return [ModelConfig(name="distilled", retrieval="distilled"),
            ModelConfig(name="last_question", retrieval="last_question"),
            ModelConfig(name="closed_book", retrieval="none")]


_PER_MODEL = "medqa.models[].role"


class MedQAParams(SectionCalls):
    SECTION: ClassVar[str] = "medqa"
    #: a distilling model's search_engine call, as text or as a native tool call; a
    #: configuration's answer from its evidence or closed-book (each asked of the model's
    #: own role); the judge's verdict, after "Verdict:"
    CALLS: ClassVar[dict[str, CallSlot]] = {
        "distill": CallSlot(role_from=_PER_MODEL),
        "distill_tools": CallSlot(role_from=_PER_MODEL),
        "read": CallSlot(role_from=_PER_MODEL),
        "read_closed_book": CallSlot(role_from=_PER_MODEL),
        "judge": CallSlot(answer_prefix="Verdict:")}
    calls: dict[str, CallParams] = default_calls(
        distill=dict(prompt="medqa_distill_text", max_new_tokens=32, answer_prefix=""),
        distill_tools=dict(prompt="medqa_distill_tools", max_new_tokens=32, answer_prefix=""),
        read=dict(prompt="medqa_read", max_new_tokens=96),
        read_closed_book=dict(prompt="medqa_read_closed", max_new_tokens=96),
        judge=dict(role="judge", prompt="medqa_judge", max_new_tokens=4))

    # data and the database tree
    medicines: str = "data/embedded/medicines.jsonl"
    questions: str = "data/embedded/medicineqa.jsonl"
    item_text: Literal["generic_attribute", "generic_brands_attribute"] = "generic_attribute"
    # embeddings
    embedding_model: str = "models/all-minilm-l6-v2"
    embedding_batch_size: int = Field(32, ge=1, le=1024)
    embeddings_cache: str = "data/08_medqa/db_embeddings.npz"
    # distill
    n_distill_items: int | None = Field(None, ge=1)
    tool_mode: Literal["auto", "text", "native"] = "auto"
    distill_fallback: Literal["last_question", "history"] = "last_question"
    history_max_turns: int = Field(8, ge=1, le=200)
    # retrieval evaluation
    #: document level: generic_name (the paper: query vs the generic names) | best_item
    doc_level: Literal["generic_name", "best_item"] = "generic_name"
    hr_ks: list[int] = Field(default_factory=lambda: [1, 5, 10, 50])
    # read
    models: list[ModelConfig] = Field(default_factory=_default_models)
    n_read_items: int = Field(20, ge=1)
    read_top_k: int = Field(3, ge=1, le=50)
    # ratings
    elo_k: float = Field(32.0, gt=0, le=400)
    elo_initial: float = 1000.0
    elo_shuffles: int = Field(1000, ge=1, le=100_000)
    #: verdict: one verdict = one game (usual) | battle: verdicts of one item and pair merged
    elo_game: Literal["verdict", "battle"] = "verdict"
    #: shuffled_mean: mean over elo_shuffles orders | bootstrap_median: median of replicates
    elo_point: Literal["shuffled_mean", "bootstrap_median"] = "shuffled_mean"
    #: E_a = 1 / (1 + base^((R_b - R_a) / scale)); the paper: 10 and 400
    elo_scale: float = Field(400.0, gt=0)
    elo_base: float = Field(10.0, gt=1)
    bootstrap: int = Field(1000, ge=10, le=100_000)
    ci: float = Field(0.95, gt=0.5, lt=1.0)
    bt_prior_ties: float = Field(0.5, ge=0.0, le=100.0)
    stored_verdicts: str | None = None
    guard: GuardParams = Field(default_factory=GuardParams)

    def distill_call(self, role: str, native: bool) -> CallSpec:
        """A distilling role's search_engine call (``native``: as a tool call)."""
        return self.call("distill_tools" if native else "distill", role=role)

    def read_call(self, m: ModelConfig) -> CallSpec:
        """A configuration's answer: from its evidence, or closed-book."""
        return self.call("read_closed_book" if m.retrieval == "none" else "read", role=m.role)

    @property
    def judge_call(self) -> CallSpec:
        return self.call("judge")

    @field_validator("hr_ks")
    @classmethod
    def _positive_sorted(cls, ks: list[int]) -> list[int]:
        if not ks or any(k < 1 for k in ks) or len(set(ks)) != len(ks):
            raise ValueError("hr_ks must be distinct positive integers")
        return sorted(ks)

    @model_validator(mode="after")
    def _models_distinct(self) -> MedQAParams:
        names = [m.name for m in self.models]
        if len(self.models) < 2:
            raise ValueError("models: the Elo battles need at least two configurations")
        if len(set(names)) != len(names):
            raise ValueError(f"models: names must be distinct (got {names})")
        return self
