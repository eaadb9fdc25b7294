"""Stage 09's outputs, declared once: the folder of paper tables, assembled from the other
stages' written reports.

Stage 09 has no records of its own: its inputs are the tables and figures the stages
before it wrote (the registry, ``configs/paper_tables.yaml``, names each one), and those
are rebuilt from their own records first. So its one output is an
:class:`~medpref.outputs.Assembled` folder, ``reports/09_tables/paper/``, whose builder
(:func:`paper_files`) reads the stages' CSVs and figures beside stage 09's reports folder
through the params (``tables.registry``, ``tables.digits``). The stage's run and
``medpref tables`` (listed last in :data:`medpref.pipeline.STAGES`, after the stages it
reads) take this same path; ``reports/index.md`` and the headline ``metrics.json`` are
the run's, not tables rebuilt here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from medpref.outputs import Assembled, StageOutputs
from medpref.papertables.build import BuiltTable, MissingSource, build_table, render_built
from medpref.papertables.spec import ArtefactSpec, Registry, load_registry
from medpref.params import repo_path

STAGE, FOLDER = "09_tables", "paper"


@dataclass
class Assembly:
    """Every registered artefact: its status row, its built table, its files' bytes
    (paths inside the ``paper/`` folder)."""

    status: pd.DataFrame
    built: dict[str, BuiltTable] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)


def figure_files(spec: ArtefactSpec, root: Path) -> dict[str, bytes]:
    """A figure artefact: the stage's PNG (and its PDF, where written), copied."""
    src = root / spec.source
    if not src.exists():
        raise MissingSource(f"{spec.source} not found (stage '{spec.stage}' has not made it)")
    return {f"figures/{spec.id}{s.suffix}": s.read_bytes()
            for s in (src, src.with_suffix(".pdf")) if s.exists()}


def artefact_files(spec: ArtefactSpec, root: Path, digits: int
                   ) -> tuple[dict[str, bytes], BuiltTable | None]:
    if spec.kind == "figure":
        return figure_files(spec, root), None
    built = build_table(spec, root)
    return {n: t.encode("utf-8") for n, t in render_built(built, digits).items()}, built


def assemble(registry: Registry, root: Path, digits: int) -> Assembly:
    """Every artefact whose source a stage has written (``root`` holds ``reports/``); one
    whose source is missing is listed as not made."""
    rows, built, files = [], {}, {}
    for spec in registry.artefacts:
        row = {"paper": spec.paper, "artefact": spec.label, "stage": spec.stage}
        try:
            made, table = artefact_files(spec, root, digits)
        except MissingSource as exc:
            rows.append({**row, "status": "not made", "files": str(exc), "from": spec.source})
            continue
        if table is not None:
            built[spec.id] = table
        files.update(made)
        links = ", ".join(f"[{Path(n).suffix[1:]}]({STAGE}/{FOLDER}/{n})" for n in made)
        rows.append({**row, "status": "made", "files": links, "from": spec.source})
    return Assembly(pd.DataFrame(rows), built, files)


def paper_files(root: Path, params) -> dict[str, bytes]:
    """The ``paper/`` folder's files, from the stages' reports under ``root``."""
    p = params.tables
    return assemble(load_registry(repo_path(p.registry)), root, p.digits).files


OUTPUTS = StageOutputs(STAGE, (
    Assembled(FOLDER, paper_files, doc="every registered paper artefact: tables as CSV, "
              "Markdown and LaTeX, figures copied (figures/)"),
))
