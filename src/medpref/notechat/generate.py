"""The NoteChat pipeline: segments → planning → role-play → combine → polish.

:func:`generate_notechat` runs all notes together, so every step is one batched call per
role (planning, then per round doctor and patient, then per polish pass).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from medpref.contracts import ClinicalNote, Turn
from medpref.llm.client import LLMClient
from medpref.notechat.calls import CallLog, step_seed
from medpref.notechat.concepts import ConceptExtractor
from medpref.notechat.config import NoteChatParams
from medpref.notechat.planning import checklist_from_draft, keyword_list, note_keywords
from medpref.notechat.polish import Rubric, polish_dialogues
from medpref.notechat.roleplay import METHOD, RolePlay, run_roleplay
from medpref.notechat.sections import Segment, combine_parts, note_segments
from medpref.prompts import PromptTemplate


@dataclass
class NoteChatResult:
    """One note's NoteChat dialogue and how it came about."""

    note: ClinicalNote
    plays: list[RolePlay]
    drafts: dict[str, str]
    roleplay_turns: list[Turn]
    turns: list[Turn] = field(default_factory=list)
    combine_notes: list[str] = field(default_factory=list)
    polish_events: list[dict[str, Any]] = field(default_factory=list)

    def coverage_curve(self) -> list[float]:
        """Checklist coverage of the note after each round (segments pooled)."""
        longest = max(len(pl.coverage) for pl in self.plays)
        total = sum(len(pl.checklist.initial) for pl in self.plays)
        if not total:
            return [1.0] * longest
        curve = []
        for r in range(longest):
            covered = sum(len(pl.checklist.initial) * pl.coverage[min(r, len(pl.coverage) - 1)]
                          for pl in self.plays)
            curve.append(covered / total)
        return curve

    @property
    def checklist_size(self) -> int:
        return sum(len(pl.checklist.initial) for pl in self.plays)

    @property
    def checklist_coverage(self) -> float:
        return self.coverage_curve()[-1]

    @property
    def events(self) -> list[dict[str, Any]]:
        return [e for pl in self.plays for e in pl.events] + self.polish_events


def plan_segments(segments: list[Segment], planner: LLMClient, template: PromptTemplate,
                  p: NoteChatParams,
                  seed: int, extractor: ConceptExtractor,
                  log: CallLog) -> tuple[list[RolePlay], dict[str, str]]:
    """Draft a dialogue per segment around its keywords; checklist = draft order."""
    keywords = [note_keywords(ms) for ms in extractor.mentions_many([s.text for s in segments])]
    messages = [template.render(note=s.text, keywords=keyword_list(kws, p.max_plan_keywords))
                for s, kws in zip(segments, keywords)]
    comps = log.chat_many(planner, METHOD, "planning", messages, p.call("planning"),
                          temperature=p.temperature,
                          seed=step_seed(seed, "planning"))
    drafts = [f"Doctor: {c.text}" if c.ok else "" for c in comps]
    plays = []
    for seg, kws, comp, draft_mentions in zip(segments, keywords, comps,
                                             extractor.mentions_many(drafts)):
        checklist = checklist_from_draft(draft_mentions, kws, keep_missing=p.checklist_keep_missing)
        in_draft = len({m.cui for m in draft_mentions} & {k.cui for k in kws})
        log.record(METHOD, "planning", seg.key, comp, keywords=len(kws),
                   keywords_in_draft=in_draft, checklist=[k.display() for k in checklist.initial])
        plays.append(RolePlay(seg, checklist))
    return plays, {seg.key: d for seg, d in zip(segments, drafts)}


def generate_notechat(notes: list[ClinicalNote], clients: dict[str, LLMClient],
                      templates: dict[str, PromptTemplate], rubric: Rubric,
                      headings: dict[str, list[str]], p: NoteChatParams, seed: int,
                      extractor: ConceptExtractor, log: CallLog) -> list[NoteChatResult]:
    """NoteChat dialogues for all notes (one batched call per role and step)."""
    segments = [s for n in notes for s in note_segments(n, headings, p.long_note_words)]
    plays, drafts = plan_segments(segments, clients["planner"], templates["planning"], p,
                                  seed, extractor, log)
    run_roleplay(plays, clients["doctor"], clients["patient"], templates, p, seed,
                 extractor, log)
    results = []
    for note in notes:
        mine = [pl for pl in plays if pl.segment.note_id == note.id]
        turns, combine_notes = combine_parts([pl.turns for pl in mine])
        results.append(NoteChatResult(note, mine, {pl.segment.key: drafts[pl.segment.key]
                                                   for pl in mine}, turns,
                                      combine_notes=combine_notes))
    polished, events = polish_dialogues(
        [r.roleplay_turns for r in results], [n.note for n in notes], [n.id for n in notes],
        clients["polisher"], templates["polish"], rubric, p, seed, extractor, log)
    for result, turns in zip(results, polished):
        result.turns = turns
        result.polish_events = [e for e in events if e["segment"] == result.note.id]
    return results
