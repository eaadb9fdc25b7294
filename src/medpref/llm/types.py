"""Plain value types shared by every language-model backend."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": "..."}


@dataclass(frozen=True)
class GenerationParams:
    """How to decode. ``temperature == 0`` means greedy; the seed then plays no part."""

    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    repetition_penalty: float = 1.0      # > 1 discourages tokens already generated
    no_repeat_ngram_size: int = 0        # > 0 forbids repeating an n-gram of this size

    @property
    def sampled(self) -> bool:
        return self.temperature > 0

    def loop_controls(self) -> dict[str, Any]:
        """The anti-loop decoding controls that are on (empty when both are off)."""
        out: dict[str, Any] = {}
        if self.repetition_penalty != 1.0:
            out["repetition_penalty"] = self.repetition_penalty
        if self.no_repeat_ngram_size > 0:
            out["no_repeat_ngram_size"] = self.no_repeat_ngram_size
        return out

    def cache_fields(self) -> dict[str, Any]:
        """The fields that identify a completion: a sampled call only with its seed, the
        loop controls only when on."""
        out = {"max_new_tokens": self.max_new_tokens, "stop": list(self.stop),
               **self.loop_controls()}     # only when on: older cache keys stay valid
        if self.sampled:
            if self.seed is None:
                raise ValueError("a sampled call (temperature > 0) needs a seed to be cached")
            out.update(temperature=self.temperature, top_p=self.top_p, seed=self.seed)
        return out

    def with_overrides(self, **overrides: Any) -> GenerationParams:
        clean = {k: v for k, v in overrides.items() if v is not None}
        if "stop" in clean:
            clean["stop"] = tuple(clean["stop"])
        return replace(self, **clean)


@dataclass(frozen=True)
class CallSpec:
    """One kind of model call, as its stage's params declare it: the role that answers,
    the prompt it is asked (a name under ``configs/prompts``; "" where the call site picks
    among several its params name), the token budget of the answer and the start of the
    answer (``answer_prefix``, "" for none; see :class:`ChatRequest`).

    Stage configs build these from their own keys (``params.yaml`` keeps its keys) and
    every call site passes one to the client, which takes the budget and the prefix from
    it and from nowhere else. Per-call decoding (temperature, seed, stop) stays an
    override of the call."""

    role: str
    prompt: str
    max_new_tokens: int
    answer_prefix: str = ""

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"a call's max_new_tokens must be >= 1, got {self.max_new_tokens}")

    def but(self, **changes: Any) -> CallSpec:
        """This call with some fields changed (e.g. an answer prefix made per item)."""
        return replace(self, **changes)


@dataclass(frozen=True)
class ChatRequest:
    """A conversation to answer. ``prefix`` starts the assistant's answer (local models
    continue it; remote ones are asked plainly and an echoed prefix is removed); the
    completion's text never includes it."""

    messages: tuple[Message, ...]
    params: GenerationParams
    tools: tuple[dict, ...] | None = None
    prefix: str = ""

    @staticmethod
    def of(messages: list[Message], params: GenerationParams, tools: list[dict] | None = None,
           prefix: str = ""):
        return ChatRequest(tuple(dict(m) for m in messages), params,
                           tuple(tools) if tools else None, prefix)


@dataclass
class Completion:
    """One raw completion. ``error`` set means the call failed after its retries."""

    text: str
    tokens_in: int = 0
    tokens_out: int = 0
    latency_s: float = 0.0
    finish_reason: str | None = None
    tool_calls: list[dict] | None = None
    cached: bool = False
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_record(self) -> dict[str, Any]:
        rec = asdict(self)
        rec.pop("cached")
        return rec


@dataclass
class OptionScores:
    """Probabilities of a fixed set of answer options, renormalised over the options.

    ``mass`` is how much of the model's next-token probability the options covered
    before renormalising: a low mass means the prompt did not lead the model to answer.
    ``error`` set means the call failed (after its retries): ``probs`` is empty and
    ``mass`` 0, which every scorer already reads as "no usable judgement"; it is never
    cached. Token counts are the backend's own (a server's reported usage).
    """

    probs: dict[str, float]
    mass: float = 1.0
    cached: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    tokens_in: int = 0
    tokens_out: int = 0
    latency_s: float = 0.0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def expected(self) -> float:
        """Σ value·p(value) for numeric options (the REM expected score)."""
        return sum(float(k) * p for k, p in self.probs.items())

    def as_completion(self) -> Completion:
        """The call as the ledger counts it."""
        return Completion(text="", tokens_in=self.tokens_in, tokens_out=self.tokens_out,
                          latency_s=self.latency_s, error=self.error)

    def to_record(self) -> dict[str, Any]:
        return {"probs": self.probs, "mass": self.mass, "tokens_in": self.tokens_in,
                "tokens_out": self.tokens_out, "latency_s": self.latency_s}
