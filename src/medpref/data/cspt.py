"""The PLPF authors' CSPT standardized-patient cases (a folder or a .zip) into SP cases.

Users hold this data set; the repository does not (``tests/fixtures/cspt`` is our own
small stand-in). The layout, under some root folder::

    script/<department>/<NN_case>/chief_complaint.txt
    script/<department>/<NN_case>/patient.json     flat {section name: text}
    script/<department>/<NN_case>/script.json      {"title", "participants",
                                                    "messages": [{"sender_name", "content"}]}
    check_list/<department>/<NN_case>.json         {"consultation_content": [...],
                                                    "diagnostic": [...],
                                                    "medical_checkup": [...]}

Departments are named in Chinese (:data:`CSPT_DEPARTMENTS`). A case pairs a script folder
with a checklist file of the same department and the same case key: the leading case
number (``01_x``, ``1_x`` and ``01_x copy`` all give 1) or, for names without one, the
name with copy marks (`` copy``, `` 副本``, `` (2)``) and spacing removed. ``__MACOSX/``,
``._*`` and ``.DS_Store`` entries are skipped. What stays unmatched, incomplete or broken
is listed in a :class:`CsptReport` rather than dropped in silence.

Mapping to :class:`~medpref.contracts.SPCase`: ``patient_info`` = ``patient.json``'s
sections (non-text values as JSON text); ``chief_complaint`` = ``chief_complaint.txt``,
else the ``主诉`` section; ``script`` pairs each doctor message (``医生``) with the patient
message (``患者``) that follows it (consecutive messages of one side are joined; a
patient message before the first doctor message and a last unanswered doctor message
are dropped and counted); checklist: ``consultation_content`` -> symptoms,
``medical_checkup`` -> tests, ``diagnostic`` -> diseases (lists may be empty). Ids:
``cspt-<department>-<NN>`` (or ``cspt-<department>-<name>`` without a number); ``lang``
is ``zh``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from medpref.contracts import ContractError, SPCase, parse_record

_log = logging.getLogger(__name__)

CSPT_DEPARTMENTS: dict[str, str] = {
    "内科": "internal_medicine",
    "外科": "surgery",
    "妇科": "gynecology",
    "儿科": "pediatrics",
    "精神科": "psychiatry",
}
SCRIPT_DIRS = frozenset({"script", "scripts"})
CHECKLIST_DIRS = frozenset({"check_list", "checklist", "check_lists", "checklists"})
CASE_FILES = ("chief_complaint.txt", "patient.json", "script.json")
CHECKLIST_KEYS = {"consultation_content": "symptoms", "medical_checkup": "tests",
                  "diagnostic": "diseases"}
DOCTOR_NAMES = frozenset({"医生", "doctor", "医师", "大夫"})
PATIENT_NAMES = frozenset({"患者", "patient", "病人", "家属", "患者家属"})

_COPY_MARK = re.compile(r"(\s*(copy|副本|拷贝)(\s*\d+)?|\s*\(\d+\)|\s*（\d+）)+$", re.IGNORECASE)
_LEADING_NUMBER = re.compile(r"\s*(\d+)")


@dataclass
class CsptReport:
    """What a CSPT load found besides the cases: everything here was not converted.

    Paths are relative to the CSPT root (the folder holding ``script/`` and
    ``check_list/``), POSIX style.
    """

    source: str
    cases: int = 0
    unmatched_scripts: list[str] = field(default_factory=list)
    unmatched_checklists: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)
    unknown_departments: list[str] = field(default_factory=list)
    dropped_messages: int = 0
    junk_skipped: int = 0

    @property
    def clean(self) -> bool:
        """True when every script folder and checklist became a case."""
        return not (self.unmatched_scripts or self.unmatched_checklists or self.duplicates
                    or self.incomplete or self.bad)

    def summary(self) -> str:
        parts = [f"{self.cases} case(s)"]
        for name in ("unmatched_scripts", "unmatched_checklists", "duplicates", "incomplete",
                     "bad", "unknown_departments"):
            items = getattr(self, name)
            if items:
                parts.append(f"{len(items)} {name.replace('_', ' ')}: {', '.join(items)}")
        if self.dropped_messages:
            parts.append(f"{self.dropped_messages} unpaired message(s) dropped")
        return f"{self.source}: " + "; ".join(parts)


# ---------------------------------------------------------------- reading a tree


def _is_junk(parts: tuple[str, ...]) -> bool:
    return any(p == "__MACOSX" or p.startswith("._") or p == ".DS_Store" for p in parts)


def _zip_name(info: zipfile.ZipInfo) -> str:
    """The member name, decoding legacy (non-UTF-8 flagged) names written as GBK or UTF-8."""
    if info.flag_bits & 0x800:
        return info.filename
    raw = info.filename.encode("cp437")
    for encoding in ("utf-8", "gbk"):
        try:
            return raw.decode(encoding)
        except UnicodeDecodeError:
            continue
    return info.filename


class _Tree:
    """Files of a CSPT copy (folder or zip) by POSIX path, junk left out and counted."""

    def __init__(self, source: str | os.PathLike):
        self.source = Path(source)
        self.files: dict[str, Any] = {}
        self.junk = 0
        if self.source.is_dir():
            for path in sorted(self.source.rglob("*")):
                if path.is_file():
                    self._add(path.relative_to(self.source).as_posix(), path)
        elif zipfile.is_zipfile(self.source):
            with zipfile.ZipFile(self.source) as zf:
                for info in zf.infolist():
                    if not info.is_dir():
                        self._add(_zip_name(info), info)
        else:
            raise FileNotFoundError(f"{self.source}: not a folder or a zip file")

    def _add(self, name: str, handle: Any) -> None:
        if _is_junk(PurePosixPath(name).parts):
            self.junk += 1
        else:
            self.files[name] = handle

    def read_text(self, name: str) -> str:
        handle = self.files[name]
        if isinstance(handle, zipfile.ZipInfo):
            with zipfile.ZipFile(self.source) as zf:
                data = zf.read(handle)
        else:
            data = handle.read_bytes()
        for encoding in ("utf-8-sig", "gbk"):   # files saved on Chinese Windows are GBK
            try:
                return data.decode(encoding)
            except UnicodeDecodeError:
                continue
        raise ContractError(self.where(name), None, "<encoding>", "neither UTF-8 nor GBK text")

    def where(self, name: str) -> str:
        """A location for error messages: the file, or ``archive.zip!member``."""
        if isinstance(self.files[name], zipfile.ZipInfo):
            return f"{self.source}!{name}"
        return str(self.source / name)


# ---------------------------------------------------------------- matching names


def normalise_name(name: str) -> str:
    """A folder or file name without its extension, copy marks and spacing, lower-cased."""
    name = name.strip()
    for ext in (".json", ".txt"):
        if name.lower().endswith(ext):
            name = name[: -len(ext)]
    name = _COPY_MARK.sub("", name.strip())
    return re.sub(r"\s+", "", name).lower()


def _has_copy_mark(name: str) -> bool:
    stem = name.strip()
    for ext in (".json", ".txt"):
        stem = stem[: -len(ext)] if stem.lower().endswith(ext) else stem
    return bool(_COPY_MARK.search(stem.strip()))


def case_key(name: str) -> str:
    """Matching key of a case folder or checklist file: its leading number, else its name."""
    norm = normalise_name(name)
    number = _LEADING_NUMBER.match(norm)
    return str(int(number.group(1))) if number else norm


def department_of(name: str) -> str | None:
    """English department of a CSPT department folder name (copy marks ignored)."""
    norm = normalise_name(name)
    for chinese, english in CSPT_DEPARTMENTS.items():
        if norm in (chinese, english):
            return english
    return None


def _split_path(name: str) -> tuple[str, tuple[str, ...]] | None:
    """``("script" | "check_list", parts after it)`` for a file under one of those dirs."""
    parts = PurePosixPath(name).parts
    for i, part in enumerate(parts):
        low = normalise_name(part)
        if low in SCRIPT_DIRS:
            return "script", parts[i + 1:]
        if low in CHECKLIST_DIRS:
            return "check_list", parts[i + 1:]
    return None


@dataclass
class _CaseFiles:
    department: str
    folder: str
    base: str                                             # the folder's tree path
    files: dict[str, str] = field(default_factory=dict)   # canonical name -> tree path


def _collect(tree: _Tree
             ) -> tuple[dict[tuple[str, str], list[_CaseFiles]], dict[tuple[str, str], list[str]]]:
    scripts: dict[tuple[str, str], dict[str, _CaseFiles]] = {}
    checklists: dict[tuple[str, str], list[str]] = {}
    for name in tree.files:
        split = _split_path(name)
        if split is None:
            continue
        kind, rest = split
        if kind == "script" and len(rest) == 3:
            dept, folder, filename = rest
            canonical = normalise_name(filename)
            base = str(PurePosixPath(name).parent)
            entry = scripts.setdefault((dept, case_key(folder)), {}).setdefault(
                folder, _CaseFiles(dept, folder, base))
            for wanted in CASE_FILES:
                if canonical == normalise_name(wanted) and filename.lower().endswith(
                        wanted.rsplit(".", 1)[1]):
                    kept = entry.files.get(wanted)   # "patient.json" wins over "patient copy.json"
                    if kept is None or _has_copy_mark(PurePosixPath(kept).name):
                        entry.files[wanted] = name
        elif kind == "check_list" and len(rest) == 2 and rest[1].lower().endswith(".json"):
            dept, filename = rest
            checklists.setdefault((dept, case_key(filename)), []).append(name)
    by_key = {k: list(v.values()) for k, v in scripts.items()}
    return by_key, checklists


def _norm_key(key: tuple[str, str]) -> tuple[str, str]:
    dept, case = key
    return department_of(dept) or normalise_name(dept), case


def _pick(candidates: list[Any], label: str, report: CsptReport, name_of) -> Any:
    """One candidate; with several, the one without a copy mark, and the rest reported."""
    if len(candidates) == 1:
        return candidates[0]
    ranked = sorted(candidates, key=lambda c: (_has_copy_mark(name_of(c)), name_of(c)))
    report.duplicates.append(f"{label}: kept {name_of(ranked[0])!r} of "
                             + ", ".join(repr(name_of(c)) for c in ranked))
    return ranked[0]


# ---------------------------------------------------------------- converting one case


def _load_json(tree: _Tree, name: str) -> Any:
    try:
        return json.loads(tree.read_text(name))
    except json.JSONDecodeError as exc:
        raise ContractError(tree.where(name), exc.lineno, "<json>",
                            f"invalid JSON: {exc.msg}") from None


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "\n".join(v.strip() for v in value if v.strip())
    return "" if value is None else json.dumps(value, ensure_ascii=False)


def _side(sender: Any) -> str | None:
    name = str(sender or "").strip().lower()
    if name in DOCTOR_NAMES:
        return "doctor"
    if name in PATIENT_NAMES:
        return "patient"
    return None


def _join(first: str, second: str) -> str:
    """Two messages of one side as one; no space between Chinese (non-ASCII) ends."""
    glue = "" if not first[-1].isascii() and not second[0].isascii() else " "
    return first + glue + second


def pair_messages(messages: list[Mapping[str, Any]], where: str = "<memory>"
                  ) -> tuple[list[dict[str, str]], int]:
    """Doctor->patient question-answer pairs from CSPT messages, and how many were dropped.

    Consecutive messages of one side are joined (with a space unless both ends are
    non-ASCII, as in Chinese); a patient message before any
    doctor message and a trailing doctor message without an answer are dropped. A sender
    that is neither side is a :class:`ContractError` naming the message.
    """
    turns: list[list[str]] = []   # [side, text]
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ContractError(where, None, f"messages.{i}", "not an object")
        side = _side(message.get("sender_name"))
        if side is None:
            raise ContractError(where, None, f"messages.{i}.sender_name",
                                f"unknown sender {message.get('sender_name')!r}")
        text = _as_text(message.get("content"))
        if not text:
            continue
        if turns and turns[-1][0] == side:
            turns[-1][1] = _join(turns[-1][1], text)
        else:
            turns.append([side, text])
    dropped = 0
    while turns and turns[0][0] == "patient":
        turns.pop(0)
        dropped += 1
    if turns and turns[-1][0] == "doctor":
        turns.pop()
        dropped += 1
    pairs = [{"doctor": turns[i][1], "patient": turns[i + 1][1]} for i in range(0, len(turns), 2)]
    return pairs, dropped


def _checklist(data: Any, where: str) -> dict[str, list[str]]:
    if not isinstance(data, Mapping):
        raise ContractError(where, None, "<record>", "a checklist is a JSON object")
    out: dict[str, list[str]] = {}
    for key, category in CHECKLIST_KEYS.items():
        items = data.get(key) or []
        if not isinstance(items, list):
            raise ContractError(where, None, key, "not a list")
        out[category] = [t for t in (_as_text(x) for x in items) if t]
    return out


def _case_id(department: str, folder: str) -> str:
    key = case_key(folder)
    return f"cspt-{department}-{int(key):02d}" if key.isdigit() else f"cspt-{department}-{key}"


def _convert(tree: _Tree, case: _CaseFiles, checklist_path: str, department: str,
             report: CsptReport) -> SPCase:
    patient_path = case.files["patient.json"]
    patient = _load_json(tree, patient_path)
    if not isinstance(patient, Mapping):
        raise ContractError(tree.where(patient_path), None, "<record>",
                            "patient.json is a JSON object")
    info = {str(k).strip(): _as_text(v) for k, v in patient.items()}
    info = {k: v for k, v in info.items() if k and v}
    if "chief_complaint.txt" in case.files:
        complaint = tree.read_text(case.files["chief_complaint.txt"]).strip()
    else:
        complaint = info.get("主诉", "")
    script, title = [], None
    if "script.json" in case.files:
        where = tree.where(case.files["script.json"])
        data = _load_json(tree, case.files["script.json"])
        messages = data.get("messages") if isinstance(data, Mapping) else None
        if not isinstance(messages, list):
            raise ContractError(where, None, "messages", "missing or not a list")
        script, dropped = pair_messages(messages, where)
        report.dropped_messages += dropped
        title = data.get("title")
    record = {
        "id": _case_id(department, case.folder), "department": department, "lang": "zh",
        "chief_complaint": complaint, "patient_info": info, "script": script,
        "checklist": _checklist(_load_json(tree, checklist_path), tree.where(checklist_path)),
        "source": "cspt",
        "meta": {"script_folder": case.base,
                 "checklist_file": PurePosixPath(checklist_path).name, "title": title},
    }
    return parse_record(SPCase, record, tree.where(patient_path))


# ---------------------------------------------------------------- loading


def _by_department(keyed: Mapping[tuple[str, str], list[Any]]
                   ) -> dict[tuple[str, str], list[Any]]:
    """Merge keys whose department folders differ only by copy marks or language."""
    merged: dict[tuple[str, str], list[Any]] = {}
    for key, items in keyed.items():
        merged.setdefault(_norm_key(key), []).extend(items)
    return merged


def _iter_cases(tree: _Tree, report: CsptReport, skip_bad: bool) -> Iterator[SPCase]:
    scripts, checklists = _collect(tree)
    scripts, checklists = _by_department(scripts), _by_department(checklists)
    for dept in sorted({d for d, _ in scripts} | {d for d, _ in checklists}):
        if dept not in CSPT_DEPARTMENTS.values():
            report.unknown_departments.append(dept)
    for key in sorted(set(checklists) - set(scripts)):
        report.unmatched_checklists.extend(checklists[key])
    for key in sorted(scripts, key=lambda k: (k[0], k[1].zfill(8))):
        label = "/".join(key)
        if key not in checklists:
            report.unmatched_scripts.extend(c.base for c in scripts[key])
            continue
        case = _pick(scripts[key], label, report, lambda c: c.folder)
        checklist = _pick(checklists[key], label, report, lambda p: PurePosixPath(p).name)
        if "patient.json" not in case.files:
            report.incomplete.append(f"{case.base}: no patient.json")
            continue
        missing = [f for f in ("chief_complaint.txt", "script.json") if f not in case.files]
        if missing:
            report.incomplete.append(f"{case.base}: no {', '.join(missing)}"
                                     " (converted without)")
        try:
            yield _convert(tree, case, checklist, key[0], report)
        except ContractError as exc:
            if not skip_bad:
                raise
            report.bad.append(str(exc))


def load_cspt(source: str | os.PathLike, skip_bad: bool = False
              ) -> tuple[list[SPCase], CsptReport]:
    """CSPT cases from a folder or a .zip, and a report of what was not converted.

    ``source`` may be the CSPT root or any folder/zip containing it (the ``script`` and
    ``check_list`` folders are found at any depth). A malformed file raises
    :class:`~medpref.contracts.ContractError` naming the file (``archive.zip!member`` in
    a zip) and the field; with ``skip_bad=True`` it is listed in ``report.bad`` instead.
    """
    tree = _Tree(source)
    report = CsptReport(source=str(source), junk_skipped=tree.junk)
    cases = list(_iter_cases(tree, report, skip_bad))
    report.cases = len(cases)
    ids = [c.id for c in cases]
    if len(set(ids)) != len(ids):
        raise ContractError(source, None, "id", "two cases got the same id")
    return cases, report


def cspt_cases(source: str | os.PathLike, skip_bad: bool = False) -> list[SPCase]:
    """The cases of :func:`load_cspt`; a report with anything unconverted is logged."""
    cases, report = load_cspt(source, skip_bad)
    if not report.clean:
        _log.warning("%s", report.summary())
    return cases
