"""Stage 09's run: build every registered artefact that its stage has made."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from medpref.contracts import atomic_write_text
from medpref.papertables.build import BuiltTable, MissingSource, build_table, write_built
from medpref.papertables.index import render_index
from medpref.papertables.spec import ArtefactSpec, Headline, load_registry
from medpref.params import repo_path
from medpref.stagekit import Stage


@dataclass
class TablesOutputs:
    status: pd.DataFrame
    built: dict[str, BuiltTable] = field(default_factory=dict)
    headlines: dict[str, float | None] = field(default_factory=dict)

    @property
    def metrics(self) -> dict:
        """The headline numbers (None where a stage has not made its metric) and how many
        paper artefacts were made: the only metrics file ``dvc metrics show`` prints."""
        made = int((self.status["status"] == "made").sum())
        return {**self.headlines, "paper_made": made}


def headline_value(h: Headline, root: Path) -> float | None:
    """The number at ``h.key`` in ``h.source``; None when the stage has not written it.
    A value that is there but not a number is a registry error."""
    path = root / h.source
    if not path.exists():
        return None
    node = json.loads(path.read_text(encoding="utf-8"))
    for key in h.key:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    if node is not None and (isinstance(node, bool) or not isinstance(node, int | float)):
        raise ValueError(f"headline '{h.name}': {h.source} key {h.key} is {node!r}, "
                         "not a number")
    return node if node is None or isinstance(node, int) else round(float(node), 3)


def _copy_figure(spec: ArtefactSpec, root: Path, out_dir: Path) -> list[Path]:
    src = root / spec.source
    if not src.exists():
        raise MissingSource(f"{spec.source} not found (stage '{spec.stage}' has not made it)")
    copied = []
    for s in (src, src.with_suffix(".pdf")):
        if s.exists():
            dest = out_dir / "figures" / f"{spec.id}{s.suffix}"
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(s, dest)
            copied.append(dest)
    return copied


def build_artefact(spec: ArtefactSpec, root: Path, out_dir: Path,
                   digits: int) -> tuple[list[Path], BuiltTable | None]:
    if spec.kind == "figure":
        return _copy_figure(spec, root, out_dir), None
    built = build_table(spec, root)
    return write_built(built, out_dir, digits), built


def run(stage: Stage) -> TablesOutputs:
    p = stage.p
    # the folder holding the stages' reports/: the repository (reports/09_tables/..), or
    # wherever the stage's own reports folder was moved with the others (a test's tmp_path)
    root = stage.reports_dir.parent.parent
    registry = load_registry(repo_path(p.registry))
    rows, built = [], {}
    for spec in registry.artefacts:
        try:
            paths, table = build_artefact(spec, root, stage.reports_dir / "paper", p.digits)
            if table is not None:
                built[spec.id] = table
            files = ", ".join(f"[{q.suffix[1:]}]({q.relative_to(root / 'reports').as_posix()})"
                              for q in paths)
            rows.append({"paper": spec.paper, "artefact": spec.label, "stage": spec.stage,
                         "status": "made", "files": files, "from": spec.source})
        except MissingSource as exc:
            rows.append({"paper": spec.paper, "artefact": spec.label, "stage": spec.stage,
                         "status": "not made", "files": str(exc), "from": spec.source})
    status = pd.DataFrame(rows)
    out = TablesOutputs(status, built,
                        {h.name: headline_value(h, root) for h in registry.headlines})
    stage.check_yield(out.metrics["paper_made"], len(status), what="paper artefacts")
    atomic_write_text(repo_path(p.index), render_index(root / "reports", status))
    return out
