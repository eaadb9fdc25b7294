"""MTS-Dialog (``mts-dialog/`` under the shared data directory) into contract shapes.

Ids: ``mts-<split>-<ID:04d>`` for the main data set, ``mts-corr-s<system>-<ID:04d>`` for
the correlation study; ``source`` is ``mts-dialog``.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

from medpref.contracts import ClinicalNote, ContractError, Dialogue, ScoredQA, parse_record
from medpref.data.readers import collect_rows, csv_rows, data_root, source_id, split_file
from medpref.data.tagged_dialogue import speaker_labels, turns_of_field

MTS_DIR = Path("mts-dialog", "Main-Dataset")
MTS_SPLITS = {
    "train": "MTS-Dialog-TrainingSet.csv",
    "validation": "MTS-Dialog-ValidationSet.csv",
    "test1": "MTS-Dialog-TestSet-1-MEDIQA-Chat-2023.csv",
    "test2": "MTS-Dialog-TestSet-2-MEDIQA-Sum-2023.csv",
}
MTS_COLUMNS = ("ID", "section_header", "section_text", "dialogue")

MTS_CORR_DIR = Path("mts-dialog", "Correlation-Study")
MTS_CORR_SUMMARIES = "MTS-Dialog-Automatic-Summaries-ValidationSet.csv"
MTS_CORR_SCORES = "MTS-Dialog-Manual-Scores4CorrelationStudy.csv"
MTS_CORR_SUMMARY_COLUMNS = ("ID", "Dialogue", "Reference Summary", "Automatic Summary")
MTS_CORR_SCORE_COLUMNS = ("FactualPrecision", "FactualRecall", "FactualF1",
                          "HallucinationRate", "OmissionRate", "Edit Distance (Correction)")
# Which study column stands in for each contract dimension (see load_mts_correlation_study).
MTS_CORR_HUMAN_MAP = {"acc": "FactualPrecision", "cmp": "FactualRecall",
                      "spc": "1 - Edit Distance (Correction)"}


def _mts_pair(row: dict[str, str], split: str, path: Path, line: int
              ) -> tuple[Dialogue, ClinicalNote]:
    rid = source_id(f"mts-{split}", row["ID"], path, line, "ID")
    turns = turns_of_field(row, "dialogue", path, line)
    header, text = row["section_header"].strip(), row["section_text"].strip()
    if not text:
        raise ContractError(path, line, "section_text", "empty note text")
    meta = {"file": path.name, "line": line, "section_header": header,
            "speakers": speaker_labels(row["dialogue"])}
    dialogue = parse_record(Dialogue, {"id": rid, "turns": turns, "lang": "en",
                                       "source": "mts-dialog", "meta": meta}, path, line)
    note = parse_record(ClinicalNote, {
        "id": rid, "note": f"{header}\n\n{text}" if header else text,
        "sections": {header: text} if header else None, "reference_dialogue": turns,
        "lang": "en", "source": "mts-dialog"}, path, line)
    return dialogue, note


def load_mts_dialog(split: str = "train", root: str | os.PathLike | None = None,
                    limit: int | None = None, skip_bad: bool = False
                    ) -> list[tuple[Dialogue, ClinicalNote]]:
    """MTS-Dialog encounters of one split (train, validation, test1, test2).

    Each row gives a dialogue and a one-section note: ``note`` is the section header
    (e.g. ``GENHX``) and text, ``sections`` is ``{header: text}`` and
    ``reference_dialogue`` the parsed turns. Both share the id ``mts-<split>-<ID:04d>``.
    """
    path = split_file(data_root(root) / MTS_DIR, MTS_SPLITS, split)
    return collect_rows(csv_rows(path, MTS_COLUMNS),
                    lambda line, row: _mts_pair(row, split, path, line), path, limit, skip_bad)


def mts_dialogues(split: str = "train", root: str | os.PathLike | None = None,
                  limit: int | None = None, skip_bad: bool = False) -> list[Dialogue]:
    """The dialogues of :func:`load_mts_dialog`."""
    return [d for d, _ in load_mts_dialog(split, root, limit, skip_bad)]


def mts_notes(split: str = "train", root: str | os.PathLike | None = None,
              limit: int | None = None, skip_bad: bool = False) -> list[ClinicalNote]:
    """The notes of :func:`load_mts_dialog`."""
    return [n for _, n in load_mts_dialog(split, root, limit, skip_bad)]


def _score(row: dict[str, str], column: str, path: Path, line: int) -> float:
    try:
        return float(row[column])
    except ValueError:
        raise ContractError(path, line, column, f"not a number: {row[column]!r}") from None


def _scored_summary(summary: dict[str, str], system: int, scores: dict[str, str],
                    scores_path: Path, scores_line: int) -> dict[str, Any]:
    raw = {c: _score(scores, c, scores_path, scores_line) for c in MTS_CORR_SCORE_COLUMNS}
    human = {"acc": raw["FactualPrecision"], "cmp": raw["FactualRecall"],
             "spc": 1.0 - raw["Edit Distance (Correction)"]}
    sid = int(summary["ID"])
    return {"id": f"mts-corr-s{system}-{sid:04d}", "question": summary["Dialogue"].strip(),
            "reference": summary["Reference Summary"].strip(),
            "response": summary["Automatic Summary"].strip(), "system": f"system-{system}",
            "human": human, "lang": "en", "source": "mts-dialog",
            "dialogue_id": f"mts-validation-{sid:04d}", "human_raw": raw,
            "human_map": dict(MTS_CORR_HUMAN_MAP), "human_scale": [0.0, 1.0]}


def load_mts_correlation_study(root: str | os.PathLike | None = None,
                               limit: int | None = None) -> list[ScoredQA]:
    """MTS-Dialog's metric-correlation study as :class:`ScoredQA` records.

    ``Automatic-Summaries-ValidationSet.csv`` holds 4 automatic summaries of each of the
    100 validation dialogues (columns ID, Dialogue, Reference Summary, Automatic
    Summary), in four blocks of IDs 0..99, one block per system. The scores file has no
    key: its row *i* scores summary row *i* (checked: the 16 summaries identical to their
    reference score precision = recall = 1). The *k*-th occurrence of an ID is
    ``system-k``; the source does not name the systems.

    The study rated facts, not the contract's acc/cmp/spc on a 0-5 scale, so all six
    raw scores (0-1) are kept in ``human_raw`` and the contract fields are proxies, named
    in ``human_map``: ``acc`` = FactualPrecision (share of the summary's facts that are
    correct), ``cmp`` = FactualRecall (share of the reference's facts covered), ``spc`` =
    1 - Edit Distance (Correction) (share of the summary an expert left uncorrected).
    ``spc`` is *not* a specificity rating; it is the study's one human score that is not
    a function or a near-mirror of the other two (FactualF1 is their harmonic mean;
    HallucinationRate = 1 - precision on 85% of rows, OmissionRate = 1 - recall on 72%).
    ``question`` is the dialogue, ``response`` the automatic summary.
    """
    folder = data_root(root) / MTS_CORR_DIR
    summaries_path, scores_path = folder / MTS_CORR_SUMMARIES, folder / MTS_CORR_SCORES
    summaries = list(csv_rows(summaries_path, MTS_CORR_SUMMARY_COLUMNS))
    scores = list(csv_rows(scores_path, MTS_CORR_SCORE_COLUMNS))
    if len(summaries) != len(scores):
        raise ContractError(scores_path, None, "<rows>", f"{len(scores)} score rows for "
                            f"{len(summaries)} summaries in {summaries_path.name}")
    seen: Counter[str] = Counter()
    records = []
    for (line, summary), (score_line, score_row) in zip(summaries, scores):
        if limit is not None and len(records) >= limit:
            break
        if not summary["ID"].strip().isdigit():
            raise ContractError(summaries_path, line, "ID", f"not an integer: {summary['ID']!r}")
        seen[summary["ID"]] += 1
        data = _scored_summary(summary, seen[summary["ID"]], score_row, scores_path, score_line)
        records.append(parse_record(ScoredQA, data, summaries_path, line))
    return records
