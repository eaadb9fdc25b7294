"""The ``search_engine`` tool of the Distill step: its schema and the parser of its calls.

Two ways a model can call it:

* **native** — backends with tool support (OpenAI-compatible servers) get
  :data:`SEARCH_ENGINE_TOOL` in ``tools=[...]`` and answer with ``Completion.tool_calls``
  (``[{"name": ..., "arguments": "<JSON>"}]``); :func:`parse_native_calls` reads them.
* **text** — local models write the call; :func:`parse_text_call` accepts

  - the paper's own form (RagPULSE Table 1): ``search_engine(keywords as plain text)``,
    and the same quoted, ``search_engine("keywords")``;
  - a named argument, ``search_engine(input="keywords")`` (the paper's schema names it
    ``input``) or ``search_engine(query="keywords")`` (single quotes too; ``\\"``
    escapes a quote);
  - ``{"name": "search_engine", "arguments": {"input": "keywords"}}`` (or ``"query"``;
    arguments may also be a JSON string, as in OpenAI's wire format),

  at the start of the answer and alone on its line(s); later lines are ignored. The tool
  name is exact, the query a non-empty string.

A call that breaks these rules raises :class:`ToolCallError` whose message says why; the
share of completions that parse is the instruction-follow rate. The parsers are pure.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

TOOL_NAME = "search_engine"

#: The argument's name in the paper's schema, and the other name we accept.
ARGUMENT = "input"
ARGUMENT_NAMES = ("input", "query")

#: OpenAI-style function schema: the paper's Table 1 tool (argument ``input``).
SEARCH_ENGINE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Search the medicine database for evidence that helps to answer "
                       "the patient's question.",
        "parameters": {
            "type": "object",
            "properties": {ARGUMENT: {"type": "string",
                                      "description": "search keywords: the medicine and "
                                                     "what is asked about it"}},
            "required": [ARGUMENT],
        },
    },
}

_QUOTED = r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\''
_NAMES = "|".join(ARGUMENT_NAMES)
_ARGS = re.compile(rf"^\s*(?:{_NAMES})\s*=\s*(?P<q>{_QUOTED})\s*$")
_NAMED = re.compile(r"^\s*(?P<name>[A-Za-z_]\w*)\s*=")
_POSITIONAL = re.compile(rf"^\s*(?P<q>{_QUOTED})\s*$")
_EXAMPLE = re.compile(rf"{TOOL_NAME}\(\s*(?:(?:{_NAMES})\s*=\s*)?(?P<q>{_QUOTED})\s*\)")


class ToolCallError(ValueError):
    """A malformed call of the search tool.

    ``reason`` is a short fixed phrase (tables count calls by it); the message adds the
    detail of this call (what was found).
    """

    def __init__(self, reason: str, detail: str | None = None):
        self.reason = reason
        super().__init__(f"{reason} ({detail})" if detail else reason)


@dataclass(frozen=True)
class ToolCall:
    query: str
    form: Literal["text", "json", "native"]
    #: how the query was written: ``input`` / ``query`` (named), ``positional`` (quoted
    #: or the paper's bare text)
    argument: str = "query"


def _unquote(quoted: str) -> str:
    return re.sub(r"\\(.)", r"\1", quoted[1:-1])


def _checked_query(value: Any, name: str = "query") -> str:
    if not isinstance(value, str):
        raise ToolCallError(f"argument '{name}' must be a string", type(value).__name__)
    if not value.strip():
        raise ToolCallError("empty query")
    return value.strip()


def _call_end(line: str, start: int) -> int | None:
    """Index of the ``)`` closing the call opened at ``start`` (quotes respected)."""
    quote = None
    i = start
    while i < len(line):
        ch = line[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == ")":
            return i
        i += 1
    return None


def _parse_call_line(line: str) -> ToolCall:
    lowered = line.lower()
    pos = lowered.find(TOOL_NAME + "(")
    if pos < 0:
        raise ToolCallError(f"no {TOOL_NAME}(...) call on the first line")
    found = line[pos:pos + len(TOOL_NAME)]
    if found != TOOL_NAME:
        raise ToolCallError(f"tool name must be exactly '{TOOL_NAME}'", f"found '{found}'")
    if line[:pos].strip():
        raise ToolCallError("text before the call")
    open_at = pos + len(TOOL_NAME)
    close_at = _call_end(line, open_at + 1)
    if close_at is None:
        raise ToolCallError("unclosed call", "missing ')' or quote; truncated?")
    rest = line[close_at + 1:].strip()
    if rest and not (rest.endswith(")") and not _has_quote(line[open_at + 1:])):
        raise ToolCallError("text after the call on its line")
    if rest:          # bare text with its own parentheses: "(... (Advil) dose)"
        close_at = line.rstrip().rindex(")")
    return _parse_arguments(line[open_at + 1:close_at])


def _has_quote(text: str) -> bool:
    return '"' in text or "'" in text


def _parse_arguments(args: str) -> ToolCall:
    """``input="..."``, ``query="..."``, ``"..."`` or the paper's bare ``keywords``."""
    match = _ARGS.match(args)
    if match:
        name = args.split("=", 1)[0].strip()
        return ToolCall(_checked_query(_unquote(match.group("q")), name), "text", name)
    match = _POSITIONAL.match(args)
    if match:
        return ToolCall(_checked_query(_unquote(match.group("q"))), "text", "positional")
    named = _NAMED.match(args)
    if named and named.group("name") not in ARGUMENT_NAMES:
        raise ToolCallError(f"unknown argument, expected {' or '.join(ARGUMENT_NAMES)}",
                            named.group("name"))
    if named or _has_quote(args):
        raise ToolCallError('malformed arguments, expected input="..." or plain keywords',
                            repr(args.strip()))
    return ToolCall(_checked_query(args), "text", "positional")


def _arguments_of(obj: dict) -> dict:
    args = obj.get("arguments", obj.get("parameters"))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError as exc:
            raise ToolCallError("arguments are not valid JSON", exc.msg) from None
    if not isinstance(args, dict):
        raise ToolCallError("the call has no 'arguments' object")
    if not any(n in args for n in ARGUMENT_NAMES):
        raise ToolCallError(f"missing argument '{ARGUMENT}' (or 'query')",
                            f"got {sorted(args)}")
    return args


def _parse_call_object(obj: Any) -> tuple[str, str]:
    """(query, argument name) of a JSON/native call object."""
    if not isinstance(obj, dict):
        raise ToolCallError("the JSON call must be an object")
    if obj.get("name") != TOOL_NAME:
        raise ToolCallError(f"tool name must be exactly '{TOOL_NAME}'",
                            f"found {obj.get('name')!r}")
    args = _arguments_of(obj)
    name = next(n for n in ARGUMENT_NAMES if n in args)
    return _checked_query(args[name], name), name


def _parse_json_call(text: str) -> ToolCall:
    try:
        obj, end = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError as exc:
        raise ToolCallError("invalid JSON call", exc.msg) from None
    rest = text[end:]
    if rest.split("\n", 1)[0].strip():
        raise ToolCallError("text after the JSON call on its line")
    return ToolCall(*_split(_parse_call_object(obj), "json"))


def _split(parsed: tuple[str, str], form: str) -> tuple[str, str, str]:
    return parsed[0], form, parsed[1]


def parse_text_call(text: str) -> ToolCall:
    """The query of a written call; :class:`ToolCallError` says why a call is malformed."""
    stripped = (text or "").strip()
    if not stripped:
        raise ToolCallError("empty answer")
    if stripped.startswith("{"):
        return _parse_json_call(stripped)
    first, _, rest = stripped.partition("\n")
    if TOOL_NAME + "(" not in first.lower() and TOOL_NAME in rest.lower():
        raise ToolCallError("the call is not on the first line")
    return _parse_call_line(first.strip())


def parse_native_calls(tool_calls: list[dict] | None) -> ToolCall:
    """The query of a backend's native tool calls (exactly one call of the tool)."""
    if not tool_calls:
        raise ToolCallError("no tool call (the model answered in text)")
    if len(tool_calls) > 1:
        raise ToolCallError("more than one tool call", f"{len(tool_calls)} calls")
    return ToolCall(*_split(_parse_call_object(tool_calls[0]), "native"))


def example_queries(text: str) -> set[str]:
    """Queries of the example calls written in a prompt (to spot copied examples)."""
    return {_unquote(m.group("q")).strip() for m in _EXAMPLE.finditer(text)}
