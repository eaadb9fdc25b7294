"""What a stage writes, declared once: records, the tables and figures built from them.

A stage lists its outputs in one :class:`StageOutputs` (its package's ``outputs`` module):

* :class:`Records` — per-item JSON Lines under ``reports/<stage>/records/<name>.jsonl``,
  committed with the reports: every model answer, grade, score or training result a
  table is computed from, each row carrying its content ``key`` (a hash of what
  determined the row: the item, the model, the prompt, the settings);
* :class:`Table` and :class:`Figure` — built by a pure function of the records and the
  params (no model call, no training), written as CSV + Markdown or PNG;
* :class:`Page` — a self-contained text page (HTML, say) built the same way, written as
  the builder returns it and compared byte for byte;
* :class:`Data` — data products that stay out of git (DVC's cache): adapters, caches;
* :class:`Assembled` — a folder of files built from *other stages'* written tables and
  figures instead of records of its own (stage 09's paper tables): its builder reads the
  reports that the stages before it wrote, so ``medpref tables`` rebuilds it after them.

Writing iterates over the list (:meth:`StageOutputs.write`), ``medpref tables`` rebuilds
every table and figure from the committed records alone (:meth:`StageOutputs.rebuild`),
and dvc.yaml's outputs are read from the same list, so no path is typed twice.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medpref.contracts import ContractError, atomic_write_text, text_lines

RECORDS_DIR = "records"


def content_key(*parts: Any) -> str:
    """A short, stable hash of JSON-able parts (dict keys sorted): a row's content key."""
    blob = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


class BuildRecords(dict):
    """The records of one build, with what several of its builders share computed once
    (``memo``: name → value); it lives as long as the build's records do."""

    def __init__(self, records: Mapping[str, list[dict[str, Any]]]) -> None:
        super().__init__(records)
        self.memo: dict[str, Any] = {}


def shared(records: Mapping[str, Any], name: str, compute: Callable[[], Any]):
    """``compute()`` once per build (``records`` a :class:`BuildRecords`, as
    :meth:`StageOutputs.build` passes them); computed afresh for plain records."""
    memo = getattr(records, "memo", None)
    if memo is None:
        return compute()
    if name not in memo:
        memo[name] = compute()
    return memo[name]


@dataclass(frozen=True)
class Records:
    """One per-item record file; ``key`` names the fields that determine a row (hashed
    into its ``key`` by :meth:`keyed` when the row does not carry one already)."""

    name: str
    doc: str = ""
    key: tuple[str, ...] = ()

    def path(self, reports_dir: Path) -> Path:
        return reports_dir / RECORDS_DIR / f"{self.name}.jsonl"

    def keyed(self, rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The rows with their content key first (``key``: a hash of the declared fields,
        or of the whole row when none are declared)."""
        out = []
        for row in rows:
            row = dict(row)
            if "key" not in row:
                basis = [row.get(f) for f in self.key] if self.key else row
                row = {"key": content_key(self.name, basis), **row}
            out.append(row)
        return out


#: a table or figure builder: (records by name, the validated params) → what is written
Builder = Callable[[Mapping[str, list[dict[str, Any]]], Any], Any]


@dataclass(frozen=True)
class Table:
    """``<name>.csv`` + ``<name>.md`` built from records by ``build``."""

    name: str
    build: Builder
    floatfmt: str = ".3f"
    doc: str = ""

    def files(self, reports_dir: Path) -> list[Path]:
        return [reports_dir / f"{self.name}.csv", reports_dir / f"{self.name}.md"]


@dataclass(frozen=True)
class Figure:
    """``<name>.png`` drawn from records by ``build`` (``<file>.png`` when ``file`` is
    given: a figure that shares its file stem with a table of the stage)."""

    name: str
    build: Builder
    doc: str = ""
    file: str = ""

    def files(self, reports_dir: Path) -> list[Path]:
        return [reports_dir / f"{self.file or self.name}.png"]


@dataclass(frozen=True)
class Page:
    """``<name><suffix>``: a self-contained text page (an HTML page for readers, say) that
    ``build`` returns as a string from the records and the params; written as returned
    and, like a table, compared byte for byte (``<file><suffix>`` when ``file`` is given:
    a page that shares its file stem with another output, a table's CSV beside its own
    Markdown layout, say)."""

    name: str
    build: Builder
    suffix: str = ".html"
    doc: str = ""
    file: str = ""

    def files(self, reports_dir: Path) -> list[Path]:
        return [reports_dir / f"{self.file or self.name}{self.suffix}"]


@dataclass(frozen=True)
class Data:
    """A data product outside git (DVC-cached): ``persist`` keeps it across reruns."""

    path: str
    persist: bool = False
    doc: str = ""


#: an assembler: (the root holding ``reports/``, the validated params) → {path inside the
#: folder: the file's bytes}
Assembler = Callable[[Path, Any], Mapping[str, bytes]]


@dataclass(frozen=True)
class Assembled:
    """``<name>/`` under the stage's reports folder, every file in it made by ``build``
    from the reports the stages before it wrote (their CSVs and figures), not from
    records. It is rebuilt whole: a file the build no longer makes is removed (in place)
    or reported (``differences``), and every file is compared byte for byte."""

    name: str
    build: Assembler
    doc: str = ""

    def folder(self, reports_dir: Path) -> Path:
        return reports_dir / self.name


Output = Records | Table | Figure | Page | Data | Assembled


@dataclass(frozen=True)
class StageOutputs:
    """Everything one stage writes. ``stage`` is its notebook name (``08_medqa``);
    ``folder`` its reports folder under ``reports/`` when that is not the name (a sub-stage
    such as ``04_annotation/grid_table``)."""

    stage: str
    items: Sequence[Output] = field(default_factory=tuple)
    folder: str = ""

    def __post_init__(self) -> None:
        names = [o.name for o in self.items if not isinstance(o, Data)]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"{self.stage}: outputs declared twice: {twice}")

    def reports_dir(self, root: Path) -> Path:
        return root / "reports" / (self.folder or self.stage)

    @property
    def records(self) -> list[Records]:
        return [o for o in self.items if isinstance(o, Records)]

    @property
    def built(self) -> list[Table | Figure | Page]:
        return [o for o in self.items if isinstance(o, Table | Figure | Page)]

    @property
    def data(self) -> list[Data]:
        return [o for o in self.items if isinstance(o, Data)]

    @property
    def assembled(self) -> list[Assembled]:
        return [o for o in self.items if isinstance(o, Assembled)]

    # -- writing ----------------------------------------------------------------------
    def write_records(self, reports_dir: Path, records: Mapping[str, Iterable[Mapping]]
                      ) -> dict[str, list[dict[str, Any]]]:
        """Write every declared record file (each must be given; an undeclared name is
        an error) and return the rows as written, keys included."""
        declared = {r.name: r for r in self.records}
        unknown = sorted(set(records) - set(declared))
        missing = sorted(set(declared) - set(records))
        if unknown or missing:
            raise ValueError(f"{self.stage}: records not declared {unknown}, "
                             f"declared but not given {missing}")
        written = {}
        for name, spec in declared.items():
            rows = spec.keyed(records[name])
            write_rows(spec.path(reports_dir), rows)
            written[name] = rows
        return written

    def build(self, records: Mapping[str, list[dict[str, Any]]], params: Any
              ) -> dict[str, Any]:
        """Every table and figure, from the records and the params alone; what several
        builders share is computed once for the build (:func:`shared`)."""
        if not isinstance(records, BuildRecords):
            records = BuildRecords(records)
        return {o.name: o.build(records, params) for o in self.built}

    def write_built(self, reports_dir: Path, built: Mapping[str, Any]) -> list[Path]:
        from medpref.reports import save_figure, write_table

        paths: list[Path] = []
        for o in self.built:
            if isinstance(o, Table):
                paths += write_table(built[o.name], reports_dir / o.name, o.floatfmt).values()
            elif isinstance(o, Page):
                path = o.files(reports_dir)[0]
                atomic_write_text(path, built[o.name])
                paths.append(path)
            else:
                paths.append(save_figure(built[o.name], o.files(reports_dir)[0]))
                _release(built[o.name])
        return paths

    def assemble(self, reports_dir: Path, params: Any) -> dict[str, dict[str, bytes]]:
        """Every :class:`Assembled` folder's files, from the reports beside ``reports_dir``
        (the root is the folder that holds ``reports/``)."""
        root = reports_dir.parent.parent
        return {o.name: dict(o.build(root, params)) for o in self.assembled}

    def write_assembled(self, reports_dir: Path, files: Mapping[str, Mapping[str, bytes]]
                        ) -> list[Path]:
        """Write each assembled folder's files; a file left in the folder by an earlier
        build that this one does not make is removed (the folder is wholly generated)."""
        paths: list[Path] = []
        for o in self.assembled:
            folder = o.folder(reports_dir)
            fresh = [folder / rel for rel in files[o.name]]
            if folder.is_dir():
                for old in sorted(p for p in folder.rglob("*") if p.is_file()):
                    if old not in fresh:
                        old.unlink()
            for path, data in zip(fresh, files[o.name].values()):
                _write_bytes(path, data)
            paths += fresh
        return paths

    def write(self, reports_dir: Path, records: Mapping[str, Iterable[Mapping]], params: Any
              ) -> dict[str, Any]:
        """Records first, then the tables and figures built from them as written (the
        same path ``medpref tables`` takes), then any assembled folder; returns the built
        objects by name (an assembled folder's: its files)."""
        written = self.write_records(reports_dir, records)
        built = self.build(written, params)
        self.write_built(reports_dir, built)
        assembled = self.assemble(reports_dir, params)
        self.write_assembled(reports_dir, assembled)
        return {**built, **assembled}

    # -- reading back -----------------------------------------------------------------
    def load_records(self, reports_dir: Path) -> dict[str, list[dict[str, Any]]]:
        return {r.name: read_rows(r.path(reports_dir)) for r in self.records}

    def rebuild(self, reports_dir: Path, params: Any, out_dir: Path | None = None
                ) -> list[Path]:
        """Rebuild every table and figure from the committed records into ``out_dir``
        (default: in place); returns the files written."""
        built = self.build(self.load_records(reports_dir), params)
        paths = self.write_built(out_dir or reports_dir, built)
        return paths + self.write_assembled(out_dir or reports_dir,
                                            self.assemble(reports_dir, params))

    def differences(self, reports_dir: Path, params: Any, scratch: Path) -> list[str]:
        """The tables (CSV and Markdown) and pages whose rebuild from the records differs
        from the file in ``reports_dir``; figures are rebuilt but not compared byte for byte. An
        assembled folder is compared whole: every file byte for byte, and a committed file
        the rebuild does not make."""
        self.rebuild(reports_dir, params, scratch)
        diffs = []
        for o in self.built:
            if isinstance(o, Figure):
                continue
            for committed in o.files(reports_dir):
                fresh = scratch / committed.name
                if not committed.exists():
                    diffs.append(f"{committed}: missing (the rebuild writes it)")
                elif committed.read_bytes() != fresh.read_bytes():
                    diffs.append(f"{committed}: differs from its rebuild from the records")
        for a in self.assembled:
            diffs += _folder_differences(a.folder(reports_dir), a.folder(scratch))
        return diffs


def _files_under(folder: Path) -> set[Path]:
    if not folder.is_dir():
        return set()
    return {p.relative_to(folder) for p in folder.rglob("*") if p.is_file()}


def _folder_differences(committed: Path, fresh: Path) -> list[str]:
    """An assembled folder against its rebuild: missing, differing and stale files."""
    ours, theirs = _files_under(committed), _files_under(fresh)
    diffs = []
    for rel in sorted(ours | theirs):
        if rel not in ours:
            diffs.append(f"{committed / rel}: missing (the rebuild writes it)")
        elif rel not in theirs:
            diffs.append(f"{committed / rel}: the rebuild does not make it (stale)")
        elif (committed / rel).read_bytes() != (fresh / rel).read_bytes():
            diffs.append(f"{committed / rel}: differs from its rebuild from the stages' "
                         "reports")
    return diffs


def _write_bytes(path: Path, data: bytes) -> None:
    """A file written atomically (temp file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _release(fig) -> None:
    """Let pyplot forget a written figure (the object still shows in a notebook), so a
    stage that draws many does not pile them up in pyplot's registry."""
    import matplotlib.pyplot as plt

    plt.close(fig)


def write_rows(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """JSON Lines with keys in the order given, atomically (one row a line, UTF-8)."""
    text = "".join(json.dumps(r, ensure_ascii=False, default=_plain) + "\n" for r in rows)
    atomic_write_text(path, text)


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a record file; a line that is not a JSON object is a ContractError
    naming the file and the line."""
    rows = []
    for lineno, line in text_lines(path):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ContractError(path, lineno, "(line)", f"not JSON: {exc.msg}") from None
        if not isinstance(row, dict):
            raise ContractError(path, lineno, "(line)", "a record is a JSON object")
        rows.append(row)
    return rows


def _plain(value: Any) -> Any:
    """numpy scalars and other simple objects as JSON values."""
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    raise TypeError(f"not JSON-able in a record: {type(value).__name__}")
