"""Stage 09's run: build every registered artefact that its stage has made (the files:
:mod:`medpref.papertables.outputs`), the index and the headline metrics."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from medpref.contracts import atomic_write_text
from medpref.papertables.build import BuiltTable
from medpref.papertables.index import render_index
from medpref.papertables.outputs import FOLDER, OUTPUTS, assemble
from medpref.papertables.spec import Headline, load_registry
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


def run(stage: Stage) -> TablesOutputs:
    """Every registered artefact whose source a stage has written, into the ``paper/``
    folder (:data:`medpref.papertables.outputs.OUTPUTS`), the index and the headlines."""
    p = stage.p
    # the folder holding the stages' reports/: the repository (reports/09_tables/..), or
    # wherever the stage's own reports folder was moved with the others (a test's tmp_path)
    root = stage.reports_dir.parent.parent
    registry = load_registry(repo_path(p.registry))
    assembly = assemble(registry, root, p.digits)
    out = TablesOutputs(assembly.status, assembly.built,
                        {h.name: headline_value(h, root) for h in registry.headlines})
    stage.check_yield(out.metrics["paper_made"], len(assembly.status), what="paper artefacts")
    OUTPUTS.write_assembled(stage.reports_dir, {FOLDER: assembly.files})
    atomic_write_text(repo_path(p.index), render_index(root / "reports", assembly.status))
    return out
