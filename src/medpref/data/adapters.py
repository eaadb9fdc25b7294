"""Adapters from the licensed public data sets into the contract shapes.

The data sets are read at run time from the shared data directory (see
:func:`shared_data_dir`); nothing is copied into the repository. Every record gets a
stable, source-prefixed id and its ``source``:

=================  =================================  ==============================
source             file(s) under the data directory   ids
=================  =================================  ==============================
``mts-dialog``     ``mts-dialog/Main-Dataset/*.csv``  ``mts-<split>-<ID:04d>``
``mts-dialog``     ``mts-dialog/Correlation-Study``   ``mts-corr-s<system>-<ID:04d>``
``aci-bench``      ``aci-bench/challenge_data/*.csv`` ``aci-<split>-<encounter_id>``
``agentclinic``    ``agentclinic/*_medqa.jsonl``      ``agentclinic-<line:04d>``
=================  =================================  ==============================

A row that cannot be converted raises :class:`~medpref.contracts.ContractError` naming
the file, the line where the row starts and the field; with ``skip_bad=True`` such rows
are skipped instead and their number is logged as a warning.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

from medpref.contracts import (
    ClinicalNote, ContractError, Dialogue, Role, ScoredQA, SPCase, Turn, parse_record,
    text_lines,
)

_log = logging.getLogger(__name__)
T = TypeVar("T")

ENV_VAR = "MEDPREF_SHARED_DATA"

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

ACI_DIR = Path("aci-bench", "challenge_data")
ACI_SPLITS = {"train": "train.csv", "test1": "clinicalnlp_taskB_test1.csv"}
ACI_COLUMNS = ("encounter_id", "dialogue", "note")

AGENTCLINIC_FILE = Path("agentclinic", "agentclinic_medqa.jsonl")

# Normalised speaker label -> role. Labels are lower-cased, spaces become "_" and a
# trailing number is dropped first ("Guest_family_2" -> "guest_family", "Doctor_2" ->
# "doctor"). Everyone but the doctor(s) is on the patient's side: family, companions
# and, in MTS-Dialog's clinician-to-clinician consultations (59 rows with no patient),
# the guest clinician who reports on the patient. ``meta.speakers`` keeps the labels.
DEFAULT_SPEAKERS: dict[str, Role] = {
    "doctor": "doctor",
    "docotr": "doctor",            # typo in MTS-Dialog train ("Docotr_2")
    "patient": "patient",
    "guest_clinician": "patient",
    "guest_clinican": "patient",   # typo in MTS-Dialog train
    "patient_guest": "patient",    # ACI-Bench
    "guest_family": "patient",
    "gest_family": "patient",      # typo in MTS-Dialog train
    "patient's_wife": "patient",
}


# ---------------------------------------------------------------- locations


def shared_data_dir() -> Path | None:
    """The shared data directory, or None when it is absent.

    ``$MEDPREF_SHARED_DATA`` when set, else ``<repo>/../shared/data`` with the repository
    root found from this file. Read at call time so tests and stages can redirect it.
    """
    env = os.environ.get(ENV_VAR)
    repo = Path(__file__).resolve().parents[3]
    path = Path(env) if env else repo.parent / "shared" / "data"
    return path if path.is_dir() else None


def _data_root(root: str | os.PathLike | None) -> Path:
    if root is not None:
        return Path(root)
    found = shared_data_dir()
    if found is None:
        raise FileNotFoundError(f"no shared data directory: set ${ENV_VAR} "
                                "or place the data sets in <repo>/../shared/data")
    return found


def _split_file(folder: Path, splits: Mapping[str, str], split: str) -> Path:
    if split not in splits:
        raise ValueError(f"unknown split {split!r}; expected one of {sorted(splits)}")
    return folder / splits[split]


# ---------------------------------------------------------------- turn parsing


def _normalise_label(label: str) -> str:
    label = re.sub(r"\s+", "_", label.strip().lower())
    return re.sub(r"_?\d+$", "", label)


@lru_cache(maxsize=16)
def _tag_pattern(labels: tuple[str, ...]) -> re.Pattern[str]:
    """Regex for speaker tags: ``[label]`` anywhere, ``Label:`` at a line start (also
    ``Label.``, seen once in MTS-Dialog), or ``Label:`` capitalised after a sentence's
    punctuation, where MTS-Dialog sometimes runs two turns into one line."""
    longest_first = sorted(labels, key=len, reverse=True)
    alts = "|".join(re.escape(k).replace("_", "[_ ]") for k in longest_first)
    label = rf"(?i:{alts})(?:[_ ]?\d+)?"
    return re.compile(
        rf"\[[ \t]*(?P<bracket>{label})[ \t]*\]"
        rf"|^[ \t\"']*(?P<line>{label})[ \t]*(?::|\.(?=\s))"
        rf"|(?<=[.?!,;])[ \t]+(?=[A-Z])(?P<inline>{label}):",
        re.MULTILINE,
    )


def _clean_text(text: str) -> str:
    return re.sub(r"\s*[\r\n]+\s*", " ", text).strip()


def _merge_turns(segments: Iterable[tuple[Role, str]]) -> list[Turn]:
    turns: list[Turn] = []
    for role, text in segments:
        if not text:
            continue
        if turns and turns[-1].role == role:
            turns[-1] = Turn(role=role, text=f"{turns[-1].text} {text}")
        else:
            turns.append(Turn(role=role, text=text))
    return turns


def _tagged_segments(text: str, speaker_map: Mapping[str, Role]) -> Iterator[tuple[str, str]]:
    """``(normalised speaker label, cleaned text)`` for each tag found in ``text``."""
    matches = list(_tag_pattern(tuple(speaker_map)).finditer(text))
    ends = [m.start() for m in matches[1:]] + [len(text)]
    for match, end in zip(matches, ends):
        label = match.group("bracket") or match.group("line") or match.group("inline")
        yield _normalise_label(label), _clean_text(text[match.end():end])


def parse_tagged_dialogue(text: str, speaker_map: Mapping[str, Role] = DEFAULT_SPEAKERS
                          ) -> list[Turn]:
    """Split a speaker-tagged transcript into turns.

    Handles ``Doctor: ...`` lines (MTS-Dialog) and ``[doctor] ...`` tags (ACI-Bench);
    ``speaker_map`` maps normalised labels to roles (see :data:`DEFAULT_SPEAKERS`), and a
    label missing from it is not a tag. Text before the first tag is dropped, line breaks
    inside a turn become spaces, empty turns are dropped and consecutive turns of the
    same role are merged, so the result alternates roles. Returns ``[]`` when no tag is
    found; callers decide whether that is an error.
    """
    return _merge_turns((speaker_map[label], body)
                        for label, body in _tagged_segments(text, speaker_map))


def speaker_labels(text: str, speaker_map: Mapping[str, Role] = DEFAULT_SPEAKERS) -> list[str]:
    """The distinct normalised speaker labels of a transcript, in order of appearance."""
    return list(dict.fromkeys(label for label, _ in _tagged_segments(text, speaker_map)))


def _turns_of(row: Mapping[str, str], field: str, path: Path, line: int) -> list[Turn]:
    turns = parse_tagged_dialogue(row[field])
    if not turns:
        raise ContractError(path, line, field, "no speaker-tagged turns "
                            "(expected 'Doctor:'/'Patient:' or '[doctor]'/'[patient]')")
    return turns


# ---------------------------------------------------------------- row readers


def _csv_rows(path: Path, required: Iterable[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield ``(line where the row starts, row)``; a missing column is a ContractError, a
    file that is not UTF-8 a DataFileError naming the line."""
    reader = csv.DictReader(line for _, line in text_lines(path))
    missing = [c for c in required if c not in (reader.fieldnames or [])]
    if missing:
        raise ContractError(path, 1, missing[0], "missing column")
    start = reader.line_num + 1
    for row in reader:
        yield start, {k: v or "" for k, v in row.items() if k is not None}
        start = reader.line_num + 1


def _jsonl_lines(path: Path) -> Iterator[tuple[int, str]]:
    for lineno, raw in text_lines(path):
        if raw.strip():
            yield lineno, raw


def _collect(rows: Iterable[tuple[int, Any]], convert: Callable[[int, Any], T],
             path: Path, limit: int | None, skip_bad: bool) -> list[T]:
    """Convert rows until ``limit`` good ones; skip (and count) bad ones if asked."""
    out: list[T] = []
    skipped = 0
    for line, row in rows:
        if limit is not None and len(out) >= limit:
            break
        try:
            out.append(convert(line, row))
        except ContractError:
            if not skip_bad:
                raise
            skipped += 1
    if skipped:
        _log.warning("%s: skipped %d malformed row(s)", path, skipped)
    return out


def _source_id(prefix: str, raw: str, path: Path, line: int, field: str) -> str:
    raw = raw.strip()
    if not raw:
        raise ContractError(path, line, field, "empty id")
    return f"{prefix}-{int(raw):04d}" if raw.isdigit() else f"{prefix}-{raw}"


# ---------------------------------------------------------------- MTS-Dialog


def _mts_pair(row: dict[str, str], split: str, path: Path, line: int
              ) -> tuple[Dialogue, ClinicalNote]:
    rid = _source_id(f"mts-{split}", row["ID"], path, line, "ID")
    turns = _turns_of(row, "dialogue", path, line)
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
    path = _split_file(_data_root(root) / MTS_DIR, MTS_SPLITS, split)
    return _collect(_csv_rows(path, MTS_COLUMNS),
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
    folder = _data_root(root) / MTS_CORR_DIR
    summaries_path, scores_path = folder / MTS_CORR_SUMMARIES, folder / MTS_CORR_SCORES
    summaries = list(_csv_rows(summaries_path, MTS_CORR_SUMMARY_COLUMNS))
    scores = list(_csv_rows(scores_path, MTS_CORR_SCORE_COLUMNS))
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


# ---------------------------------------------------------------- ACI-Bench

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
    rid = _source_id(f"aci-{split}", row["encounter_id"], path, line, "encounter_id")
    turns = _turns_of(row, "dialogue", path, line)
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
    path = _split_file(_data_root(root) / ACI_DIR, ACI_SPLITS, split)
    return _collect(_csv_rows(path, ACI_COLUMNS),
                    lambda line, row: _aci_pair(row, split, path, line), path, limit, skip_bad)


def aci_dialogues(split: str = "train", root: str | os.PathLike | None = None,
                  limit: int | None = None, skip_bad: bool = False) -> list[Dialogue]:
    """The dialogues of :func:`load_aci_bench`."""
    return [d for d, _ in load_aci_bench(split, root, limit, skip_bad)]


def aci_notes(split: str = "train", root: str | os.PathLike | None = None,
              limit: int | None = None, skip_bad: bool = False) -> list[ClinicalNote]:
    """The notes of :func:`load_aci_bench`."""
    return [n for _, n in load_aci_bench(split, root, limit, skip_bad)]


# ---------------------------------------------------------------- AgentClinic OSCE

# Test_Results keys made only of these words group tests ("Imaging", "Blood_Tests",
# "Laboratory_Studies"): their children are the tests. Children with these names
# are result fields, not tests.
_GROUP_WORDS = frozenset("additional analysis and basic blood imaging lab laboratory other "
                         "results screening serum special studies test tests values work".split())
_RESULT_FIELDS = frozenset("findings result results level interpretation suggestion other".split())


def _humanise(key: str) -> str:
    return key.replace("_", " ").strip()


def flatten_value(value: Any, depth: int = 0) -> str:
    """Readable text of a nested JSON value: top-level keys on their own lines, deeper
    ones ``key: value; ...`` and, two levels down, in parentheses."""
    if isinstance(value, dict):
        parts = [f"{_humanise(k)}: {flatten_value(v, depth + 1)}" for k, v in value.items()]
        if depth == 0:
            return "\n".join(parts)
        return "; ".join(parts) if depth == 1 else f"({'; '.join(parts)})"
    if isinstance(value, list):
        return ", ".join(flatten_value(v, depth + 1) for v in value)
    return "" if value is None else str(value).strip()


def checklist_tests(results: Mapping[str, Any]) -> list[str]:
    """Names of the tests in an AgentClinic ``Test_Results`` block, deduplicated.

    A top-level key is a test ("Complete_Blood_Count", "Electromyography") unless it
    only groups others ("Imaging": {"Chest_CT": ...}), when its children are used.
    """
    names: list[str] = []
    for key, value in results.items():
        words = set(re.split(r"[_\s-]+", key.lower()))
        if isinstance(value, dict) and words <= _GROUP_WORDS:
            names += [k for k in value if k.lower() not in _RESULT_FIELDS]
        else:
            names.append(key)
    return list(dict.fromkeys(_humanise(n) for n in names))


def _require(data: Any, dotted: str, path: Path, line: int) -> Any:
    for key in dotted.split("."):
        if not isinstance(data, dict) or key not in data:
            raise ContractError(path, line, dotted, "missing")
        data = data[key]
    if data in (None, "", [], {}):
        raise ContractError(path, line, dotted, "empty")
    return data


def _symptom_list(symptoms: Mapping[str, Any]) -> list[str]:
    secondary = symptoms.get("Secondary_Symptoms") or []
    if not isinstance(secondary, list):
        secondary = [secondary]
    items = [symptoms.get("Primary_Symptom"), *secondary]
    return list(dict.fromkeys(s.strip() for s in items if isinstance(s, str) and s.strip()))


def _agentclinic_case(line: int, raw: str, path: Path) -> SPCase:
    try:
        record = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ContractError(path, line, "<json>", f"invalid JSON: {exc.msg}") from None
    osce = _require(record, "OSCE_Examination", path, line)
    actor = _require(osce, "Patient_Actor", path, line)
    primary = str(_require(actor, "Symptoms.Primary_Symptom", path, line)).strip()
    diagnosis = str(_require(osce, "Correct_Diagnosis", path, line)).strip()
    results = osce.get("Test_Results") or {}
    info = {_humanise(k): flatten_value(v) for k, v in actor.items()}
    info["Physical Examination Findings"] = flatten_value(osce.get("Physical_Examination_Findings"))
    info["Test Results"] = flatten_value(results)
    return parse_record(SPCase, {
        "id": f"agentclinic-{line:04d}", "department": "general", "lang": "en",
        "chief_complaint": primary, "patient_info": {k: v for k, v in info.items() if v},
        "checklist": {"symptoms": _symptom_list(actor["Symptoms"]),
                      "tests": checklist_tests(results) if isinstance(results, dict) else [],
                      "diseases": [diagnosis]},
        "source": "agentclinic", "objective": str(osce.get("Objective_for_Doctor", "")).strip(),
    }, path, line)


def agentclinic_cases(root: str | os.PathLike | None = None, limit: int | None = None,
                      skip_bad: bool = False) -> list[SPCase]:
    """AgentClinic OSCE (MedQA) cases as standardized-patient cases.

    ``chief_complaint`` is the primary symptom; ``patient_info`` the patient actor's
    sections plus the physical-exam findings and test results, flattened to text;
    checklist: primary + secondary symptoms, :func:`checklist_tests` of the test results,
    and the correct diagnosis. The records carry no specialty, so the department is
    ``general``; ``objective`` keeps the doctor's task. Ids use the JSONL line number.
    """
    path = _data_root(root) / AGENTCLINIC_FILE
    return _collect(_jsonl_lines(path), lambda line, raw: _agentclinic_case(line, raw, path),
                    path, limit, skip_bad)
