"""Stage 06's grading (dvc stage ``sp_grading``): the checklist grades of the consultations
stage 06's doctors recorded, the controls' gate, the grader's agreement with the
hand-graded items, and Table 2 with everything built from it.

:func:`run` reads the doctors' records (``reports/06_simulation/records``: the cases, the
doctors, the consultations, the patient's sentences; :mod:`medpref.simulation.stage`
wrote them), rebuilds each consultation from its record, and grades every checklist item
(Eq. 6: symptoms incl. history, tests, diseases) with the grader ``simulation.grader.mode``
names (:mod:`~medpref.simulation.graders`), doctor by doctor; then every grader
(``simulation.grader.compare`` and the configured one) grades the hand-graded items. The
controls' gate (:func:`medpref.simulation.controls.check_controls`) fails the stage before
a record is written when a control misses it. No doctor model is loaded: a change to a
grader (its parameters or its code) reruns this stage alone, in minutes on 2 cores
(MiniLM encodes the sentences and the hand-graded items), and leaves the consultations,
next turn and held-out compliance up to date. A judge grader
(``simulation.grader.mode: judge``) calls its model through this stage's own LLM cache.

Its records and tables are :data:`medpref.simulation.grading_outputs.OUTPUTS`
(``reports/06_sp_grading``); ``medpref tables 06_sp_grading`` rebuilds the tables from
them and the doctors' records, with no model call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from medpref.contracts import SPCase, SPGradedItem, read_jsonl
from medpref.outputs import content_key
from medpref.params import repo_path
from medpref.prompts import load_prompt
from medpref.registry import register_piece
from medpref.simulation import controls, grading, grading_outputs, outputs, tables
from medpref.simulation.common import as_json, load_cases, make_judge, open_section_stage
from medpref.simulation.config import SimulationParams
from medpref.simulation.graders import GraderContext, build_grader, check_names
from medpref.stagekit import Stage

NAME = "06_sp_grading"


@register_piece(NAME)
def open_grading(stage: Stage):
    """``open_stage("06_sp_grading", params_path)``: stage 06's grading, which writes to
    ``reports/06_sp_grading`` and reads the params section ``simulation``; its LLM cache
    holds a judge grader's calls. An unknown grader name fails here."""
    check_names(stage.params.simulation.grader)
    return open_section_stage(stage, NAME)


@dataclass
class GradingOutputs:
    """What the grading stage shows: its tables as written (built from its records and
    the doctors'), and the grades."""

    grades: list[grading.ItemGrade]
    built: dict[str, Any]
    records: dict[str, list[dict]]
    metrics: dict[str, Any] = field(default_factory=dict)
    prompts: dict[str, str] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:   # a table by its name: out.table2
        built = self.__dict__.get("built", {})
        if name in built:
            return built[name]
        raise AttributeError(name)


def graders_of(stage, p: SimulationParams, encode) -> tuple[dict, dict]:
    """Every grader the params name (the configured one first), and the prompt templates
    they read by name."""
    g = p.grader
    templates = {n: load_prompt(n) for n in [*g.prompts, g.count_prompt]}
    setup = grading.GradingSetup(
        judge=None, templates=[templates[n] for n in g.prompts],
        count_template=templates[g.count_prompt], encode=encode,
        pass_threshold=g.pass_threshold, max_candidates=g.max_candidates,
        embedding_threshold=g.embedding_threshold)
    ctx = GraderContext(g, setup, lambda: make_judge(stage, p, p.call("grader")))
    return {name: build_grader(name, ctx) for name in dict.fromkeys([g.mode, *g.compare])}, \
        templates


def cases_of(p: SimulationParams, records: Mapping[str, list[dict]]) -> list[SPCase]:
    """The cases the doctors met, in their records' order, read from the configured
    source (a case the source no longer holds is an error naming it)."""
    by_id = {c.id: c for c in load_cases(p)}
    wanted = [r["case"] for r in records["cases"]]
    missing = [c for c in wanted if c not in by_id]
    if missing:
        raise ValueError(f"reports/06_simulation/records/cases.jsonl names cases the SP "
                         f"source lacks: {missing[:5]} (rerun stage simulation)")
    return [by_id[c] for c in wanted]


def grade_records(p: SimulationParams, grader, records: Mapping[str, list[dict]],
                  cases: list[SPCase], settings: dict[str, Any]
                  ) -> tuple[list[grading.ItemGrade], list[dict]]:
    """Every consultation's checklist grades, doctor by doctor in the doctors' order, each
    keyed by its consultation's key, the item and the grading settings."""
    by_id = {c.id: c for c in cases}
    consults = outputs.consultations_of(records)
    keys = {(r["doctor"], r["case"]): r["key"] for r in records["consultations"]}
    grades: list[grading.ItemGrade] = []
    for d in records["sp_doctors"]:
        mine = [c for c in consults if c.doctor == d["doctor"]]
        if mine:
            grades += grading.leave_out_unmeasurable(grader.grade(mine, by_id), by_id)
    rows = [outputs.grade_record(g, content_key("grade", keys[(g.doctor, g.case)], g.category,
                                                g.item, settings))
            for g in grades]
    return grades, rows


def grader_verdicts(p: SimulationParams, graders: dict, seed: int) -> list[dict]:
    """Every grader's verdict (``grader.compare`` and the configured one) on each
    hand-graded item, beside the hand verdict: what ``grader_validation`` is built from."""
    from medpref.simulation.validation import grade_hand_items, verdict_records

    path = repo_path(p.grader.graded_items) if p.grader.graded_items else None
    if path is None or not path.exists():
        return []
    items = read_jsonl(path, SPGradedItem)
    dumps = {g.id: g.model_dump(mode="json") for g in items}
    settings = {"grader": p.keyed_settings()["grader"], "encoder": p.embedding_model,
                "seed": seed}
    grades = {name: grade_hand_items(items, g) for name, g in graders.items()}
    return [{"key": content_key("grader verdicts", dumps[r["id"]], settings), **r}
            for r in verdict_records(items, grades, p.grader.mode)]


def run(stage, reports_dir: Path | None = None,
        doctor_records: Mapping[str, list[dict]] | None = None) -> GradingOutputs:
    """Grade the doctors' consultations and the hand-graded items; the controls' gate; the
    records, then every table from the records as written. ``doctor_records``: the
    doctors' and the next turn's records when the caller holds them (else read from
    their folders);
    ``reports_dir``: where to write (default: the stage's)."""
    from medpref.embedding import load_encoder

    p: SimulationParams = stage.p
    reports_dir = reports_dir or stage.reports_dir
    theirs = (dict(doctor_records) if doctor_records is not None
              else grading_outputs.OUTPUTS.read_records(reports_dir))
    cases = cases_of(p, theirs)
    with stage.step("graders"):
        encode = load_encoder(repo_path(p.embedding_model))
        graders, templates = graders_of(stage, p, encode)
    settings = {"grader": p.keyed_settings()["grader"], "encoder": p.embedding_model,
                "prompts": {n: t.sha for n, t in templates.items()}}
    with stage.step("grading"):
        grades, rows = grade_records(p, graders[p.grader.mode], theirs, cases, settings)
    with stage.step("grader validation"):
        verdicts = grader_verdicts(p, graders, stage.seed)
    mine = as_json({"grades": rows, "grader_verdicts": verdicts})
    declared = grading_outputs.OUTPUTS
    controls.check_controls(grading_outputs.controls_gate_table({**theirs, **mine},
                                                                stage.params))  # before writing
    with stage.step("tables"):   # the records, then the tables from the records as written
        declared.write_records(reports_dir, mine)
        written = {**theirs, **declared.own_records(reports_dir)}
        built = declared.build(written, stage.params)
        declared.write_built(reports_dir, built)
    out = GradingOutputs(grades, built, written,
                         prompts={n: t.sha for n, t in templates.items()})
    out.metrics = metrics_of(out)
    stage.note_provenance(prompts=out.prompts)
    return out


def metrics_of(out: GradingOutputs) -> dict[str, Any]:
    per_case = out.built["per_case"]
    m: dict[str, Any] = {"cases": int(per_case["case"].nunique()) if len(per_case) else 0,
                         "doctors": len(out.records.get("sp_doctors", []))}
    table2 = out.built["table2"]
    if not table2.empty:
        for _, row in tables.all_scores(table2).iterrows():
            m[f"sp/{row.name}"] = {k: (None if pd.isna(v) else round(float(v), 2))
                                  for k, v in row.items()}
    gv = out.built["grader_validation"]
    test = (gv[(gv["category"] == "all") & (gv["split"] == "test") & (gv["batch"] == "all")]
            if not gv.empty else gv)
    for _, row in test.iterrows():
        m[f"grader/{row['grader']}"] = {
            "accuracy": round(float(row["accuracy"]), 3), "items": int(row["items"]),
            **{k: None if pd.isna(row[k]) else round(float(row[k]), 3)
               for k in ("kappa", "kappa_lo", "kappa_hi")}}
    ranges = out.built["table2_range"].drop_duplicates("metric")
    for _, row in ranges.iterrows():   # control_script minus control_lecture, in points
        m[f"sp_range/{row['metric']}"] = {k: None if pd.isna(row[k]) else round(float(row[k]), 2)
                                          for k in ("range_diff", "range_lo", "range_hi")}
    return m
