"""The Distill step: the model condenses a consultation into one ``search_engine`` call.

Each completion is kept raw with the parse: well-formed or not (and why), the query it
carried, and the query actually used for retrieval. A malformed call falls back to the
query named by ``medqa.distill_fallback`` (the last question by default, i.e. what a
pipeline without distillation would search) and is counted: the instruction-follow rate
is the share of well-formed calls, as in RagPULSE's Table 2.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Literal

from medpref.contracts import MedicineQAItem
from medpref.llm.client import LLMClient
from medpref.llm.types import CallSpec, Completion
from medpref.medqa.config import MedQAParams
from medpref.medqa.retrieval import history_query, last_question_query
from medpref.medqa.toolcall import (
    SEARCH_ENGINE_TOOL,
    ToolCall,
    ToolCallError,
    example_queries,
    parse_native_calls,
    parse_text_call,
)
from medpref.prompts import PromptTemplate, format_dialogue, load_prompt

ToolMode = Literal["text", "native"]


@dataclass(frozen=True)
class DistilledQuery:
    """One Distill completion, its parse and the query retrieval used."""

    item_id: str
    role: str
    model_id: str
    tool_mode: str
    raw: str
    tool_calls: list | None
    well_formed: bool
    reason: str | None
    detail: str | None
    query: str | None
    query_used: str
    fallback: str | None
    copied_example: bool  # the answer repeats a query of the prompt's examples

    def to_record(self) -> dict:
        return asdict(self)


def resolve_tool_mode(mode: str, client: LLMClient) -> ToolMode:
    """``auto``: native function calls where the backend has them (openai), else text."""
    if mode == "auto":
        return "native" if client.backend.kind == "openai" else "text"
    if mode not in ("text", "native"):
        raise ValueError(f"unknown tool mode '{mode}'")
    return mode  # type: ignore[return-value]


def distill_messages(template: PromptTemplate, item: MedicineQAItem, max_turns: int
                     ) -> list[dict[str, str]]:
    return template.render(history=format_dialogue(item.history[-max_turns:]),
                           question=item.question)


def fallback_query(item: MedicineQAItem, kind: str, max_turns: int) -> str:
    """The documented query for a malformed call."""
    if kind == "last_question":
        return last_question_query(item)
    if kind == "history":
        return history_query(item, max_turns)
    raise ValueError(f"unknown distill fallback '{kind}'")


def interpret(completion: Completion, tool_mode: ToolMode, prefix: str = "") -> ToolCall:
    """The call in one completion (the assistant prefix, if any, is part of the answer)."""
    if not completion.ok:
        raise ToolCallError("model call failed", completion.error)
    if tool_mode == "native":
        return parse_native_calls(completion.tool_calls)
    return parse_text_call(prefix + completion.text)


def distilled_query(item: MedicineQAItem, completion: Completion, client: LLMClient,
                    tool_mode: ToolMode, prefix: str, fallback: str, max_turns: int,
                    examples: set[str]) -> DistilledQuery:
    """Parse one completion; a malformed call gets the fallback query."""
    try:
        call = interpret(completion, tool_mode, prefix)
        query, reason, detail = call.query, None, None
    except ToolCallError as exc:
        query, reason, detail = None, exc.reason, str(exc)
    used = query if query is not None else fallback_query(item, fallback, max_turns)
    return DistilledQuery(item.id, client.role, client.model_id, tool_mode, completion.text,
                          completion.tool_calls, query is not None, reason, detail, query, used,
                          None if query is not None else fallback,
                          any(ex in prefix + completion.text for ex in examples))


def distill(items: Sequence[MedicineQAItem], client: LLMClient, template: PromptTemplate,
            tool_mode: ToolMode, call: CallSpec, *, fallback: str = "last_question",
            max_turns: int = 8) -> list[DistilledQuery]:
    """One batched call per question; every answer parsed, malformed ones replaced."""
    messages = [distill_messages(template, it, max_turns) for it in items]
    tools = [SEARCH_ENGINE_TOOL] if tool_mode == "native" else None
    completions = client.chat_many(messages, call, tools=tools)
    examples = example_queries(template.system + "\n" + template.user)
    prefix = call.answer_prefix
    return [distilled_query(it, comp, client, tool_mode, prefix, fallback, max_turns, examples)
            for it, comp in zip(items, completions)]


def follow_rate(rows: Sequence[DistilledQuery]) -> float:
    """Instruction-follow rate: the share of well-formed calls."""
    return sum(r.well_formed for r in rows) / len(rows) if rows else float("nan")


def distilling_roles(p: MedQAParams) -> list[str]:
    return list(dict.fromkeys(m.role for m in p.models if m.retrieval == "distilled"))


def run_distill(p: MedQAParams, clients: Mapping[str, LLMClient],
                items: Sequence[MedicineQAItem]) -> dict[str, list[DistilledQuery]]:
    """Each distilling role's parsed calls, one batch per role."""
    out = {}
    for role in distilling_roles(p):
        client = clients[role]
        mode = resolve_tool_mode(p.tool_mode, client)
        call = p.distill_call(role, native=mode == "native")
        out[role] = distill(items, client, load_prompt(call.prompt), mode, call,
                            fallback=p.distill_fallback, max_turns=p.history_max_turns)
    return out
