"""Stage 02's tables and headline numbers: the notes overview, NoteChat's run summary,
parser events, model calls per method and step, Table 3's layouts and the run's metrics."""

from __future__ import annotations

from typing import Any

import pandas as pd

from medpref.contracts import ClinicalNote
from medpref.metrics.text import word_count
from medpref.notechat import evaluate
from medpref.notechat.calls import step_label
from medpref.notechat.concepts import ConceptExtractor
from medpref.notechat.config import NoteChatParams
from medpref.notechat.dialogues import StageRun
from medpref.notechat.generate import NoteChatResult
from medpref.notechat.sections import load_soap_headings
from medpref.params import repo_path


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
    return calls_table_of(run.log.rows(), method_wall_s(run))


def method_wall_s(run: StageRun) -> dict[str, float]:
    """Each method's wall time of generation (s, 2 decimals; NaN when it was not timed)."""
    methods = dict.fromkeys(t.method for t in run.log.tallies.values())
    return {m: round(run.log.timings.get(step_label(m), float("nan")), 2) for m in methods}


def calls_table_of(rows: list[dict[str, Any]], wall_s: dict[str, float]) -> pd.DataFrame:
    """:func:`calls_table` from the call log's rows (one per method and step) and each
    method's wall time."""
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    totals = df.groupby("method", sort=False)[["batches", "requests", "model_calls",
                                               "cache_hits", "failures", "tokens_out",
                                               "model_s"]].sum()
    totals["step"] = "total"
    totals["wall_s"] = [wall_s.get(m, float("nan")) for m in totals.index]
    df = pd.concat([df, totals.reset_index()], ignore_index=True)
    cols = ["method", "step", "batches", "requests", "model_calls", "cache_hits", "failures",
            "tokens_out", "model_s", "wall_s"]
    return df[cols]


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
