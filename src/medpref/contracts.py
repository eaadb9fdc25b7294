"""The data shapes every stage reads and writes (see ../shared/CONTRACTS.md).

Records are JSON Lines. Reading validates every line and stops at the first record that
breaks its contract with a :class:`ContractError` naming the file, the line and the
field; writing is atomic (a temporary file renamed into place), so a failed stage never
leaves a half-written output behind.

Stages may add fields of their own (``extra="allow"``) but never rename these.
"""

from __future__ import annotations

import codecs
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

Role = Literal["patient", "doctor"]


class Record(BaseModel):
    """Base of every contract record: extra fields kept, listed ones validated."""

    model_config = ConfigDict(extra="allow")


class Turn(Record):
    role: Role
    text: str


class ConsultationRecord(Record):
    """A consultation as stage 06 records it (one line of ``records/consultations.jsonl``):
    the one schema every reader of those lines validates with (the grading, the
    hand-grading tool, the transcripts page's parser); the fields after ``turns`` have
    defaults, so a page, which shows turns only, reads as a record too."""

    case: str
    doctor: str
    turns: list[Turn]
    department: str = ""
    lang: str = "en"
    kind: str = "model"
    doctor_model: str = ""
    rounds: int | None = None
    ended_by: str = "rounds"
    error: str | None = None
    steps: list[dict[str, Any]] = Field(default_factory=list)


class Dialogue(Record):
    id: str
    turns: list[Turn]
    lang: str = "en"
    source: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)

    @field_validator("turns")
    @classmethod
    def _non_empty(cls, turns: list[Turn]) -> list[Turn]:
        if not turns:
            raise ValueError("a dialogue needs at least one turn")
        return turns


class ClinicalNote(Record):
    id: str
    note: str
    sections: dict[str, str] | None = None
    reference_dialogue: list[Turn] | None = None
    lang: str = "en"
    source: str | None = None


def _no_blank_items(items: list[str]) -> list[str]:
    for i, item in enumerate(items):
        if not item.strip():
            raise ValueError(f"item {i} is blank")
    return items


class SPChecklist(Record):
    """Key items a doctor should cover: symptoms (incl. history), tests, diseases.

    Any list may be empty; scoring leaves an empty category out of that case's mean.
    """

    symptoms: list[str] = Field(default_factory=list)
    tests: list[str] = Field(default_factory=list)
    diseases: list[str] = Field(default_factory=list)

    _blank = field_validator("symptoms", "tests", "diseases")(_no_blank_items)


SP_CATEGORIES = ("symptoms", "tests", "diseases")
SPCategory = Literal["symptoms", "tests", "diseases"]


def _exchange(pair: dict[str, str]) -> dict[str, str]:
    """One scripted question and answer: exactly the keys ``doctor`` and ``patient``."""
    keys = set(pair)
    if keys != {"doctor", "patient"}:
        missing, extra = {"doctor", "patient"} - keys, keys - {"doctor", "patient"}
        raise ValueError(f"a script pair has exactly 'doctor' and 'patient' "
                         f"(missing {sorted(missing)}, extra {sorted(extra)})")
    for key in ("doctor", "patient"):
        if not pair[key].strip():
            raise ValueError(f"blank '{key}'")
    return pair


ScriptPair = Annotated[dict[str, str], AfterValidator(_exchange)]


class SPCase(Record):
    """A standardized-patient case: what the simulated patient knows and the checklist.

    ``patient_info`` maps a section name (present history, past history, tests, ...) to
    its text; ``script`` holds reference questions and answers (``{"doctor", "patient"}``
    dicts), possibly none; ``lang`` is ``en`` or ``zh`` (Chinese is compared by character).
    ``informant`` names who answers for the patient when that is not the patient (a
    family member: "患儿家属", "患者母亲"); the script's ``patient`` side is then that
    person, and the simulated patient speaks as them. None: the patient answers.
    """

    id: str = Field(min_length=1)
    department: str = Field(min_length=1)
    lang: str = "en"
    chief_complaint: str = Field(min_length=1)
    patient_info: dict[str, str]
    script: list[ScriptPair] = Field(default_factory=list)
    checklist: SPChecklist
    informant: str | None = None

    @field_validator("patient_info")
    @classmethod
    def _has_info(cls, info: dict[str, str]) -> dict[str, str]:
        if not any(v.strip() for v in info.values()):
            raise ValueError("a case needs at least one non-empty patient_info section")
        return info


class SPGradedItem(Record):
    """A hand-graded checklist item, for validating the SP checklist grader.

    ``transcript`` is the consultation (or the part of it that matters) the grader sees;
    ``passed`` is the gold label under the rubric (``docs/sp_grading_rubric.md``): the
    doctor actively asked about / requested / named ``item`` (a patient volunteering it does
    not count; naming four or more candidate diseases together fails a disease item).
    ``tag`` says what the item exercises (the sentence kind); ``lang`` is the language of
    the case. ``batch`` says when the item was graded and ``split`` which half it belongs to
    (``dev``: grader rules may be changed by looking at it; ``test``: reported only), both
    fixed when the item is added; an item without ``split`` is assigned one by
    :func:`medpref.simulation.validation.split_of`.
    """

    id: str = Field(min_length=1)
    case: str = Field(min_length=1)
    category: SPCategory
    item: str = Field(min_length=1)
    transcript: list[Turn]
    passed: bool
    tag: str = ""
    why: str = ""
    lang: str = "en"
    batch: str | None = None
    split: Literal["dev", "test"] | None = None

    @field_validator("transcript")
    @classmethod
    def _doctor_speaks(cls, transcript: list[Turn]) -> list[Turn]:
        if not any(t.role == "doctor" for t in transcript):
            raise ValueError("the transcript needs at least one doctor turn")
        return transcript


class Candidate(Record):
    response: str
    future: list[Turn] = Field(default_factory=list)
    source: Literal["sampled", "generated"]


class UnlabeledItem(Record):
    id: str
    history: list[Turn]
    candidates: list[Candidate]

    @field_validator("history")
    @classmethod
    def _ends_with_patient(cls, history: list[Turn]) -> list[Turn]:
        if not history or history[-1].role != "patient":
            raise ValueError("history must end with a patient turn")
        return history


# the annotation strategy that made a pair: a name of annotation.strategies (stage 04's
# registry, medpref.annotation.strategies); the papers' four are gpt4_rank, cai_avg,
# cai_dep and agent
Strategy = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")]


class PreferencePair(Record):
    id: str
    prompt: list[Turn]
    chosen: str
    rejected: str
    strategy: Strategy
    margin: float | None = None
    chosen_source: str | None = None
    rejected_source: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)


class RemAnnotation(Record):
    id: str
    rule: str
    history: list[Turn]
    score: Literal[0, 1, 2]
    comment: str


class Medicine(Record):
    generic_name: str
    brand_names: list[str] = Field(default_factory=list)
    attributes: dict[str, str]


class MedicineQAItem(Record):
    id: str
    history: list[Turn]
    question: str
    gold_medicine: str
    gold_attributes: list[str]
    reference: str | None = None


class HumanScores(Record):
    acc: float
    cmp: float
    spc: float


class ScoredQA(Record):
    id: str
    question: str
    reference: str
    response: str
    system: str
    human: HumanScores
    lang: str = "en"


class PairwiseJudgement(Record):
    id: str
    item: str
    model_a: str
    model_b: str
    winner: Literal["model_a", "model_b", "tie"]
    judge: str | None = None
    order: Literal["ab", "ba"] | None = None


class ContractError(ValueError):
    """A record that breaks its contract: names file, line (1-based) and field."""

    def __init__(self, path: str | os.PathLike, line: int | None, field: str, message: str):
        self.path, self.line, self.field = str(path), line, field
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: field '{field}': {message}")


M = TypeVar("M", bound=BaseModel)


def _publish(tmp: str, path: Path) -> None:
    """Give a finished temp file the usual permissions (mkstemp makes it 0600), rename it."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o666 & ~mask)
    os.replace(tmp, path)


def _first_error(exc: ValidationError) -> tuple[str, str]:
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "<record>"
    return field, err["msg"]


def parse_record(model: type[M], data: Any, path: str | os.PathLike = "<memory>",
                 line: int | None = None) -> M:
    """Validate one decoded record, raising :class:`ContractError` with its location."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        field, msg = _first_error(exc)
        raise ContractError(path, line, field, msg) from None


class DataFileError(ValueError):
    """A data file that cannot be read as text records (encoding, empty): one line that
    names the file, the line where known, and what to do."""

    def __init__(self, path: str | os.PathLike, line: int | None, message: str):
        self.path, self.line = str(path), line
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")


_WIDE = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)


def text_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of a UTF-8 file (a leading BOM is dropped, line ends kept).

    A UTF-16/32 file or a line that is not UTF-8 (latin-1, cp1252) raises
    :class:`DataFileError` naming the file and the line, instead of a bare
    ``UnicodeDecodeError`` from somewhere inside a reader."""
    with open(path, "rb") as fh:
        head = fh.read(4)
        if head.startswith(_WIDE) or b"\x00" in head:
            raise DataFileError(path, None, "the file is UTF-16/UTF-32, not UTF-8; save it "
                                            "as UTF-8 (e.g. `iconv -f utf-16 -t utf-8`)")
        fh.seek(0)
        for lineno, raw in enumerate(fh, start=1):
            if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8):]
            try:
                yield lineno, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataFileError(
                    path, lineno, f"not UTF-8 (byte 0x{raw[exc.start]:02x} at column "
                                  f"{exc.start + 1}); the file looks like latin-1/cp1252: "
                                  f"save it as UTF-8 (e.g. `iconv -f latin1 -t utf-8`)") from None


def iter_jsonl(path: str | os.PathLike, model: type[M], allow_empty: bool = False
               ) -> Iterator[M]:
    """Yield validated records of ``model`` from a JSONL file (blank lines skipped); a
    file with no record at all is an error naming it unless ``allow_empty``."""
    seen = 0
    for lineno, raw in text_lines(path):
        if not raw.strip():
            continue
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ContractError(path, lineno, "<json>", f"invalid JSON: {exc.msg}") from None
        seen += 1
        yield parse_record(model, data, path, lineno)
    if not seen and not allow_empty:
        raise DataFileError(path, None, f"empty file: no {model.__name__} records")


def read_jsonl(path: str | os.PathLike, model: type[M], allow_empty: bool = False) -> list[M]:
    """Read and validate a whole JSONL file; nothing is returned unless every line is valid."""
    return list(iter_jsonl(path, model, allow_empty))


def _to_jsonable(record: Any) -> Any:
    if isinstance(record, BaseModel):
        return record.model_dump(mode="json", exclude_none=True)
    return record


def write_jsonl(path: str | os.PathLike, records: Iterable[Any],
                model: type[BaseModel] | None = None) -> int:
    """Atomically write records (models or dicts) as JSONL; validate dicts against ``model``.

    Returns the number of records written. On any error the target file is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    count = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for count, record in enumerate(records, start=1):
                if model is not None and not isinstance(record, BaseModel):
                    record = parse_record(model, record, path, count)
                fh.write(json.dumps(_to_jsonable(record), ensure_ascii=False, sort_keys=False))
                fh.write("\n")
        _publish(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return count


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write a text file atomically (temp file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        _publish(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def turns_to_messages(turns: Iterable[Turn]) -> list[dict[str, str]]:
    """Plain dicts of turns, e.g. for prompts and JSON."""
    return [{"role": t.role, "text": t.text} for t in turns]
