"""The pipeline's stages and what each writes, in pipeline order: the outputs lists that
the stages' dvc declarations name (:mod:`medpref.dvcstages`).

``medpref tables`` rebuilds every table and figure of the listed stages from their
committed records (:meth:`medpref.outputs.StageOutputs.rebuild`), with no model call and
no training; ``--check`` compares instead of writing. The list is in pipeline order: a
stage whose outputs are assembled from other stages' tables (stage 09's paper tables, an
:class:`~medpref.outputs.Assembled` folder with no records) comes after the stages it
reads, so a rebuild in place reads their rebuilt tables.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from medpref.dvcstages import STAGES as DECLARED
from medpref.outputs import StageOutputs

#: stage name → its declared outputs, in pipeline order: the outputs lists of the dvc
#: stages' declarations (:data:`medpref.dvcstages.STAGES`, a dependency order)
STAGES: dict[str, StageOutputs] = {s.outputs.stage: s.outputs for s in DECLARED
                                   if s.outputs is not None}

#: stages whose outputs are declared here but whose records no committed run has written
#: yet (their tables are still the last run's, written before the declaration): the
#: committed-tables test skips them and the dvc contract does not ask for their record
#: files. A stage leaves this set in the commit of its first records (a stage in it with
#: any record committed fails the test).
AWAITING_RECORDS: frozenset[str] = frozenset()


def stages_with_records(root: Path, names: list[str] | None = None) -> list[StageOutputs]:
    """The named stages (default: all) whose record files are all present under
    ``root/reports``; an unknown name is an error."""
    unknown = sorted(set(names or []) - set(STAGES))
    if unknown:
        raise SystemExit(f"medpref tables: unknown stage(s) {unknown}; known: {sorted(STAGES)}")
    chosen = [STAGES[n] for n in names] if names else list(STAGES.values())
    return [o for o in chosen
            if all(r.path(o.reports_dir(root)).exists() for r in o.records)]


def rebuild_tables(root: Path, params, names: list[str] | None = None, check: bool = False
                   ) -> list[str]:
    """Rebuild (or, with ``check``, compare) every table of the stages that have records;
    returns the differences found (check) or the files written."""
    lines: list[str] = []
    for outputs in stages_with_records(root, names):
        reports = outputs.reports_dir(root)
        if check:
            with tempfile.TemporaryDirectory() as scratch:
                lines += outputs.differences(reports, params, Path(scratch))
        else:
            lines += [str(p) for p in outputs.rebuild(reports, params)]
    return lines
