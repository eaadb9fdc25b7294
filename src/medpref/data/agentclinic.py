"""AgentClinic OSCE (``agentclinic/agentclinic_medqa.jsonl``) into standardized-patient cases.

Ids: ``agentclinic-<line:04d>``; ``source`` is ``agentclinic``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from medpref.contracts import ContractError, SPCase, parse_record
from medpref.data.readers import collect_rows, data_root, jsonl_lines, require_field

AGENTCLINIC_FILE = Path("agentclinic", "agentclinic_medqa.jsonl")


# Test_Results keys made only of these words group tests ("Imaging", "Blood_Tests",
# "Laboratory_Studies"): their children are the tests. Children with these names
# are result fields, not tests.
_GROUP_WORDS = frozenset("additional analysis and basic blood imaging lab laboratory other "
                         "results screening serum special studies test tests values work".split())
_NOT_WANTED = re.compile(r"(optional|not (indicated|required|necessary|performed|done)|n/?a\b)",
                         re.IGNORECASE)
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
    osce = require_field(record, "OSCE_Examination", path, line)
    actor = require_field(osce, "Patient_Actor", path, line)
    primary = str(require_field(actor, "Symptoms.Primary_Symptom", path, line)).strip()
    diagnosis = str(require_field(osce, "Correct_Diagnosis", path, line)).strip()
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
    ``script`` is empty: the data set has no reference dialogue, and the simulated patient
    answers from ``patient_info`` alone (deriving question-answer pairs from the sections
    would put our wording, not the data's, in the knowledge base).
    """
    path = data_root(root) / AGENTCLINIC_FILE
    return collect_rows(jsonl_lines(path), lambda line, raw: _agentclinic_case(line, raw, path),
                    path, limit, skip_bad)
