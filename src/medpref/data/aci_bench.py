"""ACI-Bench (``aci-bench/challenge_data`` under the shared data directory) into contracts.

Every published split by name (:data:`ACI_SPLITS`): ``train`` (67 encounters), ``valid``
(20), ``test1`` (MEDIQA-Chat task B, 40), ``test2`` (MEDIQA-Chat task C, 40) and ``test3``
(MEDIQA-Sum task C, 40), each with its metadata file (:data:`ACI_METADATA`), whose row
is joined by ``encounter_id`` into the dialogue's ``meta.metadata``.

Ids: ``aci-<split>-<encounter_id>``; ``source`` is ``aci-bench``.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from medpref.contracts import ClinicalNote, ContractError, Dialogue, parse_record
from medpref.data.readers import collect_rows, csv_rows, data_root, source_id, split_file
from medpref.data.tagged_dialogue import speaker_labels, turns_of_field

_log = logging.getLogger(__name__)

ACI_DIR = Path("aci-bench", "challenge_data")
ACI_SPLITS = {"train": "train.csv", "valid": "valid.csv",
              "test1": "clinicalnlp_taskB_test1.csv", "test2": "clinicalnlp_taskC_test2.csv",
              "test3": "clef_taskC_test3.csv"}
ACI_METADATA = {split: name.removesuffix(".csv") + "_metadata.csv"
                for split, name in ACI_SPLITS.items()}
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


def load_aci_metadata(path: Path) -> dict[str, dict[str, str]]:
    """A split's metadata rows by ``encounter_id`` (patient name, age, gender, chief
    complaint ``cc``, ``2nd_complaints``, ...), values stripped; {} when the file is absent."""
    if not path.is_file():
        _log.warning("%s: no metadata file; dialogues get no meta.metadata", path)
        return {}
    return {row["encounter_id"].strip(): {k: v.strip() for k, v in row.items()
                                          if k != "encounter_id"}
            for _, row in csv_rows(path, ("encounter_id",))}


def _aci_pair(row: dict[str, str], split: str, path: Path, line: int,
              metadata: dict[str, dict[str, str]]) -> tuple[Dialogue, ClinicalNote]:
    rid = source_id(f"aci-{split}", row["encounter_id"], path, line, "encounter_id")
    turns = turns_of_field(row, "dialogue", path, line)
    note = row["note"].strip()
    if not note:
        raise ContractError(path, line, "note", "empty note")
    encounter = row["encounter_id"].strip()
    meta = {"file": path.name, "line": line, "encounter_id": encounter,
            "subset": row.get("dataset", "").strip(), "speakers": speaker_labels(row["dialogue"])}
    if encounter in metadata:
        meta["metadata"] = metadata[encounter]
    dialogue = parse_record(Dialogue, {"id": rid, "turns": turns, "lang": "en",
                                       "source": "aci-bench", "meta": meta}, path, line)
    clinical = parse_record(ClinicalNote, {
        "id": rid, "note": note, "sections": split_note_sections(note),
        "reference_dialogue": turns, "lang": "en", "source": "aci-bench"}, path, line)
    return dialogue, clinical


def load_aci_bench(split: str = "train", root: str | os.PathLike | None = None,
                   limit: int | None = None, skip_bad: bool = False
                   ) -> list[tuple[Dialogue, ClinicalNote]]:
    """ACI-Bench challenge encounters of one split (:data:`ACI_SPLITS`: train, valid,
    test1, test2, test3).

    Dialogue tags ``[doctor]``, ``[patient]``, ``[patient_guest]`` (the last spoken for
    the patient); the note keeps its full text and ``sections`` its headed parts. Both
    share the id ``aci-<split>-<encounter_id>``; ``meta.subset`` is the source corpus
    (aci, virtassist, virtscribe) and ``meta.metadata`` the split's metadata row.
    """
    folder = data_root(root) / ACI_DIR
    path = split_file(folder, ACI_SPLITS, split)
    if not path.is_file():
        present = [s for s, name in ACI_SPLITS.items() if (folder / name).is_file()]
        raise FileNotFoundError(f"{path}: ACI-Bench split {split!r} not found (splits "
                                f"present: {', '.join(present) or 'none'})")
    metadata = load_aci_metadata(folder / ACI_METADATA[split])
    return collect_rows(csv_rows(path, ACI_COLUMNS),
                        lambda line, row: _aci_pair(row, split, path, line, metadata),
                        path, limit, skip_bad)


def aci_dialogues(split: str = "train", root: str | os.PathLike | None = None,
                  limit: int | None = None, skip_bad: bool = False) -> list[Dialogue]:
    """The dialogues of :func:`load_aci_bench`."""
    return [d for d, _ in load_aci_bench(split, root, limit, skip_bad)]


def aci_notes(split: str = "train", root: str | os.PathLike | None = None,
              limit: int | None = None, skip_bad: bool = False) -> list[ClinicalNote]:
    """The notes of :func:`load_aci_bench`."""
    return [n for _, n in load_aci_bench(split, root, limit, skip_bad)]
