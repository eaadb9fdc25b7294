"""Params of stage 07 (imapScore, Wang et al.): the ``imapscore`` section of params.yaml."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from medpref.llm.types import CallSpec
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


class ImapParams(StrictModel):
    """Where the scored QA triples come from, how imaps are extracted and linked."""

    # -- data: the contract "Medical QA with human scores" ------------------------------
    source: Literal["embedded", "mts_correlation"] = "embedded"
    data: str = "data/embedded/qa_human_scores.jsonl"
    #: MTS-Dialog correlation study: the first N validation dialogues, all 4 systems each.
    mts_max_dialogues: int = Field(10, ge=1, le=100)

    # -- the judge: imap extraction and LLM value relations ------------------------------
    role: str = "judge"
    #: greedy | sampled (the paper: 3 samples at T = 0.9, keep pairs in >= 2) | auto
    #: (sampled when the judge is a served openai-backend model, else greedy).
    extraction: ExtractionParams = Field(default_factory=ExtractionParams)
    #: False: no judge relation calls; only the ontology path (imap extraction still runs).
    judge_relations: bool = True
    #: options: p(word) of the next token (hf backend); generate: a parsed completion.
    relation_mode: Literal["options", "generate"] = "options"
    question_prompt: str = "imap_question"
    answer_prompt: str = "imap_answer"
    relation_prompt: str = "imap_relation"
    max_new_tokens_question: int = Field(48, ge=8, le=2048)
    max_new_tokens_answer: int = Field(48, ge=8, le=2048)
    max_new_tokens_relation: int = Field(6, ge=1, le=2048)
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
    def question_call(self) -> CallSpec:
        """A question's imap, written after "Query-"."""
        return CallSpec(self.role, self.question_prompt, self.max_new_tokens_question,
                        "Query-")

    @property
    def answer_call(self) -> CallSpec:
        """An answer's imap, written after "Inform-" (and, with ``force_query_term``,
        after the question's first Query term: "Inform-<term>-")."""
        return CallSpec(self.role, self.answer_prompt, self.max_new_tokens_answer, "Inform-")

    @property
    def relation_call(self) -> CallSpec:
        """A value pair's relation, one word (generate mode; options mode reads the next
        token after ``relations.OPTION_PREFIX`` instead)."""
        return CallSpec(self.role, self.relation_prompt, self.max_new_tokens_relation)

    @model_validator(mode="after")
    def _sabs_need_umls(self) -> ImapParams:
        if self.umls_sabs is not None and self.umls_dir is None:
            raise ValueError("umls_sabs filters a user's UMLS: set umls_dir too")
        return self
