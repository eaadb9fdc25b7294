"""Every model call of a stage, in one shape: its params section's ``calls`` mapping.

A section that calls models declares each call once::

    calls:
      continuation: {role: annotator, prompt: trajectory_continuation, max_new_tokens: 160}

``role`` is a ``shared.llm.roles`` entry, ``prompt`` a name under ``configs/prompts``,
``max_new_tokens`` the answer's token budget (the one spelling of a generation budget in
params.yaml) and ``answer_prefix`` the start of the answer. Each entry is a
:class:`CallParams`; :func:`resolve_calls` checks the mapping against the calls the
section's code makes (its :class:`CallSlot` s) and reads it into
:class:`~medpref.llm.types.CallSpec` objects, which the call sites pass to the client.

The code fixes what its parsers depend on: an answer prefix that a parser reads after
(``Doctor:`` before a reply), a role that comes from the caller (each doctor under test
plays its own role) and a prompt the call site picks among several its section names.
The params cannot set those; they say so when tried.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import Field, model_validator

from medpref.llm.types import CallSpec
from medpref.params import StrictModel


class CallParams(StrictModel):
    """One model call as params.yaml declares it (an entry of a section's ``calls``)."""

    role: str | None = Field(None, min_length=1)
    prompt: str | None = Field(None, min_length=1)
    max_new_tokens: int = Field(ge=1, le=8192)
    answer_prefix: str | None = None


@dataclass(frozen=True)
class CallSlot:
    """What a section's code fixes about one of its calls.

    ``answer_prefix``: set when a parser reads after it (the params then set none); None
    leaves it to the params (default ""). ``role_from`` / ``prompt_from`` /
    ``prefix_from``: where each call gets its role / prompt / answer prefix (a params key,
    or what the call site picks); the params' entry then sets none. ``read_by``: the dvc
    stages that make the call, where the section's ``calls`` is read call by call
    (``ReadBy()`` on it; :func:`medpref.dvcgen.section_params`)."""

    answer_prefix: str | None = None
    role_from: str | None = None
    prompt_from: str | None = None
    prefix_from: str | None = None
    read_by: tuple[str, ...] = ()


def resolve_calls(section: str, calls: dict[str, CallParams],
                  slots: dict[str, CallSlot]) -> dict[str, CallSpec]:
    """The section's calls as CallSpecs (role "" where the caller gives it, prompt ""
    where the call site picks it); a missing, unknown or over-specified call is a
    ValueError naming ``<section>.calls.<name>``."""
    for name in calls:
        if name not in slots:
            close = difflib.get_close_matches(name, list(slots), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ValueError(f"{section}.calls: unknown call '{name}'{hint} "
                             f"(the calls this stage makes: {list(slots)})")
    missing = [n for n in slots if n not in calls]
    if missing:
        raise ValueError(f"{section}.calls: missing {missing} (the calls this stage makes: "
                         f"{list(slots)})")
    return {name: _spec(f"{section}.calls.{name}", calls[name], slot)
            for name, slot in slots.items()}


def _spec(key: str, c: CallParams, slot: CallSlot) -> CallSpec:
    role = _given_or_fixed(key, "role", c.role, slot.role_from)
    prompt = _given_or_fixed(key, "prompt", c.prompt, slot.prompt_from)
    if slot.answer_prefix is not None and c.answer_prefix is not None:
        raise ValueError(f"{key}.answer_prefix: fixed by the code as "
                         f"{slot.answer_prefix!r} (its parser reads after it); leave it out")
    if slot.prefix_from is not None:
        return CallSpec(role, prompt, c.max_new_tokens,
                        _given_or_fixed(key, "answer_prefix", c.answer_prefix, slot.prefix_from))
    prefix = slot.answer_prefix if slot.answer_prefix is not None else c.answer_prefix or ""
    return CallSpec(role, prompt, c.max_new_tokens, prefix)


def _given_or_fixed(key: str, field: str, given: str | None, source: str | None) -> str:
    if source is not None:
        if given is not None:
            raise ValueError(f"{key}.{field}: each call takes it from {source}; leave it out")
        return ""
    if given is None:
        raise ValueError(f"{key}.{field}: required")
    return given


class SectionCalls(StrictModel):
    """A params section that makes model calls: ``calls`` checked against the class's
    :data:`CALLS` and read into CallSpecs once, looked up with :meth:`call`."""

    CALLS: ClassVar[dict[str, CallSlot]] = {}
    SECTION: ClassVar[str] = ""

    calls: dict[str, CallParams]

    @model_validator(mode="after")
    def _resolve(self) -> Any:
        resolve_calls(self.SECTION, self.calls, self.CALLS)
        return self

    def call(self, name: str, **changes: Any) -> CallSpec:
        """The declared call ``name``, with ``changes`` (e.g. the caller's role)."""
        spec = _spec(f"{self.SECTION}.calls.{name}", self.calls[name], self.CALLS[name])
        return spec.but(**changes) if changes else spec


def default_calls(**calls: dict[str, Any]) -> Any:
    """A section's ``calls`` field whose code default is the committed calls (a section
    built in code runs as ``dvc repro`` does)."""
    return Field(default_factory=lambda: {n: CallParams(**c) for n, c in calls.items()})


