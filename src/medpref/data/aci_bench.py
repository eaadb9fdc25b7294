"""ACI-Bench (``aci-bench/challenge_data`` under the shared data directory) into contracts.

Ids: ``aci-<split>-<encounter_id>``; ``source`` is ``aci-bench``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from medpref.contracts import ClinicalNote, ContractError, Dialogue, parse_record
from medpref.data.readers import collect_rows, csv_rows, data_root, source_id, split_file
from medpref.data.tagged_dialogue import speaker_labels, turns_of_field

ACI_DIR = Path("aci-bench", "challenge_data")
ACI_SPLITS = {"train": "train.csv", "test1": "clinicalnlp_taskB_test1.csv"}
ACI_COLUMNS = ("encounter_id", "dialogue", "note")


_HEADING = re.compile(r"[A-Z][A-Z &/'-]*[A-Z]:?")


def _is_heading(lines: list[str], i: int) -> bool:
    """An upper-case line standing alone between blank lines (so 'HIV' in a list or
    'MSK:' starting an exam line are not headings)."""
    blank_before = i == 0 or not lines[i - 1].strip()
    blank_after = i == len(lines) - 1 or not lines[i + 1].strip()
    return blank_before and blank_after and bool(_HEADING.fullmatch(lines[i].strip()))


def split_note_sections(note: str) -> dict[str, str] | None:
    """Split a note on its upper-case headings (``CHIEF COMPLAINT``, ``HPI:``, ...).

    Returns ``{heading: body}`` in order (a repeated heading's bodies are joined; text
    before the first heading goes under ``PREAMBLE``), or None when there is no heading.
    """
    lines = note.splitlines()
    bodies: dict[str, list[str]] = {"PREAMBLE": []}
    current = "PREAMBLE"
    for i, line in enumerate(lines):
        if _is_heading(lines, i):
            current = line.strip().rstrip(":").strip()
            bodies.setdefault(current, [])
        else:
            bodies[current].append(line)
    sections = {k: "\n".join(v).strip() for k, v in bodies.items()}
    if len(sections) == 1:
        return None
    if not sections["PREAMBLE"]:
        del sections["PREAMBLE"]
    return sections


def _aci_pair(row: dict[str, str], split: str, path: Path, line: int
              ) -> tuple[Dialogue, ClinicalNote]:
    rid = source_id(f"aci-{split}", row["encounter_id"], path, line, "encounter_id")
    turns = turns_of_field(row, "dialogue", path, line)
    note = row["note"].strip()
    if not note:
        raise ContractError(path, line, "note", "empty note")
    meta = {"file": path.name, "line": line, "encounter_id": row["encounter_id"].strip(),
            "subset": row.get("dataset", "").strip(), "speakers": speaker_labels(row["dialogue"])}
    dialogue = parse_record(Dialogue, {"id": rid, "turns": turns, "lang": "en",
                                       "source": "aci-bench", "meta": meta}, path, line)
    clinical = parse_record(ClinicalNote, {
        "id": rid, "note": note, "sections": split_note_sections(note),
        "reference_dialogue": turns, "lang": "en", "source": "aci-bench"}, path, line)
    return dialogue, clinical


def load_aci_bench(split: str = "train", root: str | os.PathLike | None = None,
                   limit: int | None = None, skip_bad: bool = False
                   ) -> list[tuple[Dialogue, ClinicalNote]]:
    """ACI-Bench challenge encounters of one split (train, test1 = clinicalnlp_taskB_test1).

    Dialogue tags ``[doctor]``, ``[patient]``, ``[patient_guest]`` (the last spoken for
    the patient); the note keeps its full text and ``sections`` its headed parts. Both
    share the id ``aci-<split>-<encounter_id>``; ``meta.subset`` is the source corpus
    (aci, virtassist, virtscribe).
    """
    path = split_file(data_root(root) / ACI_DIR, ACI_SPLITS, split)
    return collect_rows(csv_rows(path, ACI_COLUMNS),
                    lambda line, row: _aci_pair(row, split, path, line), path, limit, skip_bad)


def aci_dialogues(split: str = "train", root: str | os.PathLike | None = None,
                  limit: int | None = None, skip_bad: bool = False) -> list[Dialogue]:
    """The dialogues of :func:`load_aci_bench`."""
    return [d for d, _ in load_aci_bench(split, root, limit, skip_bad)]


def aci_notes(split: str = "train", root: str | os.PathLike | None = None,
              limit: int | None = None, skip_bad: bool = False) -> list[ClinicalNote]:
    """The notes of :func:`load_aci_bench`."""
    return [n for _, n in load_aci_bench(split, root, limit, skip_bad)]
