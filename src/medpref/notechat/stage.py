"""Stage 02 (NoteChat): notes in, NoteChat and baseline dialogues out, evaluated.

:func:`run` does the whole stage for ``notebooks/02_notechat.ipynb``; :func:`run_stage`
chains the same steps for given clients and output folders (tests use it with a
scripted backend).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from medpref.contracts import ClinicalNote, Dialogue, atomic_write_text, read_jsonl, write_jsonl
from medpref.llm.client import LLMClient
from medpref.metrics.text import word_count
from medpref.notechat import evaluate
from medpref.notechat.baseline import BaselineResult, baseline_events, single_prompt_dialogues
from medpref.notechat.calls import CallLog
from medpref.notechat.concepts import ConceptExtractor
from medpref.notechat.config import NoteChatParams
from medpref.notechat.generate import NoteChatResult, generate_notechat
from medpref.notechat.polish import Rubric, load_rubric
from medpref.notechat.sections import load_soap_headings
from medpref.params import repo_path
from medpref.prompts import PromptTemplate, load_prompt
from medpref.reports import save_figure, write_table


# -- inputs ------------------------------------------------------------------------------
def load_notes(p: NoteChatParams, seed: int) -> list[ClinicalNote]:
    """The embedded notes or a real data set through its adapter (read from
    ``source_root``, else the shared data directory), then ``n_notes`` of them."""
    if p.source == "embedded":
        pool = read_jsonl(repo_path(p.notes), ClinicalNote)
    else:
        from medpref.data import adapters

        loader = {"mts_dialog": adapters.mts_notes, "aci_bench": adapters.aci_notes}[p.source]
        root = repo_path(p.source_root) if p.source_root else None   # None: the env var
        pool = loader(split=p.source_split, root=root, limit=p.source_limit)
    if p.sample == "random":
        pool = random.Random(f"{seed}:notechat").sample(pool, min(p.n_notes, len(pool)))
    return pool[:p.n_notes]


def load_templates(p: NoteChatParams) -> dict[str, PromptTemplate]:
    return {step: load_prompt(name) for step, name in p.prompts.model_dump().items()}


def load_extractor(p: NoteChatParams) -> ConceptExtractor:
    return ConceptExtractor.from_index(repo_path(p.index_dir()), repo_path(p.stopwords),
                                       p.quickumls)


def notes_overview(notes: list[ClinicalNote], extractor: ConceptExtractor,
                   p: NoteChatParams) -> pd.DataFrame:
    """Per note: length, sections, reference turns, concepts (negated), SOAP segments."""
    from medpref.notechat.sections import note_segments

    headings = load_soap_headings(repo_path(p.soap_headings))
    rows = []
    for note, mentions in zip(notes, extractor.mentions_many([n.note for n in notes])):
        rows.append({"note_id": note.id, "words": word_count(note.note),
                     "sections": len(note.sections or {}),
                     "reference_turns": len(note.reference_dialogue or []),
                     "concepts": len({m.cui for m in mentions}),
                     "negated_mentions": sum(m.negated for m in mentions),
                     "segments": len(note_segments(note, headings, p.long_note_words))})
    return pd.DataFrame(rows)


def mentions_frame(extractor: ConceptExtractor, text: str) -> pd.DataFrame:
    """The concept mentions of a text, for display."""
    return pd.DataFrame([{"cui": m.cui, "text": m.text, "negated": m.negated,
                          "similarity": round(m.similarity, 3)} for m in extractor.mentions(text)],
                        columns=["cui", "text", "negated", "similarity"])


def make_clients(session, p: NoteChatParams) -> dict[str, LLMClient]:
    """NoteChat's four agents and one client per baseline row (by its name)."""
    clients = {agent: session.role(role) for agent, role in p.roles.model_dump().items()}
    for b in p.baselines:
        clients[b.name] = session.role(b.role, **b.overrides)
    return clients


# -- generation --------------------------------------------------------------------------
@dataclass
class StageRun:
    notes: list[ClinicalNote]
    notechat: list[NoteChatResult] = field(default_factory=list)
    baselines: dict[str, list[BaselineResult]] = field(default_factory=dict)
    log: CallLog = field(default_factory=CallLog)
    wall_s: dict[str, float] = field(default_factory=dict)


def run_notechat(run: StageRun, clients: dict[str, LLMClient], p: NoteChatParams, seed: int,
                 extractor: ConceptExtractor, templates: dict[str, PromptTemplate] | None = None,
                 rubric: Rubric | None = None) -> list[NoteChatResult]:
    t0 = time.perf_counter()
    templates = templates or load_templates(p)
    rubric = rubric or load_rubric(repo_path(p.rubric))
    run.notechat = generate_notechat(run.notes, clients, templates, rubric,
                                     load_soap_headings(repo_path(p.soap_headings)), p, seed,
                                     extractor, run.log)
    run.wall_s[evaluate.NOTECHAT] = round(time.perf_counter() - t0, 2)
    return run.notechat


def notechat_summary(results: list[NoteChatResult]) -> pd.DataFrame:
    """Per note: checklist size, rounds played, coverage reached, turns before/after polish."""
    return pd.DataFrame([{
        "note_id": r.note.id, "segments": len(r.plays),
        "checklist": r.checklist_size,
        "rounds": max(pl.rounds for pl in r.plays),
        "coverage_%": round(100 * r.checklist_coverage, 1),
        "roleplay_turns": len(r.roleplay_turns), "final_turns": len(r.turns),
        "polish_accepted": sum(e["action"] == "accepted" for e in r.polish_events)}
        for r in results])


def run_baselines(run: StageRun, clients: dict[str, LLMClient], p: NoteChatParams,
                  seed: int) -> dict[str, list[BaselineResult]]:
    template = load_prompt(p.prompts.single_prompt)
    for b in p.baselines:
        t0 = time.perf_counter()
        run.baselines[b.name] = single_prompt_dialogues(
            run.notes, clients[b.name], b.name, template, p.baseline_max_new_tokens,
            p.max_turn_words * 2, p.temperature, seed, run.log, p.max_copied_share)
        run.wall_s[b.name] = round(time.perf_counter() - t0, 2)
    return run.baselines


def systems(run: StageRun) -> dict[str, dict[str, list]]:
    """Every system's dialogue per note, in Table 3's row order (baselines, NoteChat, Human)."""
    out: dict[str, dict[str, list]] = {
        name: {r.note_id: r.turns for r in results} for name, results in run.baselines.items()}
    out[evaluate.NOTECHAT] = {r.note.id: r.turns for r in run.notechat}
    out[evaluate.HUMAN] = {n.id: list(n.reference_dialogue or []) for n in run.notes}
    return out


# -- outputs -----------------------------------------------------------------------------
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


def events_summary(events: list[dict[str, Any]]) -> pd.DataFrame:
    """Counts by method, step/role and action (what the parsers did to model output)."""
    rows = [{"method": e["method"], "step": e.get("role") or e.get("step") or
             ("polish" if "iteration" in e else ""), "action": e["action"]} for e in events]
    if not rows:
        return pd.DataFrame(columns=["method", "step", "action", "count"])
    return (pd.DataFrame(rows).value_counts().rename("count").reset_index()
            .sort_values(["method", "step", "action"]).reset_index(drop=True))


def calls_table(run: StageRun) -> pd.DataFrame:
    """Model calls, cache hits, tokens and wall time per method and step, with totals."""
    df = pd.DataFrame(run.log.rows())
    if df.empty:
        return df
    totals = df.groupby("method", sort=False)[["batches", "requests", "model_calls",
                                               "cache_hits", "failures", "tokens_out",
                                               "model_s"]].sum()
    totals["step"] = "total"
    totals["wall_s"] = [run.wall_s.get(m if m != "notechat" else evaluate.NOTECHAT, float("nan"))
                        for m in totals.index]
    df = pd.concat([df, totals.reset_index()], ignore_index=True)
    cols = ["method", "step", "batches", "requests", "model_calls", "cache_hits", "failures",
            "tokens_out", "model_s", "wall_s"]
    return df[cols]


def output_paths(data: Path, reports: Path) -> dict[str, Path]:
    """Where the stage writes, under its data and reports folders."""
    return {"dialogues": data / "dialogues.jsonl", "baselines": data / "baseline_dialogues.jsonl",
            "trace": data / "trace.jsonl", "malformed": reports / "malformed.jsonl",
            "table3": reports / "table3", "table2": reports / "table2",
            "per_dialogue": reports / "per_dialogue", "calls": reports / "calls",
            "events": reports / "malformed_summary", "coverage": reports / "coverage",
            "figure": reports / "coverage_by_round.png"}


def table3_notes(run: StageRun, clients: dict[str, LLMClient], p: NoteChatParams) -> list[str]:
    """What the rows of Table 3 are, where they differ from the paper's."""
    notes = []
    first_of: dict[str, str] = {}
    for b in p.baselines:
        model = clients[b.name].model_id
        if model in first_of:
            notes.append(f"`{b.name}` is `{model}`, the same model as `{first_of[model]}` "
                         f"under another sampling seed (not the paper's GPT-4; point "
                         f"`notechat.baselines` overrides at a real backend to make it one).")
        else:
            first_of[model] = b.name
            notes.append(f"`{b.name}` is a single prompt to `{model}` (the paper: ChatGPT/GPT-4).")
    split = sum(len(r.plays) > 1 for r in run.notechat)
    notes.append(f"NoteChat's Combine step (joining the per-SOAP-part dialogues of notes over "
                 f"{p.long_note_words} words; {split} of {len(run.notechat)} notes here) is "
                 f"rule-based (medpref.notechat.sections.combine_parts), not the paper's LLM "
                 f"Combine prompt.")
    notes.append("Diversity: Texygen self-BLEU-4 across each system's utterances over all "
                 "its dialogues (sacrebleu 13a/zh tokens, exp smoothing); lower = more diverse.")
    return notes


def table3_markdown(blocks: dict[str, pd.DataFrame], notes: list[str] | None = None) -> str:
    """Table 3 as the paper lays it out: four blocks, one under the other, then notes."""
    parts = [df.to_markdown(index=False, floatfmt=".3f" if block == "Diversity" else ".2f")
             for block, df in blocks.items()]
    text = "\n\n".join(parts) + "\n"
    return text + ("\n" + "\n".join(f"- {n}" for n in notes) + "\n" if notes else "")


def table3_wide(blocks: dict[str, pd.DataFrame]) -> pd.DataFrame:
    frames = [df.rename(columns={block: "system"}).set_index("system")
              for block, df in blocks.items()]
    return pd.concat(frames, axis=1).reset_index()


def headline_metrics(run: StageRun, blocks: dict[str, pd.DataFrame],
                     events: list[dict[str, Any]]) -> dict[str, Any]:
    """Scores and counts of the run (wall times go to timings.json and calls.csv)."""
    nc = blocks["Similarity"].set_index("Similarity").loc[evaluate.NOTECHAT]
    div = blocks["Diversity"].set_index("Diversity").loc[evaluate.NOTECHAT]
    coverage = [r.checklist_coverage for r in run.notechat if r.checklist_size]
    calls = calls_table(run)
    totals = (calls[calls["step"] == "total"].set_index("method") if not calls.empty
              else pd.DataFrame(columns=["model_calls", "requests"]))
    total = totals["model_calls"]
    return {
        "notes": len(run.notes),
        "notechat_dialogues": sum(bool(r.turns) for r in run.notechat),
        "notechat_rouge1": round(float(nc["ROUGE1"]), 3),
        "notechat_sbleu_all": None if pd.isna(div["all-sbleu↓"]) else round(
            float(div["all-sbleu↓"]), 4),
        "notechat_checklist_coverage": round(sum(coverage) / max(1, len(coverage)), 4),
        "notes_without_concepts": sum(not r.checklist_size for r in run.notechat),
        "notechat_model_calls": int(total.get("notechat", 0)),
        "baseline_model_calls": int(total.drop("notechat", errors="ignore").sum()),
        "requests": {m: int(n) for m, n in totals["requests"].items()},
        "malformed_dropped": sum(e["action"] in ("dropped", "empty dialogue") for e in events),
        "malformed_repaired": sum(e["action"] == "repaired" for e in events),
        "polish_accepted": sum(e["action"] == "accepted" for e in events),
        "polish_kept_original": sum(e["action"] == "kept original" for e in events),
    }


@dataclass
class Evaluation:
    """Scores of every system: per dialogue, corpus diversity, the tables' notes."""

    per_dialogue: pd.DataFrame
    diversity: dict[str, dict[str, float | None]]
    notes: list[str]

    def blocks(self, run: StageRun) -> dict[str, pd.DataFrame]:
        return evaluate.table3_blocks(self.per_dialogue, list(systems(run)), self.diversity)


def evaluate_run(run: StageRun, clients: dict[str, LLMClient], p: NoteChatParams, seed: int,
                 extractor: ConceptExtractor) -> Evaluation:
    dialogues = systems(run)
    return Evaluation(evaluate.score_systems(dialogues, run.notes, extractor),
                      evaluate.system_diversity(dialogues, run.notes, p.self_bleu_sample, seed),
                      table3_notes(run, clients, p))


def write_outputs(run: StageRun, clients: dict[str, LLMClient],
                  templates: dict[str, PromptTemplate], ev: Evaluation, p: NoteChatParams,
                  paths: dict[str, Path]) -> dict[str, Any]:
    """Dialogues, trace, tables and figure; returns the headline metrics (not written)."""
    order = list(systems(run))
    blocks = ev.blocks(run)
    events = all_events(run)
    write_jsonl(paths["dialogues"], notechat_dialogues(run, clients, templates))
    write_jsonl(paths["baselines"], baseline_dialogues(run, clients))
    write_jsonl(paths["trace"], run.log.trace)
    write_jsonl(paths["malformed"], events)
    write_table(table3_wide(blocks), paths["table3"])
    atomic_write_text(paths["table3"].with_suffix(".md"), table3_markdown(blocks, ev.notes))
    write_table(evaluate.table2(ev.per_dialogue, order), paths["table2"], floatfmt=".2f")
    write_table(ev.per_dialogue, paths["per_dialogue"])
    write_table(calls_table(run), paths["calls"], floatfmt=".2f")
    write_table(events_summary(events), paths["events"])
    coverage = evaluate.coverage_frame({r.note.id: r.coverage_curve() for r in run.notechat
                                        if r.checklist_size})
    write_table(coverage, paths["coverage"])
    save_figure(evaluate.coverage_figure(coverage, p.max_rounds), paths["figure"])
    return headline_metrics(run, blocks, events)


def generate_all(p: NoteChatParams, clients: dict[str, LLMClient], seed: int,
                 extractor: ConceptExtractor) -> tuple[StageRun, dict[str, PromptTemplate]]:
    """Notes → NoteChat and baseline dialogues."""
    run = StageRun(load_notes(p, seed))
    templates = load_templates(p)
    run_notechat(run, clients, p, seed, extractor, templates)
    run_baselines(run, clients, p, seed)
    return run, templates


def run_stage(p: NoteChatParams, clients: dict[str, LLMClient], seed: int,
              extractor: ConceptExtractor, paths: dict[str, Path]
              ) -> tuple[StageRun, pd.DataFrame, dict[str, Any]]:
    """The whole stage for given clients and output paths: generate, evaluate, write."""
    run, templates = generate_all(p, clients, seed, extractor)
    ev = evaluate_run(run, clients, p, seed, extractor)
    stats = write_outputs(run, clients, templates, ev, p, paths)
    return run, ev.per_dialogue, stats


@dataclass
class NoteChatOutputs:
    """What stage 02 shows: the run, its evaluation, tables and the headline metrics."""

    p: NoteChatParams
    run: StageRun
    extractor: ConceptExtractor
    evaluation: Evaluation
    paths: dict[str, Path]
    metrics: dict[str, Any]
    models: dict[str, str]
    prompts: dict[str, str]

    @property
    def notes_overview(self) -> pd.DataFrame:
        return notes_overview(self.run.notes, self.extractor, self.p)

    @property
    def first_note_mentions(self) -> pd.DataFrame:
        return mentions_frame(self.extractor, self.run.notes[0].note)

    @property
    def summary(self) -> pd.DataFrame:
        return notechat_summary(self.run.notechat)

    @property
    def events(self) -> pd.DataFrame:
        return events_summary(all_events(self.run))

    @property
    def calls(self) -> pd.DataFrame:
        return calls_table(self.run)

    def example_dialogue(self, max_turns: int = 12) -> str:
        """The first note's checklist, coverage curve and first turns, as text."""
        first = self.run.notechat[0]
        lines = ["checklist: " + ", ".join(k.display() for pl in first.plays
                                           for k in pl.checklist.initial),
                 f"coverage by round: {[round(c, 2) for c in first.coverage_curve()]}", ""]
        lines += [f"{t.role:>8}: {t.text}" for t in first.turns[:max_turns]]
        for name, results in self.run.baselines.items():
            lines += ["", f"[{name}] {results[0].note_id}"]
            lines += [f"{t.role:>8}: {t.text}" for t in results[0].turns[:6]]
        return "\n".join(lines)

    @property
    def table3_markdown(self) -> str:
        return self.paths["table3"].with_suffix(".md").read_text()

    @property
    def table2_markdown(self) -> str:
        return self.paths["table2"].with_suffix(".md").read_text()


def run(stage) -> NoteChatOutputs:
    """Stage 02 end to end: notes, NoteChat, baselines, evaluation; writes the outputs."""
    p: NoteChatParams = stage.p
    extractor = load_extractor(p)
    clients = make_clients(stage.llm, p)
    with stage.step("generate"):
        gen, templates = generate_all(p, clients, stage.seed, extractor)
    stage.check_yield(sum(bool(r.turns) for r in gen.notechat), len(gen.notes),
                      what="NoteChat dialogues")
    with stage.step("evaluate"):
        ev = evaluate_run(gen, clients, p, stage.seed, extractor)
    paths = output_paths(stage.data_dir, stage.reports_dir)
    stats = write_outputs(gen, clients, templates, ev, p, paths)
    rubric = load_rubric(repo_path(p.rubric))
    return NoteChatOutputs(p, gen, extractor, ev, paths, stats,
                           {name: c.model_id for name, c in clients.items()},
                           {**{name: t.sha for name, t in templates.items()},
                            "polish_rules": rubric.sha})
