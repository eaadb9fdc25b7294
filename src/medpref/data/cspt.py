"""The PLPF authors' CSPT standardized-patient cases into SP cases.

Users hold this data set; the repository does not (``tests/fixtures/cspt`` and
``tests/fixtures/cspt_published`` are our own small stand-ins). It loads in every form it
comes in: the two published archives side by side (a scripts archive and a checklists
archive), named together or by the folder holding them; one archive holding both
folders; or the unpacked folders. Archives inside a folder (or inside an archive) are
read in place. The layout, under some root folder::

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
is listed in a :class:`CsptReport` rather than dropped in silence; the report also counts
the cases of each of the five departments. Finding no case at all is an error
(:class:`CsptNotFoundError`) that says what was found and what was expected.

Mapping to :class:`~medpref.contracts.SPCase`: ``patient_info`` = ``patient.json``'s
sections (non-text values as JSON text); ``chief_complaint`` = ``chief_complaint.txt``,
else the ``主诉`` section; ``script`` pairs each doctor message (``医生``) with the patient
side's message that follows it (consecutive messages of one side are joined; a
patient message before the first doctor message and a last unanswered doctor message
are dropped and counted). The patient side is the patient (``患者``, ``患儿``, ...) or a
family informant (``患儿家属``, ``病人家属``, ``患者母亲``, ``患者父亲``, ...: pediatric and
some psychiatric cases); the informant who speaks most becomes the case's ``informant``
and ``meta.patient_side`` counts the messages of each patient-side sender. Checklist:
``consultation_content`` -> symptoms, ``medical_checkup`` -> tests, ``diagnostic`` ->
diseases (lists may be empty). Ids: ``cspt-<department>-<NN>`` (or
``cspt-<department>-<name>`` without a number); ``lang`` is ``zh``.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import zipfile
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from medpref.contracts import ContractError, SPCase, parse_record

_log = logging.getLogger(__name__)

Source = str | os.PathLike     # a folder or a zip archive

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
#: the patient speaking for themself
PATIENT_NAMES = frozenset({"患者", "patient", "病人", "患儿", "病儿"})
# a family member (or other companion) speaking for the patient: an optional
# "whose" (患者/患儿/病人/...) and a relation ("家属", "母亲", "mother", ...)
_RELATIONS = ("家属|亲属|家长|监护人|陪护|陪同者|母亲|父亲|妈妈|爸爸|母|父|妻子|丈夫|爱人|老伴|"
              "儿子|女儿|姐姐|妹妹|哥哥|弟弟|奶奶|爷爷|外婆|外公|姥姥|姥爷|祖母|祖父|朋友|同事")
_INFORMANT_RE = re.compile(rf"(?:患儿|患者|病人|病儿|孩子)?的?(?:{_RELATIONS})\d*")
_INFORMANT_EN_RE = re.compile(
    r"(?:(?:the )?patient'?s? )?(?:family(?: member)?|relative|parent|mother|father|mom|dad|"
    r"guardian|caregiver|spouse|wife|husband|son|daughter|friend)\d*")
_PARENTHESIS = re.compile(r"\s*[（(][^()（）]*[)）]\s*$")

_COPY_MARK = re.compile(r"(\s*(copy|副本|拷贝)(\s*\d+)?|\s*\(\d+\)|\s*（\d+）)+$", re.IGNORECASE)
_LEADING_NUMBER = re.compile(r"\s*(\d+)")


@dataclass
class CsptReport:
    """What a CSPT load found besides the cases: their count per department and per
    family informant, and what was not converted (unmatched, incomplete, bad, ...).

    Paths are tree paths under the source (an archive's members under the archive's
    path without ``.zip``), POSIX style.
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
    #: cases per department, the five CSPT departments first (zero when none loaded)
    departments: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(CSPT_DEPARTMENTS.values(), 0))
    #: cases answered by a family informant, by informant
    informants: dict[str, int] = field(default_factory=dict)
    #: the same case seen twice under one name (an archive and its unpacked copy)
    repeats: int = 0

    @property
    def clean(self) -> bool:
        """True when every script folder and checklist became a case."""
        return not (self.unmatched_scripts or self.unmatched_checklists or self.duplicates
                    or self.incomplete or self.bad)

    @property
    def missing_departments(self) -> list[str]:
        """The CSPT departments with no case loaded."""
        return [d for d in CSPT_DEPARTMENTS.values() if not self.departments.get(d)]

    def department_table(self) -> str:
        """``internal_medicine 2, surgery 1, ...`` over the five departments (and others)."""
        return ", ".join(f"{d} {n}" for d, n in self.departments.items())

    def summary(self) -> str:
        parts = [f"{self.cases} case(s)", f"per department: {self.department_table()}"]
        if self.missing_departments:
            parts.append(f"no case in {', '.join(self.missing_departments)}")
        if self.informants:
            parts.append("family informants: " + ", ".join(
                f"{k} {v}" for k, v in sorted(self.informants.items())))
        for name in ("unmatched_scripts", "unmatched_checklists", "duplicates", "incomplete",
                     "bad", "unknown_departments"):
            items = getattr(self, name)
            if items:
                parts.append(f"{len(items)} {name.replace('_', ' ')}: {', '.join(items)}")
        if self.dropped_messages:
            parts.append(f"{self.dropped_messages} unpaired message(s) dropped")
        if self.repeats:
            parts.append(f"{self.repeats} case file(s) found twice under one name (kept one)")
        return f"{self.source}: " + "; ".join(parts)


class CsptNotFoundError(ValueError):
    """No CSPT case could be built from a source; the message says what was found."""


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


@dataclass(frozen=True)
class _Member:
    """One file of a CSPT copy: a plain file, or a member of an archive (``archive`` is
    the archive's path or, for an archive inside an archive, its bytes)."""

    where: str                                  # for messages: path or archive!member
    path: Path | None = None
    archive: Path | bytes | None = None
    info: zipfile.ZipInfo | None = None

    def read_bytes(self) -> bytes:
        if self.path is not None:
            return self.path.read_bytes()
        with _open_zip(self.archive) as zf:
            return zf.read(self.info)


def _open_zip(archive: Path | bytes | None) -> zipfile.ZipFile:
    return zipfile.ZipFile(io.BytesIO(archive) if isinstance(archive, bytes) else archive)


def _is_zip_name(name: str) -> bool:
    return name.lower().endswith(".zip")


class _Tree:
    """Files of a CSPT copy by POSIX tree path, junk left out and counted.

    ``sources`` are folders and zip archives. A zip found inside a folder or inside
    another zip is read in place: its members appear under the archive's path without
    ``.zip`` (``script.zip`` holding ``script/内科/...`` gives ``script/script/内科/...``),
    so a scripts archive and a checklists archive side by side load as one tree.
    """

    def __init__(self, sources: Sequence[str | os.PathLike]):
        self.files: dict[str, _Member] = {}
        self.junk = 0
        self.archives: list[str] = []
        self.skipped: list[str] = []   # unreadable archives
        paths = [Path(src) for src in sources]
        prefixes = self._prefixes(paths)
        for path, prefix in zip(paths, prefixes):
            if path.is_dir():
                self._add_folder(path, prefix)
            elif zipfile.is_zipfile(path):
                self._add_zip(path, prefix, str(path))
            else:
                raise FileNotFoundError(f"{path}: not a folder or a zip file")

    @staticmethod
    def _prefixes(paths: list[Path]) -> list[str]:
        """One source keeps its own paths; several are kept apart by their names."""
        if len(paths) == 1:
            return [""]
        names = [p.stem if _is_zip_name(p.name) else p.name for p in paths]
        return [f"{n}/" if names.count(n) == 1 else f"{n}.{i}/" for i, n in enumerate(names)]

    def _add_folder(self, folder: Path, prefix: str) -> None:
        for path in sorted(folder.rglob("*")):
            if not path.is_file():
                continue
            name = prefix + path.relative_to(folder).as_posix()
            if _is_junk(PurePosixPath(name).parts):
                self.junk += 1
            elif _is_zip_name(name) and zipfile.is_zipfile(path):
                self._add_zip(path, name[:-4] + "/", str(path))
            else:
                self.files[name] = _Member(str(path), path=path)

    def _add_zip(self, archive: Path | bytes, prefix: str, where: str) -> None:
        self.archives.append(where)
        try:
            with _open_zip(archive) as zf:
                infos = [i for i in zf.infolist() if not i.is_dir()]
                nested = {i.filename: zf.read(i) for i in infos if _is_zip_name(_zip_name(i))}
        except (zipfile.BadZipFile, OSError) as exc:
            self.skipped.append(f"{where} ({exc})")
            return
        for info in infos:
            name = _zip_name(info)
            if _is_junk(PurePosixPath(name).parts):
                self.junk += 1
            elif info.filename in nested and zipfile.is_zipfile(io.BytesIO(nested[info.filename])):
                self._add_zip(nested[info.filename], prefix + name[:-4] + "/", f"{where}!{name}")
            else:
                self.files[prefix + name] = _Member(f"{where}!{name}", archive=archive, info=info)

    def read_text(self, name: str) -> str:
        data = self.files[name].read_bytes()
        for encoding in ("utf-8-sig", "gbk"):   # files saved on Chinese Windows are GBK
            try:
                return data.decode(encoding)
            except UnicodeDecodeError:
                continue
        raise ContractError(self.where(name), None, "<encoding>", "neither UTF-8 nor GBK text")

    def where(self, name: str) -> str:
        """A location for error messages: the file, or ``archive.zip!member``."""
        return self.files[name].where

    def in_archive(self, name: str) -> bool:
        return self.files[name].path is None


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
    """``("script" | "check_list", parts after it)`` for a file under one of those dirs.

    The innermost such folder counts, so an archive named after the folder it holds
    (``script.zip`` -> ``script/script/<department>/...``) splits right.
    """
    parts = PurePosixPath(name).parts
    for i in range(len(parts) - 2, -1, -1):
        low = normalise_name(parts[i])
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
                base, _CaseFiles(dept, folder, base))
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


def _pick(candidates: list[Any], label: str, report: CsptReport, name_of,
          in_archive=lambda c: False) -> Any:
    """One candidate; with several, the one without a copy mark, and the rest reported.

    Candidates under one same name are one case found twice (an archive next to its
    unpacked copy): the unpacked one is kept and only counted (``report.repeats``).
    """
    if len(candidates) == 1:
        return candidates[0]
    ranked = sorted(candidates, key=lambda c: (_has_copy_mark(name_of(c)), name_of(c),
                                               in_archive(c)))
    if len({name_of(c) for c in candidates}) == 1:
        report.repeats += len(candidates) - 1
    else:
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


def sender_name(sender: Any) -> str:
    """A sender name without spacing runs or a trailing note in parentheses."""
    name = _PARENTHESIS.sub("", str(sender or "").strip())
    return re.sub(r"\s+", " ", name).strip()


def is_informant(sender: Any) -> bool:
    """Whether a sender is someone speaking for the patient (患儿家属, 患者母亲, mother...)."""
    name = sender_name(sender)
    return bool(_INFORMANT_RE.fullmatch(name.replace(" ", ""))
                or _INFORMANT_EN_RE.fullmatch(name.lower()))


def _side(sender: Any) -> str | None:
    name = sender_name(sender).lower()
    if name in DOCTOR_NAMES:
        return "doctor"
    if name in PATIENT_NAMES or is_informant(name):
        return "patient"
    return None


def informant_of(messages: list[Mapping[str, Any]]) -> tuple[str | None, dict[str, int]]:
    """The family informant who speaks most for the patient (None: only the patient
    speaks), and the messages of each patient-side sender (ties: who spoke first)."""
    counts = Counter(sender_name(m.get("sender_name")) for m in messages
                     if isinstance(m, Mapping) and _side(m.get("sender_name")) == "patient"
                     and _as_text(m.get("content")))
    family = [name for name, _ in counts.most_common() if is_informant(name)]
    return (family[0] if family else None), dict(counts)


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
    script, title, informant, speakers = [], None, None, {}
    if "script.json" in case.files:
        where = tree.where(case.files["script.json"])
        data = _load_json(tree, case.files["script.json"])
        messages = data.get("messages") if isinstance(data, Mapping) else None
        if not isinstance(messages, list):
            raise ContractError(where, None, "messages", "missing or not a list")
        script, dropped = pair_messages(messages, where)
        informant, speakers = informant_of(messages)
        report.dropped_messages += dropped
        title = data.get("title")
    record = {
        "id": _case_id(department, case.folder), "department": department, "lang": "zh",
        "chief_complaint": complaint, "patient_info": info, "script": script,
        "checklist": _checklist(_load_json(tree, checklist_path), tree.where(checklist_path)),
        "informant": informant, "source": "cspt",
        "meta": {"script_folder": case.base,
                 "checklist_file": PurePosixPath(checklist_path).name, "title": title,
                 "patient_side": speakers},
    }
    converted = parse_record(SPCase, record, tree.where(patient_path))
    if informant:
        report.informants[informant] = report.informants.get(informant, 0) + 1
    return converted


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
        case = _pick(scripts[key], label, report, lambda c: c.folder,
                     lambda c: any(tree.in_archive(f) for f in c.files.values()))
        checklist = _pick(checklists[key], label, report, lambda p: PurePosixPath(p).name,
                          tree.in_archive)
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


def _sources(source: Source | Sequence[Source]) -> list[Source]:
    return [source] if isinstance(source, (str, os.PathLike)) else list(source)


def _per_department(keyed: Mapping[tuple[str, str], list[Any]]) -> str:
    counts = Counter()
    for (dept, _), items in keyed.items():
        counts[dept] += len(items)
    return ", ".join(f"{d} {n}" for d, n in sorted(counts.items())) or "none"


def _nothing_loaded(tree: _Tree, report: CsptReport) -> str:
    """Why no case was built: what the source holds, and what a CSPT copy holds."""
    scripts, checklists = (_by_department(k) for k in _collect(tree))
    n_scripts = sum(len(v) for v in scripts.values())
    n_checklists = sum(len(v) for v in checklists.values())
    found = (f"{len(tree.files)} file(s)"
             + (f" (read from {len(tree.archives)} archive(s): {', '.join(tree.archives)})"
                if tree.archives else "")
             + f", {n_scripts} script case folder(s) (by department: "
               f"{_per_department(scripts)}), {n_checklists} checklist file(s) "
               f"(by department: {_per_department(checklists)})")
    if tree.skipped:
        found += f"; unreadable archive(s): {', '.join(tree.skipped)}"
    if n_scripts and not n_checklists:
        found += "; only scripts: the checklists archive (check_list/...) is missing"
    elif n_checklists and not n_scripts:
        found += "; only checklists: the scripts archive (script/...) is missing"
    elif n_scripts and n_checklists:
        found += "; " + report.summary().split(": ", 1)[1]
    departments = ", ".join(CSPT_DEPARTMENTS)
    return (f"{report.source}: no CSPT case loaded. Found {found}. Expected both halves of "
            "each case: script/<department>/<NN_case>/ (patient.json, chief_complaint.txt, "
            "script.json) and check_list/<department>/<NN_case>.json with the same "
            f"department and case number (departments {departments}), as the folder "
            "holding the published scripts and checklists archives, the two archives "
            "together, one archive holding both, or the unpacked folders.")


def load_cspt(source: Source | Sequence[Source], skip_bad: bool = False
              ) -> tuple[list[SPCase], CsptReport]:
    """CSPT cases and a report of what was and was not converted.

    ``source``: a folder or a zip, or several of them taken together (the scripts
    archive and the checklists archive). A folder may hold the archives (read in
    place), the unpacked ``script`` and ``check_list`` folders, or both; they are found
    at any depth. A malformed file raises :class:`~medpref.contracts.ContractError`
    naming the file (``archive.zip!member`` in a zip) and the field; with
    ``skip_bad=True`` it is listed in ``report.bad`` instead. No case at all raises
    :class:`CsptNotFoundError` saying what was found and what was expected.
    """
    sources = _sources(source)
    tree = _Tree(sources)
    report = CsptReport(source=" + ".join(str(s) for s in sources), junk_skipped=tree.junk)
    cases = list(_iter_cases(tree, report, skip_bad))
    report.cases = len(cases)
    if not cases:
        raise CsptNotFoundError(_nothing_loaded(tree, report))
    for case in cases:
        report.departments[case.department] = report.departments.get(case.department, 0) + 1
    ids = [c.id for c in cases]
    if len(set(ids)) != len(ids):
        raise ContractError(report.source, None, "id", "two cases got the same id")
    return cases, report


def cspt_cases(source: Source | Sequence[Source], skip_bad: bool = False) -> list[SPCase]:
    """The cases of :func:`load_cspt`. The report (cases per department) is logged: as a
    warning when something was not converted or a department has no case."""
    cases, report = load_cspt(source, skip_bad)
    level = logging.INFO if report.clean and not report.missing_departments else logging.WARNING
    _log.log(level, "%s", report.summary())
    return cases
