"""Params of stage 07 (imapScore, Wang et al.): the ``imapscore`` section of params.yaml."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from medpref.llm.calls import CallParams, CallSlot, SectionCalls, default_calls
from medpref.params import StrictModel
from medpref.stagekit import GuardParams


class ExtractionParams(StrictModel):
    """How the judge extracts imaps (``imapscore.extraction``)."""

    mode: Literal["auto", "sampled", "greedy"] = "auto"
    samples: int = Field(3, ge=1, le=20)
    temperature: float = Field(0.9, gt=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    #: A pair is kept when it is found in at least this many samples.
    min_agree: int = Field(2, ge=1, le=20)
    force_query_term: bool = True


_CALLS = ("question", "answer", "relation")


class ImapParams(SectionCalls):
    """Where the scored QA triples come from, how imaps are extracted and linked.

    Its calls (one judge role asks all three): a question's imap, written after "Query-";
    an answer's imap, after "Inform-" (and, with ``extraction.force_query_term``, after
    the question's first Query term: "Inform-<term>-"); a value pair's relation, one word
    (generate mode; options mode reads the next token after ``relations.OPTION_PREFIX``)."""

    SECTION: ClassVar[str] = "imapscore"
    CALLS: ClassVar[dict[str, CallSlot]] = {
        "question": CallSlot(answer_prefix="Query-"),
        "answer": CallSlot(answer_prefix="Inform-"),
        "relation": CallSlot()}
    calls: dict[str, CallParams] = default_calls(
        question=dict(role="judge", prompt="imap_question", max_new_tokens=48),
        answer=dict(role="judge", prompt="imap_answer", max_new_tokens=48),
        relation=dict(role="judge", prompt="imap_relation", max_new_tokens=6))

    # -- data: the contract "Medical QA with human scores" ------------------------------
    source: Literal["embedded", "mts_correlation"] = "embedded"
    data: str = "data/embedded/qa_human_scores.jsonl"
    #: MTS-Dialog correlation study: the first N validation dialogues, all 4 systems each.
    mts_max_dialogues: int = Field(10, ge=1, le=100)

    # -- the judge (calls): imap extraction and LLM value relations ----------------------
    #: greedy | sampled (the paper: 3 samples at T = 0.9, keep pairs in >= 2) | auto
    #: (sampled when the judge is a served openai-backend model, else greedy).
    extraction: ExtractionParams = Field(default_factory=ExtractionParams)
    #: False: no judge relation calls; only the ontology path (imap extraction still runs).
    judge_relations: bool = True
    #: options: p(word) of the next token (hf backend); generate: a parsed completion.
    relation_mode: Literal["options", "generate"] = "options"
    #: Long inputs (MTS dialogues) are cut to this many words before prompting.
    question_max_words: int = Field(300, ge=10, le=20_000)
    answer_max_words: int = Field(200, ge=10, le=20_000)
    #: Values kept per term of an answer imap (a looping small model can list dozens).
    max_values_per_term: int = Field(6, ge=1, le=50)
    #: The Query term used when a question's imap has none (so answers can be extracted).
    fallback_query_term: str = Field("answer", min_length=1)

    # -- the ontology (the paper's KG): embedded lexicon or a user's UMLS META/ -----------
    lexicon: str = "data/embedded/lexicon"
    umls_dir: str | None = None
    umls_sabs: list[str] | None = None
    max_hops: int = Field(3, ge=1, le=20)
    #: Embedding fallback for linking a value to a concept (None: string spans only).
    link_min_similarity: float | None = Field(0.8, ge=0.0, le=1.0)

    # -- Eq. 1 ----------------------------------------------------------------------------
    #: λ_t: share of related pairs that are containment, or their count (see imap.score).
    lambda_reading: Literal["share", "count"] = "share"

    # -- baselines ------------------------------------------------------------------------
    embedding_model: str = "models/all-minilm-l6-v2"
    #: BERTScore on this layer of embedding_model (None: no BERTScore row).
    bertscore_layer: int | None = Field(6, ge=1, le=48)
    #: Tokens of ROUGE/BLEU: auto (detect Han characters per pair), item (the record's
    #: ``lang``), or zh / en for every item.
    metrics_lang: Literal["auto", "item", "zh", "en"] = "auto"

    guard: GuardParams = Field(default_factory=GuardParams)

    @property
    def judge_role(self) -> str:
        """The role that extracts the imaps and judges the relations."""
        return self.calls["question"].role or ""

    def option_scoring(self, sections: dict[str, Any]) -> list[tuple[str, str]]:
        """(params key, role) of each option-scoring use: the judge's relations in
        ``relation_mode: options``."""
        if self.judge_relations and self.relation_mode == "options":
            return [("imapscore.relation_mode", self.judge_role)]
        return []

    @model_validator(mode="after")
    def _one_judge(self) -> ImapParams:
        roles = {name: c.role for name, c in self.calls.items()}
        if len(set(roles.values())) > 1:
            raise ValueError(f"imapscore.calls: one judge asks every call; give them one "
                             f"role (got {roles})")
        return self

    @model_validator(mode="after")
    def _sabs_need_umls(self) -> ImapParams:
        if self.umls_sabs is not None and self.umls_dir is None:
            raise ValueError("umls_sabs filters a user's UMLS: set umls_dir too")
        return self
