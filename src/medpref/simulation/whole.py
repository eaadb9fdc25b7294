"""Stage 06 in one call: the doctors (:func:`medpref.simulation.stage.run`), then the grading
of their consultations (:func:`medpref.simulation.grading_stage.run`), for a script or a
test that wants both from one opened stage. The pipeline runs them as two dvc stages
(``simulation``, then ``sp_grading``); this is the same work, in the same order.

The grading writes beside the doctors' reports folder (``<reports>/../06_sp_grading``),
and reads their records as the doctors' run returned them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medpref.simulation import grading_stage
from medpref.simulation import stage as doctors_stage
from medpref.simulation.grading_outputs import behaviour_table

#: the names the one-stage outputs had for the grading's tables
ALIASES = {"fidelity": "patient_fidelity", "grid": "table3_grid", "table6": "table6_rethinker",
           "grid_ci": "table3_grid_ci", "table6_ci": "table6_rethinker_ci"}


@dataclass
class StageSix:
    """Both halves' outputs: an attribute is the doctors' (consultations, next turn,
    held-out compliance, radar, ...) or, failing that, a table of the grading's (``table2``,
    ``controls_gate``, ...); ``metrics`` and ``records`` are both halves' together."""

    doctors_run: doctors_stage.DoctorsOutputs
    grading_run: grading_stage.GradingOutputs
    params: Any = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        name = ALIASES.get(name, name)
        doctors, graded = self.__dict__["doctors_run"], self.__dict__["grading_run"]
        if name in ("metrics", "records"):
            return {**getattr(doctors, name), **getattr(graded, name)}
        if name == "grades":
            return graded.grades
        if name == "behaviour":
            return behaviour_table(self.records, self.params)
        if hasattr(doctors, name):
            return getattr(doctors, name)
        return getattr(graded, name)


def run(stage, grading_dir: Path | None = None) -> StageSix:
    """The doctors, then their grading (into ``grading_dir``, default the folder beside
    the doctors' reports)."""
    doctors = doctors_stage.run(stage)
    graded = grading_stage.run(stage, reports_dir=grading_dir or stage.reports_dir.parent
                               / grading_stage.NAME, doctor_records=doctors.records)
    return StageSix(doctors, graded, stage.params)
