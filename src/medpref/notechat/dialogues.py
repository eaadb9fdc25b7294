"""Notes → every system's dialogues: NoteChat's and the single-prompt baselines', their
records in the contract's Dialogue shape, and what the parsers did to model output."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from medpref.contracts import ClinicalNote, Dialogue
from medpref.llm.client import LLMClient
from medpref.notechat.baseline import BaselineResult, baseline_events, single_prompt_dialogues
from medpref.notechat.calls import CallLog, step_label
from medpref.notechat.concepts import ConceptExtractor
from medpref.notechat.config import NoteChatParams
from medpref.notechat.generate import NoteChatResult, generate_notechat
from medpref.notechat.polish import Rubric, load_rubric
from medpref.notechat.roleplay import METHOD
from medpref.notechat.sections import load_soap_headings
from medpref.params import repo_path
from medpref.prompts import PromptTemplate, load_prompt


@dataclass
class StageRun:
    """The notes and every generated system's results; ``log`` holds the raw completions
    and counts and times the model calls (on the ledger and the stage)."""

    notes: list[ClinicalNote]
    notechat: list[NoteChatResult] = field(default_factory=list)
    baselines: dict[str, list[BaselineResult]] = field(default_factory=dict)
    log: CallLog = field(default_factory=CallLog)


def run_notechat(run: StageRun, clients: dict[str, LLMClient], p: NoteChatParams, seed: int,
                 extractor: ConceptExtractor, templates: dict[str, PromptTemplate] | None = None,
                 rubric: Rubric | None = None) -> list[NoteChatResult]:
    with run.log.step(step_label(METHOD)):
        templates = templates or load_templates(p)
        rubric = rubric or load_rubric(repo_path(p.rubric))
        run.notechat = generate_notechat(run.notes, clients, templates, rubric,
                                         load_soap_headings(repo_path(p.soap_headings)), p,
                                         seed, extractor, run.log)
    return run.notechat


def run_baselines(run: StageRun, clients: dict[str, LLMClient], p: NoteChatParams,
                  seed: int) -> dict[str, list[BaselineResult]]:
    template = load_prompt(p.call("baseline").prompt)
    for b in p.baselines:
        with run.log.step(step_label(b.name)):
            run.baselines[b.name] = single_prompt_dialogues(
                run.notes, clients[b.name], b.name, template, p.baseline_call(b),
                p.max_turn_words * 2, p.temperature, seed, run.log, p.max_copied_share)
    return run.baselines


def generate_all(notes: list[ClinicalNote], p: NoteChatParams, clients: dict[str, LLMClient],
                 seed: int, extractor: ConceptExtractor, log: CallLog | None = None
                 ) -> tuple[StageRun, dict[str, PromptTemplate]]:
    """Notes → NoteChat and baseline dialogues (``log``: the stage's, to time the calls)."""
    run = StageRun(notes, log=log or CallLog())
    templates = load_templates(p)
    run_notechat(run, clients, p, seed, extractor, templates)
    run_baselines(run, clients, p, seed)
    return run, templates


def notechat_dialogues(run: StageRun, clients: dict[str, LLMClient],
                       templates: dict[str, PromptTemplate]) -> list[Dialogue]:
    """NoteChat's dialogues in the contract's Dialogue shape (empty ones left out)."""
    models = {a: clients[a].model_id for a in ("planner", "doctor", "patient", "polisher")}
    shas = {k: t.sha for k, t in templates.items()}
    out = []
    for r in run.notechat:
        if not r.turns:
            continue
        out.append(Dialogue(id=f"notechat-{r.note.id}", turns=r.turns, lang=r.note.lang,
                            source="notechat", meta={
                                "note_id": r.note.id, "note_source": r.note.source,
                                "method": "notechat", "models": models, "prompts": shas,
                                "segments": [pl.segment.key for pl in r.plays],
                                "checklist": [k.display() for pl in r.plays
                                              for k in pl.checklist.initial],
                                "checklist_coverage": round(r.checklist_coverage, 4),
                                "coverage_by_round": [round(c, 4) for c in r.coverage_curve()],
                                "rounds": max(pl.rounds for pl in r.plays),
                                "roleplay_turns": len(r.roleplay_turns),
                                "malformed": len([e for e in r.events
                                                  if e.get("action") in ("dropped", "repaired")])}))
    return out


def baseline_dialogues(run: StageRun, clients: dict[str, LLMClient]) -> list[Dialogue]:
    out = []
    for name, results in run.baselines.items():
        for r in results:
            if r.turns:
                out.append(Dialogue(id=f"{name}-{r.note_id}", turns=r.turns, source=name,
                                    meta={"note_id": r.note_id, "method": name,
                                          "model": clients[name].model_id}))
    return out


def all_events(run: StageRun) -> list[dict[str, Any]]:
    """Every repaired/dropped model answer and every polish decision, with its raw text."""
    events = [{"method": "notechat", **e} for r in run.notechat for e in r.events]
    for name, results in run.baselines.items():
        events += baseline_events(name, results)
    return events


def load_templates(p: NoteChatParams) -> dict[str, PromptTemplate]:
    return {step: load_prompt(name) for step, name in p.template_names.items()}
