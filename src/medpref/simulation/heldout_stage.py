"""Stage 06's held-out compliance (dvc stage ``heldout``): each policy's next doctor turn
on states of the written split's eval dialogues, scored per rule by stage 03's REM beside
the controls, against SFT by state (:mod:`medpref.simulation.heldout`), and the share of
doctor turns that ask a question (:mod:`medpref.simulation.questions`).

Records (``reports/06_heldout/records``), one row per item with its content ``key``:

* ``heldout_cuts`` — each state: dialogue, part, cut, diagnosis turn, history length,
  where its bad turn came from;
* ``heldout_turns`` — each policy's and control's turn per state, with the REM's score
  per rule.

The question share reads these turns and the SP openings (the first doctor turn of each
consultation the doctors' stage recorded, ``reports/06_simulation``), so this stage
follows the doctors'. Its tables are pure functions of the records and the params:
``medpref tables 06_heldout`` rebuilds them with no model call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from medpref.identity import content_id
from medpref.outputs import Records, Table, content_key
from medpref.params import repo_path
from medpref.prompts import load_prompt
from medpref.registry import register_piece
from medpref.simulation import heldout, questions
from medpref.simulation.common import (
    ReadingOutputs,
    doctor_client,
    model_doctors,
    open_section_stage,
    rem_scorer,
    rem_settings,
    set_threads,
)
from medpref.simulation.config import SimulationParams
from medpref.simulation.outputs import OUTPUTS as DOCTORS
from medpref.simulation.outputs import Rows, _boot, consultations_of
from medpref.stagekit import Stage

NAME = "06_heldout"


@register_piece(NAME)
def open_heldout(stage: Stage):
    """``open_stage("06_heldout", params_path)``: writes ``reports/06_heldout``, reads the
    params section ``simulation``."""
    return open_section_stage(stage, NAME)


# -- records → tables -------------------------------------------------------------------------

def heldout_table(records: Rows, params) -> pd.DataFrame:
    return heldout.table_of(records["heldout_turns"], _boot(params), params.shared.seed,
                            heldout.design_of(params.simulation.heldout))


def heldout_states_table(records: Rows, params) -> pd.DataFrame:
    return heldout.states_of(records["heldout_cuts"])


def question_share_table(records: Rows, params) -> pd.DataFrame:
    """The share of turns that ask, on the held-out states and the SP openings."""
    rows = (questions.state_turns(records["heldout_turns"])
            + questions.opening_turns(consultations_of(records)))
    return questions.question_share_table(rows, n_boot=_boot(params), seed=params.shared.seed)


OUTPUTS = ReadingOutputs(NAME, (
    Records("heldout_cuts", "each held-out compliance state: dialogue, part, cut, "
            "diagnosis turn, history length, where its bad turn came from"),
    Records("heldout_turns", "each policy's and control's turn per held-out state, with the "
            "REM's score per rule"),
    Table("heldout_compliance", heldout_table, floatfmt=".3f"),
    Table("heldout_states", heldout_states_table, floatfmt=".0f"),
    Table("question_share", question_share_table, floatfmt=".3f"),
), reads=(DOCTORS,))


# -- the run ----------------------------------------------------------------------------------

@dataclass
class HeldoutOutputs:
    """What the stage shows: the held-out result (states, table, turns) and the question
    share as written, with the run's records."""

    heldout: heldout.HeldoutResult
    question_share: pd.DataFrame
    records: dict[str, list[dict]]
    prompts: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)


def settings_of(stage, p: SimulationParams, template, rem: dict[str, Any]) -> dict[str, Any]:
    """What besides the policy and the state determines a record (hashed into its key)."""
    return {"heldout": p.keyed_settings()["heldout"], "rem": rem, "prompt": template.sha,
            "seed": stage.seed, "split": content_id(repo_path(stage.params.shared.split)),
            "dialogues": content_id(repo_path(p.heldout.dialogues))}


def run(stage, reports_dir=None, doctor_records: Rows | None = None) -> HeldoutOutputs:
    """The policies' and controls' turns on the held-out states with the REM's scores: the
    records, then the tables from them and the doctors' records (``doctor_records`` when
    the caller holds them, else read from their folder; ``reports_dir``: where to write,
    default the stage's). No REM (``simulation.rem_radar`` false) or
    ``simulation.heldout.enabled`` false: no records, the tables empty."""
    p: SimulationParams = stage.p
    set_threads(p)
    reports_dir = reports_dir or stage.reports_dir
    theirs = (dict(doctor_records) if doctor_records is not None
              else OUTPUTS.read_records(reports_dir))
    template = load_prompt(p.doctor_prompt)
    scorer, flowchart, mode = (rem_scorer(stage, p) if p.rem_radar and p.heldout.enabled
                               else (None, None, ""))
    settings = settings_of(stage, p, template, rem_settings(p, mode, scorer))
    with stage.step("held-out compliance"):
        held = heldout.run_heldout(stage, p, scorer, flowchart, template,
                                   model_doctors(stage, p), lambda d: doctor_client(stage, d))
    mine = {"heldout_cuts": [{"key": content_key("heldout state", r, settings), **r}
                             for r in held.state_rows],
            "heldout_turns": [{"key": content_key("heldout turn", r, settings), **r}
                              for r in held.turns]}
    with stage.step("tables"):
        OUTPUTS.write_records(reports_dir, mine)
        written = {**theirs, **OUTPUTS.own_records(reports_dir)}
        built = OUTPUTS.build(written, stage.params)
        OUTPUTS.write_built(reports_dir, built)
    result = heldout.HeldoutResult(built["heldout_states"], built["heldout_compliance"],
                                   held.turns, held.note, held.state_rows)
    out = HeldoutOutputs(result, built["question_share"],
                         {k: written[k] for k in mine}, {p.doctor_prompt: template.sha})
    out.metrics = {**heldout.metrics_of(result), **questions.metrics_of(out.question_share)}
    stage.note_provenance(prompts=out.prompts)
    return out
