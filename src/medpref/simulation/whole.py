"""Stage 06 in one call: the doctors (:func:`medpref.simulation.stage.run`), the next turn
(:func:`~medpref.simulation.nextturn_stage.run`), the held-out compliance
(:func:`~medpref.simulation.heldout_stage.run`) and the grading of the consultations
(:func:`~medpref.simulation.grading_stage.run`), for a script or a test that wants all four
from one opened stage. The pipeline runs them as four dvc stages (``simulation``,
``next_turn``, ``heldout``, ``sp_grading``); this is the same work, in the same order.

The three later stages write beside the doctors' reports folder
(``<reports>/../06_next_turn`` and so on); here they share the doctors' opened stage (its
roles and LLM session), where the pipeline opens each with its own LLM cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medpref.simulation import grading_stage, heldout_stage, nextturn_stage
from medpref.simulation import stage as doctors_stage
from medpref.simulation.grading_outputs import behaviour_table

#: the names the one-stage outputs had for the grading's tables
ALIASES = {"fidelity": "patient_fidelity", "grid": "table3_grid", "table6": "table6_rethinker",
           "grid_ci": "table3_grid_ci", "table6_ci": "table6_rethinker_ci"}


@dataclass
class StageSix:
    """The four stages' outputs: an attribute is the doctors' (consultations, radar, ...),
    else the next turn's (``next_turn``, ``gpd_check``, ...), the held-out stage's
    (``heldout``, ``question_share``) or a table of the grading's (``table2``,
    ``controls_gate``, ...); ``metrics`` and ``records`` are all four together."""

    doctors_run: doctors_stage.DoctorsOutputs
    next_turn_run: nextturn_stage.NextTurnOutputs
    heldout_run: heldout_stage.HeldoutOutputs
    grading_run: grading_stage.GradingOutputs
    params: Any = None

    def _runs(self) -> list[Any]:
        d = self.__dict__
        return [d["doctors_run"], d["next_turn_run"], d["heldout_run"], d["grading_run"]]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        name = ALIASES.get(name, name)
        if name in ("metrics", "records"):
            return {k: v for run in self._runs() for k, v in getattr(run, name).items()}
        if name == "grades":
            return self.__dict__["grading_run"].grades
        if name == "behaviour":
            return behaviour_table(self.records, self.params)
        for run in self._runs():
            try:
                return getattr(run, name)
            except AttributeError:
                continue
        raise AttributeError(name)


def run(stage, grading_dir: Path | None = None) -> StageSix:
    """The doctors, the next turn, the held-out compliance, then the grading (into
    ``grading_dir``, default the folder beside the doctors' reports): the later three
    write beside the doctors' reports folder and share the doctors' opened stage (its
    roles and LLM session)."""
    root = stage.reports_dir.parent
    doctors = doctors_stage.run(stage)
    next_turn = nextturn_stage.run(stage, reports_dir=root / nextturn_stage.NAME)
    held = heldout_stage.run(stage, reports_dir=root / heldout_stage.NAME,
                             doctor_records=doctors.records)
    graded = grading_stage.run(stage, reports_dir=grading_dir or root / grading_stage.NAME,
                               doctor_records={**doctors.records, **next_turn.records})
    return StageSix(doctors, next_turn, held, graded, stage.params)
