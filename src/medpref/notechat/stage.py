"""Stage 02 (NoteChat): notes in, NoteChat and baseline dialogues out, evaluated.

:func:`run` does the whole stage for ``notebooks/02_notechat.ipynb``; :func:`run_stage`
chains the same steps for given clients and output folders (tests use it with a
scripted backend). The steps' code is in the domain modules: ``dialogues`` (generation),
``evaluate`` (scores, Table 3's blocks) and ``tables``; the model calls are counted on the
stage's ledger and timed as steps of the stage (``medpref.notechat.calls``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd

from medpref.contracts import ClinicalNote, read_jsonl, write_jsonl
from medpref.llm.client import LLMClient
from medpref.notechat import outputs
from medpref.notechat.calls import CallLog
from medpref.notechat.concepts import ConceptExtractor
from medpref.notechat.config import NoteChatParams
from medpref.notechat.dialogues import (
    StageRun,
    all_events,
    baseline_dialogues,
    generate_all,
    notechat_dialogues,
)
from medpref.notechat.evaluate import Evaluation, evaluate_run, systems
from medpref.notechat.polish import load_rubric
from medpref.notechat.tables import (
    calls_table,
    events_summary,
    headline_metrics,
    mentions_frame,
    notechat_summary,
    notes_overview,
)
from medpref.notechat.turn_quality_validation import validation_report
from medpref.params import repo_path
from medpref.prompts import PromptTemplate
from medpref.turns.turn_quality import (
    quality_per_dialogue,
    quality_per_system,
    table3_block,
)


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


def load_extractor(p: NoteChatParams) -> ConceptExtractor:
    return ConceptExtractor.from_index(repo_path(p.index_dir()), repo_path(p.stopwords),
                                       p.quickumls)


def make_clients(session, p: NoteChatParams) -> dict[str, LLMClient]:
    """NoteChat's four agents and one client per baseline row (by its name)."""
    clients = {agent: session.role(role) for agent, role in p.agent_roles.items()}
    for b in p.baselines:
        clients[b.name] = session.role(b.role, **b.overrides)
    return clients


# -- outputs -----------------------------------------------------------------------------


def output_paths(data: Path, reports: Path) -> dict[str, Path]:
    """Where the stage writes, under its data and reports folders."""
    return {"dialogues": data / "dialogues.jsonl", "baselines": data / "baseline_dialogues.jsonl",
            "trace": data / "trace.jsonl", "records": reports / "records",
            "malformed": reports / "malformed.jsonl",
            "table3": reports / "table3", "table2": reports / "table2",
            "per_dialogue": reports / "per_dialogue", "calls": reports / "calls",
            "turn_quality": reports / "turn_quality",
            "turn_quality_per_dialogue": reports / "turn_quality_per_dialogue",
            "turn_quality_validation": reports / "turn_quality_validation",
            "events": reports / "malformed_summary", "coverage": reports / "coverage",
            "figure": reports / "coverage_by_round.png"}


def write_outputs(run: StageRun, clients: dict[str, LLMClient],
                  templates: dict[str, PromptTemplate], ev: Evaluation, p: NoteChatParams,
                  paths: dict[str, Path], params=None) -> dict[str, Any]:
    """Dialogues and trace (DVC's cache), the records and the tables and figure built from
    them; returns the headline metrics (not written). ``params`` (the stage's; default:
    ``p`` alone) is what the table builders read."""
    params = params if params is not None else SimpleNamespace(notechat=p)
    blocks = ev.blocks(run)
    events = all_events(run)
    quality = quality_per_dialogue(systems(run), {n.id: n.note for n in run.notes})
    per_system = quality_per_system(quality)
    blocks["Turn quality"] = table3_block(per_system)  # beside Table 3's keyword metrics
    write_jsonl(paths["dialogues"], notechat_dialogues(run, clients, templates))
    write_jsonl(paths["baselines"], baseline_dialogues(run, clients))
    write_jsonl(paths["trace"], run.log.trace)
    write_reports(paths["records"].parent, outputs.records_of(run, ev, quality, events),
                  params)
    stats = headline_metrics(run, blocks, events)
    if p.turn_quality_labels:
        stats.update(turn_quality_validation_metrics(repo_path(p.turn_quality_labels)))
    return stats


def write_reports(reports: Path, records: dict[str, list[dict]], params) -> dict[str, Any]:
    """The records (``<reports>/records``), then every table, page and figure built from
    the records as written (the path ``medpref tables`` takes); returns the built objects."""
    outputs.OUTPUTS.write_records(reports, records)
    built = outputs.OUTPUTS.build(outputs.OUTPUTS.load_records(reports), params)
    outputs.OUTPUTS.write_built(reports, built)
    return built


def turn_quality_validation_metrics(labels: Path) -> dict[str, Any]:
    """The overall decision's recall and precision on the test half of the hand-labelled
    turns, for the metrics (the pages are written with the other outputs)."""
    scores, _ = validation_report(labels)
    test = scores[(scores["split"] == "test") & (scores["check"] == "any")].iloc[0]
    return {"turn_quality_test_recall": round(float(test["recall"]), 3),
            "turn_quality_test_precision": round(float(test["precision"]), 3)}


def run_stage(p: NoteChatParams, clients: dict[str, LLMClient], seed: int,
              extractor: ConceptExtractor, paths: dict[str, Path]
              ) -> tuple[StageRun, pd.DataFrame, dict[str, Any]]:
    """The whole stage for given clients and output paths: generate, evaluate, write."""
    run, templates = generate_all(load_notes(p, seed), p, clients, seed, extractor)
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
    def turn_quality(self) -> pd.DataFrame:
        """Turn-quality flags per dialogue (counts of turns), as written."""
        return pd.read_csv(self.paths["turn_quality_per_dialogue"].with_suffix(".csv"))

    @property
    def turn_quality_validation_markdown(self) -> str:
        """The checks' recall and precision on the hand-labelled turns, as written."""
        if not self.p.turn_quality_labels:
            return "No `notechat.turn_quality_labels`: the checks were not measured."
        return self.paths["turn_quality_validation"].with_suffix(".md").read_text()

    @property
    def table2_markdown(self) -> str:
        return self.paths["table2"].with_suffix(".md").read_text()


def run(stage) -> NoteChatOutputs:
    """Stage 02 end to end: notes, NoteChat, baselines, evaluation; writes the outputs."""
    p: NoteChatParams = stage.p
    extractor = load_extractor(p)
    clients = make_clients(stage.llm, p)
    with stage.step("generate"):
        gen, templates = generate_all(load_notes(p, stage.seed), p, clients, stage.seed,
                                      extractor, CallLog(stage.step, stage.timings))
    stage.check_yield(sum(bool(r.turns) for r in gen.notechat), len(gen.notes),
                      what="NoteChat dialogues")
    with stage.step("evaluate"):
        ev = evaluate_run(gen, clients, p, stage.seed, extractor)
    paths = output_paths(stage.data_dir, stage.reports_dir)
    stats = write_outputs(gen, clients, templates, ev, p, paths, stage.params)
    rubric = load_rubric(repo_path(p.rubric))
    out = NoteChatOutputs(p, gen, extractor, ev, paths, stats,
                          {name: c.model_id for name, c in clients.items()},
                          {**{name: t.sha for name, t in templates.items()},
                           "polish_rules": rubric.sha})
    stage.note_provenance(models=out.models, prompts=out.prompts)
    return out
