"""AgentClinic's case files (``agentclinic/agentclinic_<name>.jsonl``) into SP cases.

AgentClinic publishes four files (:data:`AGENTCLINIC_FILES`): ``medqa`` (107 OSCE cases),
``medqa_extended`` (214, the last line without a newline), ``nejm`` (15) and
``nejm_extended`` (120). The MedQA files hold OSCE
records (``OSCE_Examination``); the NEJM files hold image-challenge records (``question``,
``patient_info``, ``physical_exams``, ``answers`` with the correct one marked,
``image_url``), converted as text only (:func:`nejm_case_record`). Each record is
converted by its shape, whatever the file.

A case without symptoms is a case: MedQA extended has an asymptomatic screening patient
(``"Symptoms": {}``) whose complaint is the reason for the visit (:func:`osce_complaint`).
A malformed row (invalid JSON, neither shape, a field the case needs missing) is skipped
and reported with its file, line and reason (:class:`SkippedRow`, on the returned
:class:`AgentClinicCases`) while the rest load; a file with rows but no case is an error.

Ids: ``agentclinic-<line:04d>`` for ``medqa`` (as before other files existed),
``agentclinic-<name>-<line:04d>`` for the others; ``source`` is ``agentclinic`` and
``meta`` names the file and line.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medpref.contracts import ContractError, SPCase, parse_record
from medpref.data.readers import data_root, jsonl_lines, require_field
from medpref.sentences import first_sentence

_log = logging.getLogger(__name__)
AGENTCLINIC_DIR = Path("agentclinic")
#: the published files by the name a params file uses (``simulation.agentclinic_file``)
AGENTCLINIC_FILES = {name: f"agentclinic_{name}.jsonl"
                     for name in ("medqa", "medqa_extended", "nejm", "nejm_extended")}
AGENTCLINIC_FILE = AGENTCLINIC_DIR / AGENTCLINIC_FILES["medqa"]
#: what the doctor is asked in a NEJM case (AgentClinic's own wording for these files)
NEJM_OBJECTIVE = "What is the most likely diagnosis?"


# Test_Results keys made only of these words group tests ("Imaging", "Blood_Tests",
# "Laboratory_Studies"): their children are the tests. Children with these names
# are result fields, not tests.
_GROUP_WORDS = frozenset("additional analysis and basic blood imaging lab laboratory other "
                         "results screening serum special studies test tests values work".split())
_NOT_WANTED = re.compile(r"(optional|not (indicated|required|necessary|performed|done)|n/?a\b)",
                         re.IGNORECASE)
_RESULT_FIELDS = frozenset("findings result results level interpretation suggestion other".split())
#: a text's first sentence (a history's, a NEJM question's)


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


def _leaves(value: Any) -> list[str]:
    """Texts of a result; a key that is not a result field leads its child's text."""
    if isinstance(value, dict):
        return [s if k.lower() in _RESULT_FIELDS else f"{k}: {s}"
                for k, v in value.items() for s in _leaves(v)]
    if isinstance(value, list):
        return [s for v in value for s in _leaves(v)]
    return [] if value is None else [str(value)]


def _not_wanted(value: Any) -> bool:
    """A result that only says the test is optional or not indicated (not a key test);
    a text with a number in it reports a value, so it counts as a result."""
    leaves = _leaves(value)
    return bool(leaves) and all(_NOT_WANTED.match(s.strip()) and not re.search(r"\d", s)
                                for s in leaves)


def checklist_tests(results: Mapping[str, Any]) -> list[str]:
    """Names of the key tests in an AgentClinic ``Test_Results`` block, deduplicated.

    A top-level key is a test ("Complete_Blood_Count", "Electromyography") unless it
    only groups others ("Imaging": {"Chest_CT": ...}), when its children are used. A
    test whose result only says it is optional or not indicated ("MRI_Knee":
    "Optional: ...") is left out: the doctor is not expected to order it.
    """
    names: list[str] = []
    for key, value in results.items():
        words = set(re.split(r"[_\s-]+", key.lower()))
        if isinstance(value, dict) and words <= _GROUP_WORDS:
            names += [k for k, v in value.items()
                      if k.lower() not in _RESULT_FIELDS and not _not_wanted(v)]
        elif not _not_wanted(value):
            names.append(key)
    return list(dict.fromkeys(_humanise(n) for n in names))



def _symptom_list(symptoms: Any) -> list[str]:
    """Primary then secondary symptoms; none (``{}``, missing, empty strings) is []."""
    if isinstance(symptoms, str):
        symptoms = {"Primary_Symptom": symptoms}
    elif isinstance(symptoms, list):
        symptoms = {"Secondary_Symptoms": symptoms}
    elif not isinstance(symptoms, Mapping):
        symptoms = {}
    secondary = symptoms.get("Secondary_Symptoms") or []
    if not isinstance(secondary, list):
        secondary = [secondary]
    items = [symptoms.get("Primary_Symptom"), *secondary]
    return list(dict.fromkeys(s.strip() for s in items if isinstance(s, str) and s.strip()))


def osce_complaint(osce: Mapping[str, Any], actor: Mapping[str, Any]) -> tuple[str, str]:
    """What the patient comes with, and which field gave it: the primary symptom; for a
    patient without one (an asymptomatic screening visit) the first sentence of the
    actor's history ("... presents for a follow-up visit after a routine screening ..."),
    else the doctor's objective. ``("", "")`` when the record has none of the three."""
    primary = actor.get("Symptoms")
    primary = primary.get("Primary_Symptom") if isinstance(primary, Mapping) else primary
    if isinstance(primary, str) and primary.strip():
        return primary.strip(), "Primary_Symptom"
    history = actor.get("History")
    if isinstance(history, str) and history.strip():
        return first_sentence(history.strip()).strip(), "History"
    objective = osce.get("Objective_for_Doctor")
    if isinstance(objective, str) and objective.strip():
        return objective.strip(), "Objective_for_Doctor"
    return "", ""


def _load_record(raw: str, path: Path, line: int) -> dict[str, Any]:
    try:
        record = json.loads(raw.strip())
    except json.JSONDecodeError as exc:
        raise ContractError(path, line, "<json>", f"invalid JSON: {exc.msg}") from None
    if not isinstance(record, dict):
        raise ContractError(path, line, "<record>", "not a JSON object")
    return record


def osce_case_record(record: Mapping[str, Any], path: Path, line: int) -> dict[str, Any]:
    """The SP case fields of a MedQA OSCE record (id, source and meta left to the caller).

    A patient without symptoms (``Symptoms`` empty or missing) has an empty symptom
    checklist and the complaint of :func:`osce_complaint`; ``meta.complaint_from`` names
    the field it came from."""
    osce = require_field(record, "OSCE_Examination", path, line)
    actor = require_field(osce, "Patient_Actor", path, line)
    if not isinstance(actor, Mapping):
        raise ContractError(path, line, "OSCE_Examination.Patient_Actor", "not an object")
    complaint, source = osce_complaint(osce, actor)
    if not complaint:
        raise ContractError(path, line, "OSCE_Examination.Patient_Actor.Symptoms",
                            "no primary symptom, history or objective to open the visit")
    diagnosis = str(require_field(osce, "Correct_Diagnosis", path, line)).strip()
    results = osce.get("Test_Results") or {}
    info = {_humanise(k): flatten_value(v) for k, v in actor.items()}
    info["Physical Examination Findings"] = flatten_value(osce.get("Physical_Examination_Findings"))
    info["Test Results"] = flatten_value(results)
    return {
        "department": "general", "lang": "en",
        "chief_complaint": complaint, "patient_info": {k: v for k, v in info.items() if v},
        "checklist": {"symptoms": _symptom_list(actor.get("Symptoms")),
                      "tests": checklist_tests(results) if isinstance(results, dict) else [],
                      "diseases": [diagnosis]},
        "objective": str(osce.get("Objective_for_Doctor", "")).strip(),
        "meta": {"complaint_from": source},
    }


# ---------------------------------------------------------------- NEJM image challenges

# Where a NEJM question points at its image: a panel named in parentheses ("(left)",
# "(right, hematoxylin and eosin stain)"), a mark on it ("(arrows)", "(... solid arrow)",
# "(left, box)", an inset), or words that show it ("results are shown", "pictured").
_IMAGE_CUES = re.compile(
    r"\((?:left|right|middle|center|centre|top|bottom)(?:\s+(?:panel|image|inset))?"
    r"(?:\s*[,;][^()]*)?\)"
    r"|\([^()]*\b(?:arrows?|arrowheads?|asterisks?|insets?|box(?:es)?|panels?\s+[a-z]|shown)\b"
    r"[^()]*\)"
    r"|\b(?:is|are|was|were)\s+shown\b|\bas\s+shown\b|\bshown\s+(?:here|below|above)\b"
    r"|\b(?:images?|photographs?|photos?|figures?|pictured|depicted)\b",
    re.IGNORECASE)
_PRESENTED = re.compile(r"\b(?:present(?:ed|s|ing)?|referred|seen|evaluated)\b.*?"
                        r"\b(?:with|because of|for)\s+(.+)$", re.IGNORECASE | re.DOTALL)
_HISTORY_OF = re.compile(r"^(?:an?\s+)?(?:[\w-]+\s+)?history\s+of\s+", re.IGNORECASE)
_ARTICLE = re.compile(r"^(?:an?|the)\s+", re.IGNORECASE)
_LIST_SPLIT = re.compile(r"\s*,\s*(?:and\s+)?|\s+and\s+")
# a bullet (" - "), a numbered item ("1. ") or a new "Label: result" sentence of a NEJM
# physical_exams text
_EXAM_ITEM = re.compile(r"(?:^|\s)(?:-|\d{1,2}\.)\s+|(?<=\.)\s+(?=[A-Z][^.:]{0,80}:\s)")
# a physical_exams text that only says the case has no readings (the generator's note)
_NO_READINGS = re.compile(r"^[^.:]*\b(?:does not|doesn't|do not) (?:include|contain|provide)\b",
                          re.IGNORECASE)
_EXAM_LABEL_TAIL = re.compile(r"\s+(?:findings|results?|readings?)$", re.IGNORECASE)


def image_cues(question: str) -> list[str]:
    """The phrases by which a NEJM question relies on its image (empty: text alone)."""
    return list(dict.fromkeys(m.group(0) for m in _IMAGE_CUES.finditer(question)))


def _capitalised(text: str) -> str:
    return text[:1].upper() + text[1:]


def nejm_complaint(question: str) -> str:
    """The presenting complaint of a NEJM vignette: what the patient "presented with" (or
    was "referred with", ...) in the first sentence, without its duration ("a 3-week
    history of ..."); else the whole first sentence."""
    first = first_sentence(question.strip()).strip()
    presented = _PRESENTED.search(first.rstrip(".?!"))
    if not presented:
        return first
    return _capitalised(_HISTORY_OF.sub("", presented.group(1).strip()))


def nejm_symptoms(complaint: str) -> list[str]:
    """The complaint's list items ("neck swelling, fevers, and weight loss" -> three)."""
    items = (_ARTICLE.sub("", _HISTORY_OF.sub("", part.strip())) for part in
             _LIST_SPLIT.split(complaint.rstrip(".")))
    return list(dict.fromkeys(_capitalised(i.strip()) for i in items if i.strip()))


def nejm_tests(physical_exams: str) -> list[str]:
    """Test names of a NEJM ``physical_exams`` text: the labels of its ``label: result``
    items (bullets or numbered), without "findings"/"results"; a label with no result
    (a heading such as "Laboratory studies:") or of more than eight words is left out."""
    names = []
    for item in _EXAM_ITEM.split(physical_exams):
        label, colon, result = item.partition(":")
        label = _EXAM_LABEL_TAIL.sub("", label.strip())
        if colon and result.strip() and label and len(label.split()) <= 8:
            names.append(label)
    return list(dict.fromkeys(names))


def _correct_answer(record: Mapping[str, Any], path: Path, line: int) -> tuple[str, list[str]]:
    answers = require_field(record, "answers", path, line)
    if not isinstance(answers, list) or not all(isinstance(a, dict) for a in answers):
        raise ContractError(path, line, "answers", "not a list of {text, correct} objects")
    correct = [str(a.get("text", "")).strip() for a in answers if a.get("correct") is True]
    if len(correct) != 1 or not correct[0]:
        raise ContractError(path, line, "answers",
                            f"{len(correct)} choice(s) marked correct; expected exactly one")
    return correct[0], [str(a.get("text", "")).strip() for a in answers]


def nejm_case_record(record: Mapping[str, Any], path: Path, line: int) -> dict[str, Any]:
    """The SP case fields of a NEJM image-challenge record, as text (the image is not used).

    ``patient_info``: ``History`` (the actor's brief, bold marks removed) and ``Physical
    Examination and Test Results`` (``physical_exams``, left out when it only says the
    case has no readings); ``chief_complaint``:
    :func:`nejm_complaint` of the question; checklist: :func:`nejm_symptoms`,
    :func:`nejm_tests` and the answer marked correct. ``meta.image_dependent`` is True
    when the question points at its image (:func:`image_cues`, kept in
    ``meta.image_cues``): the text alone may not settle the diagnosis, so a user can
    leave those cases out. ``meta`` also keeps the question, the choices, the image URL
    and the image types (``type``, extended file).
    """
    question = str(require_field(record, "question", path, line)).strip()
    actor = str(require_field(record, "patient_info", path, line)).replace("**", "").strip()
    exams = str(record.get("physical_exams") or "").strip()
    exams = "" if _NO_READINGS.match(exams) else exams
    diagnosis, choices = _correct_answer(record, path, line)
    complaint = nejm_complaint(question)
    cues = image_cues(question)
    info = {"History": actor, "Physical Examination and Test Results": exams}
    return {
        "department": "general", "lang": "en", "chief_complaint": complaint,
        "patient_info": {k: v for k, v in info.items() if v},
        "checklist": {"symptoms": nejm_symptoms(complaint), "tests": nejm_tests(exams),
                      "diseases": [diagnosis]},
        "objective": NEJM_OBJECTIVE,
        "meta": {"image_dependent": bool(cues), "image_cues": cues,
                 "image_url": record.get("image_url"), "image_types": record.get("type") or [],
                 "question": question, "choices": choices},
    }


def _agentclinic_case(line: int, raw: str, path: Path, name: str) -> SPCase:
    record = _load_record(raw, path, line)
    if "OSCE_Examination" in record:
        fields = osce_case_record(record, path, line)
    elif "question" in record or "answers" in record:
        fields = nejm_case_record(record, path, line)
    else:
        raise ContractError(path, line, "<record>", "neither an OSCE record "
                            "(OSCE_Examination) nor a NEJM one (question, answers)")
    prefix = "agentclinic" if name == "medqa" else f"agentclinic-{name}"
    meta = {"file": path.name, "line": line, **fields.pop("meta", {})}
    return parse_record(SPCase, {"id": f"{prefix}-{line:04d}", **fields, "source": "agentclinic",
                                 "meta": meta}, path, line)


def agentclinic_path(root: str | os.PathLike | None = None, file: str = "medqa") -> Path:
    """The JSONL file of one published AgentClinic file name (an error naming the files
    present when it is missing)."""
    if file not in AGENTCLINIC_FILES:
        raise ValueError(f"unknown AgentClinic file {file!r}; expected one of "
                         f"{sorted(AGENTCLINIC_FILES)}")
    folder = data_root(root) / AGENTCLINIC_DIR
    path = folder / AGENTCLINIC_FILES[file]
    if not path.is_file():
        present = sorted(p.name for p in folder.glob("agentclinic_*.jsonl")) or ["none"]
        raise FileNotFoundError(f"{path}: AgentClinic file {file!r} not found "
                                f"(present: {', '.join(present)})")
    return path


@dataclass(frozen=True)
class SkippedRow:
    """A row left out of the cases: where it is and why."""

    file: str
    line: int
    field: str
    reason: str

    @classmethod
    def of(cls, error: ContractError) -> SkippedRow:
        return cls(Path(error.path).name, error.line or 0, error.field,
                   str(error).split(f"field '{error.field}': ", 1)[-1])

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: field '{self.field}': {self.reason}"


class AgentClinicCases(list):
    """The cases of one file (a list of :class:`SPCase`) and the rows skipped as
    malformed (``skipped``), so a stage can count them in its report."""

    def __init__(self, cases: Iterable[SPCase] = (), skipped: Iterable[SkippedRow] = ()):
        super().__init__(cases)
        self.skipped: list[SkippedRow] = list(skipped)


def _collect_cases(path: Path, file: str, limit: int | None, skip_bad: bool
                   ) -> AgentClinicCases:
    out = AgentClinicCases()
    for line, raw in jsonl_lines(path):
        if limit is not None and len(out) >= limit:
            break
        try:
            out.append(_agentclinic_case(line, raw, path, file))
        except ContractError as exc:
            if not skip_bad:
                raise
            out.skipped.append(SkippedRow.of(exc))
            _log.warning("skipped malformed AgentClinic row %s", out.skipped[-1])
    return out


def agentclinic_cases(root: str | os.PathLike | None = None, limit: int | None = None,
                      skip_bad: bool = True, file: str = "medqa") -> AgentClinicCases:
    """AgentClinic cases of one published file (``file``: :data:`AGENTCLINIC_FILES`).

    OSCE records (MedQA): ``chief_complaint`` is the primary symptom (for a patient
    without symptoms, :func:`osce_complaint`); ``patient_info`` the patient actor's
    sections plus the physical-exam findings and test results, flattened to text;
    checklist: primary + secondary symptoms (possibly none), :func:`checklist_tests` of
    the test results, and the correct diagnosis. NEJM records: see
    :func:`nejm_case_record`. The records carry no specialty, so the department is
    ``general``; ``objective`` keeps the doctor's task. Ids use the JSONL line number.
    ``script`` is empty: the data set has no reference dialogue, and the simulated patient
    answers from ``patient_info`` alone (deriving question-answer pairs from the sections
    would put our wording, not the data's, in the knowledge base).

    A malformed row is skipped, logged and kept in the result's ``skipped`` (file, line,
    field, reason) while the rest load (``skip_bad=False``: the first one raises its
    :class:`~medpref.contracts.ContractError`). A file whose rows are all malformed is an
    error that quotes the first reasons.
    """
    path = agentclinic_path(root, file)
    cases = _collect_cases(path, file, limit, skip_bad)
    if cases.skipped and not cases:
        reasons = "; ".join(str(s) for s in cases.skipped[:3])
        raise ValueError(f"{path}: no AgentClinic case loaded, {len(cases.skipped)} malformed "
                         f"row(s): {reasons}")
    return cases
