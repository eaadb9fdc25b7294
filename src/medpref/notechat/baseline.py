"""Single-prompt baselines: the whole dialogue from the note in one call.

The paper compares NoteChat with ChatGPT and GPT-4 prompted once to write the
conversation (Appendix A.2). Each baseline row here is one ``BaselineSpec``: a role
from ``shared.llm.roles`` plus optional overrides of its model config, run through the
same backends, cache and ledger as NoteChat. The output is parsed into alternating
turns by :func:`medpref.turns.text.parse_dialogue`; a note whose answer yields no
usable turn gets an empty dialogue (scored as such) and is recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from medpref.contracts import ClinicalNote, Turn
from medpref.llm.client import LLMClient
from medpref.llm.types import CallSpec
from medpref.notechat.calls import CallLog, step_seed
from medpref.prompts import PromptTemplate
from medpref.turns.text import parse_dialogue


@dataclass
class BaselineResult:
    note_id: str
    turns: list[Turn]
    raw: str
    issues: list[str] = field(default_factory=list)


def single_prompt_dialogues(notes: list[ClinicalNote], client: LLMClient, name: str,
                            template: PromptTemplate, call: CallSpec, max_words: int,
                            temperature: float, seed: int, log: CallLog,
                            max_copied: float = 1.0) -> list[BaselineResult]:
    """One batched call over all notes; each answer parsed into a dialogue."""
    messages = [template.render(note=n.note) for n in notes]
    comps = log.chat_many(client, name, "single_prompt", messages, call,
                          temperature=temperature,
                          seed=step_seed(seed, name))
    results = []
    for note, comp in zip(notes, comps):
        parsed = parse_dialogue(comp.text if comp.ok else "", "doctor", max_words,
                                truncated=comp.finish_reason == "length", max_copied=max_copied)
        issues = ([f"model call failed: {comp.error}"] if not comp.ok else []) + parsed.issues
        log.record(name, "single_prompt", note.id, comp, turns=len(parsed.turns), issues=issues)
        results.append(BaselineResult(note.id, parsed.turns, comp.text, issues))
    return results


def baseline_events(name: str, results: list[BaselineResult]) -> list[dict[str, Any]]:
    return [{"method": name, "segment": r.note_id, "step": "single_prompt",
             "action": "empty dialogue" if not r.turns else "repaired",
             "issues": r.issues, "raw": r.raw} for r in results if r.issues]
