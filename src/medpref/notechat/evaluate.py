"""Stage 02's evaluation: per-dialogue scores, then Table 2 and Table 3 of the paper.

Every system (the single-prompt baselines, NoteChat, and the human reference dialogue)
is scored per note; the tables are means over notes. Table 3 keeps the paper's four
blocks with their columns; the human reference appears only where the paper shows it
(extractiveness), since its similarity and factuality against itself are trivially 100.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from medpref.contracts import ClinicalNote, Turn
from medpref.llm.client import LLMClient
from medpref.notechat import metrics
from medpref.notechat.concepts import ConceptExtractor
from medpref.notechat.config import NoteChatParams
from medpref.notechat.dialogues import StageRun

HUMAN = "Human"
NOTECHAT = "NoteChat"

#: Table 3 blocks: (block, [(per-dialogue column, paper's column name), ...]).
TABLE3 = [
    ("Similarity", [("rouge1", "ROUGE1"), ("rouge2", "ROUGE2"), ("rougeLsum", "ROUGELsum")]),
    ("Factuality", [("concept_p", "Concept-P"), ("concept_r", "Concept-R"),
                    ("concept_f1", "Concept-F1")]),
    ("Extractiveness", [("src_rouge1", "src->hypo R1"), ("src_rouge2", "src->hypo R2"),
                        ("src_rougeL", "src->hypo R-L")]),
    ("Diversity", [("sbleu_all", "all-sbleu↓"), ("sbleu_doctor", "physician-sbleu↓"),
                   ("sbleu_patient", "patient-sbleu↓")]),
]
#: Table 2 rows: (per-dialogue column, label).
TABLE2 = [("utterances", "utterances / dialogue"), ("words", "words / dialogue"),
          ("medical", "medical concepts / dialogue"),
          ("doctor_words_per_utt", "words / physician utterance"),
          ("patient_words_per_utt", "words / patient utterance"),
          ("doctor_term_density", "physician medical term density %"),
          ("patient_term_density", "patient medical term density %")]


def score_dialogue(turns: Sequence[Turn], note: ClinicalNote,
                   extractor: ConceptExtractor) -> dict[str, float | None]:
    """All per-dialogue scores of one generated (or reference) dialogue."""
    per_turn = extractor.mentions_many([t.text for t in turns])
    cuis = {m.cui for ms in per_turn for m in ms}
    note_cuis = extractor.cuis(note.note)
    text = metrics.dialogue_text(turns)
    row: dict[str, float | None] = {}
    if note.reference_dialogue:
        ref = note.reference_dialogue
        row.update(metrics.rouge_f1(metrics.dialogue_text(ref), text))
        ref_cuis = {m.cui for ms in extractor.mentions_many([t.text for t in ref]) for m in ms}
        row.update(metrics.concept_prf(cuis, ref_cuis))
    src = metrics.rouge_f1(note.note, text)
    row.update({"src_rouge1": src["rouge1"], "src_rouge2": src["rouge2"],
                "src_rougeL": src["rougeL"]})
    row.update(metrics.dialogue_stats(turns, [len(ms) for ms in per_turn]))
    row["note_concept_recall"] = (100.0 * len(cuis & note_cuis) / len(note_cuis)
                                  if note_cuis else None)
    return row


def score_systems(systems: Mapping[str, Mapping[str, list[Turn]]],
                  notes: Sequence[ClinicalNote], extractor: ConceptExtractor) -> pd.DataFrame:
    """One row per (system, note): ``systems[name][note_id]`` is that system's dialogue."""
    rows = []
    for name, dialogues in systems.items():
        for note in notes:
            turns = dialogues.get(note.id, [])
            rows.append({"system": name, "note_id": note.id,
                         **score_dialogue(turns, note, extractor)})
    return pd.DataFrame(rows)


def _mean(values: pd.Series) -> float:
    clean = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return sum(clean) / len(clean) if clean else float("nan")


def system_diversity(systems: Mapping[str, Mapping[str, list[Turn]]], notes: Sequence[ClinicalNote],
                     sample: int | None, seed: int) -> dict[str, dict[str, float | None]]:
    """Per system: Texygen self-BLEU across all its dialogues' utterances (all/doctor/patient)."""
    return {name: metrics.corpus_diversity([dialogues.get(n.id, []) for n in notes], sample, seed)
            for name, dialogues in systems.items()}


def _value(v: float | None) -> float:
    return float("nan") if v is None else v


def table3_blocks(per_dialogue: pd.DataFrame, order: Sequence[str],
                  diversity: Mapping[str, Mapping[str, float | None]] | None = None
                  ) -> dict[str, pd.DataFrame]:
    """The paper's Table 3: one frame per block, rows = systems; means over notes, except
    Diversity, a corpus-level score per system (``diversity``, from :func:`system_diversity`)."""
    blocks = {}
    for block, columns in TABLE3:
        rows = []
        for system in order:
            if system == HUMAN and block != "Extractiveness":
                continue
            part = per_dialogue[per_dialogue["system"] == system]
            if block == "Diversity":
                div = (diversity or {}).get(system, {})
                values = {label: _value(div.get(col)) for col, label in columns}
            else:
                values = {label: _mean(part[col]) if col in part else float("nan")
                          for col, label in columns}
            rows.append({block: system, **values})
        blocks[block] = pd.DataFrame(rows)
    return blocks


def table2(per_dialogue: pd.DataFrame, order: Sequence[str]) -> pd.DataFrame:
    """The paper's Table 2 (statistics), columns = systems, plus the dialogue count."""
    rows = [{"statistic": "dialogues", **{s: int((per_dialogue["system"] == s).sum())
                                          for s in order}}]
    for col, label in TABLE2:
        rows.append({"statistic": label, **{
            s: _mean(per_dialogue.loc[per_dialogue["system"] == s, col]) for s in order}})
    return pd.DataFrame(rows)


def coverage_frame(curves: Mapping[str, Sequence[float]]) -> pd.DataFrame:
    """Long frame (note, round, coverage %) of checklist coverage after each round.

    A note that finished early keeps its final coverage in later rounds, so the mean at
    every round is over all notes.
    """
    last = max((len(c) for c in curves.values()), default=0)
    return pd.DataFrame([{"note_id": key, "round": r,
                          "coverage": 100.0 * curve[min(r, len(curve) - 1)]}
                         for key, curve in curves.items() if curve for r in range(last)],
                        columns=["note_id", "round", "coverage"])


def coverage_figure(frame: pd.DataFrame, max_rounds: int):
    """Checklist coverage vs role-play round: each note thin, the mean bold."""
    import seaborn as sns

    from medpref.reports import figure

    fig, ax = figure(figsize=(6, 4))
    if not frame.empty:
        sns.lineplot(data=frame, x="round", y="coverage", units="note_id", estimator=None,
                     color="0.75", linewidth=0.8, ax=ax)
        sns.lineplot(data=frame, x="round", y="coverage", errorbar=("ci", 95), seed=0, color="C0",
                     linewidth=2.2, marker="o", ax=ax, label="mean (95% CI)")
    ax.set(xlabel="role-play round", ylabel="checklist coverage (%)", ylim=(0, 100),
           xlim=(0, max_rounds), title="NoteChat: checklist coverage by round")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def systems(run: StageRun) -> dict[str, dict[str, list]]:
    """Every system's dialogue per note, in Table 3's row order (baselines, NoteChat, Human)."""
    out: dict[str, dict[str, list]] = {
        name: {r.note_id: r.turns for r in results} for name, results in run.baselines.items()}
    out[NOTECHAT] = {r.note.id: r.turns for r in run.notechat}
    out[HUMAN] = {n.id: list(n.reference_dialogue or []) for n in run.notes}
    return out


@dataclass
class Evaluation:
    """Scores of every system: per dialogue, corpus diversity, the tables' notes."""

    per_dialogue: pd.DataFrame
    diversity: dict[str, dict[str, float | None]]
    notes: list[str]

    def blocks(self, run: StageRun) -> dict[str, pd.DataFrame]:
        return table3_blocks(self.per_dialogue, list(systems(run)), self.diversity)


def evaluate_run(run: StageRun, clients: dict[str, LLMClient], p: NoteChatParams, seed: int,
                 extractor: ConceptExtractor) -> Evaluation:
    dialogues = systems(run)
    return Evaluation(score_systems(dialogues, run.notes, extractor),
                      system_diversity(dialogues, run.notes, p.self_bleu_sample, seed),
                      table3_notes(run, clients, p))


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
