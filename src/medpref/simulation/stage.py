"""Stage 06's doctors (dvc stage ``simulation``): the SP consultations, every model answer
and patient sentence as a record.

:func:`run` does, for every doctor under test (the configured roles and every trained
policy of stage 05's hand-off, :mod:`~medpref.simulation.doctors`):

1. the SP consultations on the cases (a PLPF Table 3 grid cell: ``simulation.grid_cases``
   of them, by default none), in lock-step across cases
   (:func:`medpref.simulation.consult.simulate`) with the configured patient
   (:mod:`~medpref.simulation.patients`), and the patient's honesty counts (the run fails
   when too many patient sentences are not in the case);
2. rule compliance of its transcripts with stage 03's REM (the radar of PLPF Fig. 3).

Before any of it, the SP cases are checked against the split
(:mod:`~medpref.simulation.overlap`: a training dialogue of an SP case's disease and
presentation fails the stage when a trained policy is under test).

Beside the model doctors, the control doctors of ``simulation.controls``
(:mod:`~medpref.simulation.controls`: a clinician's script, a checklist recital, a lecture,
an echo) hold consultations on every case with no model call.

Stage 06's three other dvc stages (:mod:`medpref.simulation.common`) are the next turn
(``next_turn``), the held-out compliance (``heldout``) and the grading of the
consultations recorded here (``sp_grading``): a change to a grader parameter reruns the
grading alone, from these consultations, with no doctor model.

Every answer is kept as a per-item record (:data:`medpref.simulation.outputs.OUTPUTS`,
``reports/06_simulation/records``); the records are written first and every table and
the radar are built from them as they read back, the path ``medpref tables
06_simulation`` takes with no model call. The overlap check and the fidelity guard stop
the run before a record is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from medpref.contracts import SPCase
from medpref.identity import content_id
from medpref.outputs import content_key
from medpref.params import repo_path
from medpref.prompts import load_prompt
from medpref.simulation import behaviour, consult, controls, grading, outputs, overlap, tables
from medpref.simulation.common import (
    as_json,
    doctor_client,
    doctors_of,
    load_cases,
    rem_scorer,
    rem_settings,
    select_cases,
    set_threads,
    trained_names,
)
from medpref.simulation.config import DoctorConfig, SimulationParams
from medpref.simulation.doctors import grid_cell
from medpref.simulation.knowledge import build_knowledge_bases
from medpref.simulation.patients import PatientContext, build_patient


@dataclass
class DoctorsOutputs:
    """What stage 06's doctors show: its tables and figures as written (built from its
    records, :data:`medpref.simulation.outputs.OUTPUTS`), and the run's objects."""

    consultations: list[consult.Consultation]
    compliance: pd.DataFrame
    doctors: list[DoctorConfig]
    model_ids: dict[str, str]
    prompts: dict[str, str]
    metrics: dict[str, Any] = field(default_factory=dict)
    radar: Any = None
    consult_rows: list[dict] = field(default_factory=list)   # honesty + behaviour counts
    split_overlap: pd.DataFrame = field(default_factory=pd.DataFrame)   # SP cases ~ dialogues
    records: dict[str, list[dict]] = field(default_factory=dict)    # as written, keys included


# -- per doctor ----------------------------------------------------------------------------

def compliance_rows(consults, scorer, flowchart, rem_mode: str) -> list[dict]:
    """The REM's judgement of each transcript that has a doctor turn (cut at its last
    one), per rule: one record each (``compliance_judgements``)."""
    from medpref.remscore.compliance import cut_at_final_doctor_turn

    spoke = [c for c in consults if c.doctor_turns]
    states = [cut_at_final_doctor_turn(c.turns) for c in spoke]
    if not states:
        return []
    judged = scorer.score_states(states, flowchart.rules)
    rem_id = getattr(getattr(scorer, "client", None), "model_id", "")
    return [{"doctor": c.doctor, "rem": rem_mode, "model_id": rem_id, "case": c.case_id,
             "state_turns": len(state), **outputs.judgement_record(by_rule[rule.id], rule)}
            for c, state, by_rule in zip(spoke, states, judged) for rule in flowchart.rules]


# -- the run -------------------------------------------------------------------------------

@dataclass
class Harness:
    """What every doctor's consultations share: cases, knowledge bases, templates, the REM."""

    cases: list[SPCase]
    encode: Any
    kbs: dict
    templates: dict
    setup: consult.SimulationSetup
    scorer: Any = None
    flowchart: Any = None
    rem_mode: str = ""
    #: source rows skipped as malformed (AgentClinic's ``skipped``), counted in the metrics
    skipped_rows: list = field(default_factory=list)


def build_harness(stage, p: SimulationParams) -> Harness:
    from medpref.embedding import load_encoder

    loaded = load_cases(p)
    cases = select_cases(loaded, p.n_cases, p.case_ids)
    with stage.step("knowledge bases"):
        encode = load_encoder(repo_path(p.embedding_model))
        kbs = build_knowledge_bases(cases, encode, p.patient.chunk_tokens, p.patient.voice)
    templates = {n: load_prompt(n) for n in [p.doctor_prompt, p.call("patient").prompt]}
    patient = build_patient(p.patient.kind, PatientContext(
        p.patient, {c.id: c for c in cases}, kbs, encode, templates[p.call("patient").prompt],
        lambda: stage.role(p.call("patient").role), p.call("patient")))
    setup = consult.SimulationSetup(patient=patient, doctor_template=templates[p.doctor_prompt],
                                    rounds=p.rounds, seed=stage.seed,
                                    decoding=p.doctor_decoding)
    h = Harness(cases, encode, kbs, templates, setup)
    if p.rem_radar:
        h.scorer, h.flowchart, h.rem_mode = rem_scorer(stage, p)
    h.skipped_rows = list(getattr(loaded, "skipped", []))
    return h


@dataclass
class DoctorResult:
    """One doctor's consultations, as the records hold them."""

    consults: list[consult.Consultation]
    sentences: list[list[dict]]        # per consultation: its patient sentences, judged
    compliance: list[dict]             # the REM's judgements of its transcripts, per rule
    identity: dict[str, Any] = field(default_factory=dict)   # its model, by content


def evaluate_doctor(stage, p: SimulationParams, h: Harness, d: DoctorConfig, client
                    ) -> DoctorResult:
    """One model doctor: SP consultations (none for a Table 3 grid cell with
    ``simulation.grid_cases: 0``), patient honesty, REM."""
    cases = cases_for(p, h, d)
    doctor = consult.ModelDoctor(d.name, client, p.doctor_call(d), h.setup)
    consults, sentences = consult_and_judge(p, h, cases, doctor)
    comp = (compliance_rows(consults, h.scorer, h.flowchart, h.rem_mode)
            if h.scorer is not None else [])
    return DoctorResult(consults, sentences, comp, client.identity)


def consult_and_judge(p: SimulationParams, h: Harness, cases: Sequence[SPCase], doctor):
    """Any doctor's SP consultations and each one's patient sentences judged against its
    case (the grading stage grades them)."""
    if not cases:
        return [], []
    consults = consult.simulate(cases, doctor, h.setup)
    return consults, [behaviour.fidelity_judgements(c, h.kbs, h.encode, p) for c in consults]


def evaluate_control(p: SimulationParams, h: Harness, d: DoctorConfig) -> DoctorResult:
    """One control doctor on every case (no grid subset): consultations, patient honesty.
    No model call, so no REM radar."""
    doctor = controls.build_control(d.name, controls.ControlContext(
        {c.id: c for c in h.cases}, p.rounds))
    consults, sentences = consult_and_judge(p, h, h.cases, doctor)
    return DoctorResult(consults, sentences, [], {"control": d.name})


def cases_for(p: SimulationParams, h: Harness, d: DoctorConfig) -> list[SPCase]:
    """All cases, or for a Table 3 grid cell the ``grid_cases`` subset (the same
    round-robin subset for every cell, so the cells stay paired; 0: none, the cells are
    not SP-tested); a control runs on every case."""
    grid = grid_cell(d) is not None
    if p.grid_cases is not None and grid:
        return select_cases(h.cases, p.grid_cases, None) if p.grid_cases else []
    return h.cases


def run(stage) -> DoctorsOutputs:
    """The SP consultations and the REM's reading of them: every answer as a record, then
    the tables built from the records alone (what ``medpref tables`` rebuilds). The
    overlap check and the fidelity guard fail the run before anything is written."""
    p: SimulationParams = stage.p
    set_threads(p)
    h = build_harness(stage, p)
    doctors = doctors_of(stage, p)
    with stage.step("split overlap"):   # fails here when a trained policy could have learnt a case
        split_overlap = overlap.check_split(stage, p, h.cases, h.encode, trained_names(doctors))
    results, model_ids = {}, {}
    for d in doctors:
        with stage.step(f"doctor {d.name}"):
            if d.kind == "control":
                results[d.name] = evaluate_control(p, h, d)
                model_ids[d.name] = f"control:{d.name}"
                continue
            client = doctor_client(stage, d)
            model_ids[d.name] = client.model_id
            results[d.name] = evaluate_doctor(stage, p, h, d, client)
    stage.check_yield(sum(1 for r in results.values() for c in r.consults if c.doctor_turns),
                      sum(len(cases_for(p, h, d)) for d in doctors), what="consultations")
    settings = record_settings(stage, p, h)
    records = as_json({**sp_records(p, h, doctors, results, model_ids, settings),
                       "overlap_pairs": [{"key": content_key("overlap pair", r,
                                                             settings["overlap"]), **r}
                                         for r in overlap.overlap_records(split_overlap)]})
    behaviour.check_fidelity(outputs.consult_rows_of(records, stage.params),
                             p.patient.max_unsupported_share, p.patient.guard_min_sentences)
    with stage.step("tables"):   # the records, then the tables from the records as written
        outputs.OUTPUTS.write_records(stage.reports_dir, records)
        written = outputs.OUTPUTS.load_records(stage.reports_dir)
        built = outputs.OUTPUTS.build(written, stage.params)
        outputs.OUTPUTS.write_built(stage.reports_dir, built)
    out = outputs_of(built, written, stage, results, doctors, model_ids, h)
    out.metrics.update(overlap.metrics_of(out.split_overlap))
    out.metrics["cases_skipped_malformed"] = len(h.skipped_rows)   # AgentClinic rows
    stage.note_provenance(models=out.model_ids, prompts=out.prompts)
    return out


# -- records ---------------------------------------------------------------------------------

def record_settings(stage, p: SimulationParams, h: Harness) -> dict[str, Any]:
    """What besides the doctor and the item determines a record: the settings each kind
    of record is keyed by (hashed into its content key)."""
    prompts = {n: t.sha for n, t in h.templates.items()}
    keyed = p.keyed_settings()
    return {
        "consultation": {"rounds": p.rounds, "doctor_prompt": prompts[p.doctor_prompt],
                         "decoding": keyed["decoding"],
                         "patient": keyed["patient"],
                         "encoder": p.embedding_model, "seed": stage.seed},
        "fidelity": {"support": p.patient.support_threshold,
                     "relevance": p.patient.relevance_threshold,
                     "encoder": p.embedding_model},
        "rem": rem_settings(p, h.rem_mode, h.scorer),
        "overlap": {"overlap": p.split_overlap.model_dump(mode="json"),
                    "encoder": p.embedding_model,
                    "split": content_id(repo_path(stage.params.shared.split)),
                    "dialogues": content_id(repo_path(p.split_overlap.dialogues))},
    }


def sp_records(p: SimulationParams, h: Harness, doctors: Sequence[DoctorConfig],
               results: dict[str, DoctorResult], model_ids: dict[str, str],
               settings: dict[str, Any]) -> dict[str, list[dict]]:
    """The SP test's records: the cases, the doctors, and per doctor its consultations,
    patient sentences and REM judgements, each row keyed by what determined it."""
    hand = (controls.load_script_coverage(repo_path(p.controls_gate.script_coverage), h.cases)
            if p.controls_gate.script_coverage else {})
    expected = controls.expected_coverage(h.cases, hand)
    out: dict[str, list[dict]] = {
        "cases": [{"key": content_key("case", c.model_dump(mode="json"),
                                      [hand[(c.id, k)].model_dump(mode="json")
                                       for k in grading.CATEGORIES if (c.id, k) in hand]),
                   "case": c.id, "department": c.department, "lang": c.lang,
                   "items": {k: len(getattr(c.checklist, k)) for k in grading.CATEGORIES},
                   "expected_coverage": {k: expected[(c.id, k)] for k in grading.CATEGORIES}}
                  for c in h.cases],
        "sp_doctors": [{"doctor": d.name, "kind": d.kind, "role": d.role, "adapter": d.adapter,
                     "model_id": model_ids.get(d.name, ""),
                     "sp_cases": len(results[d.name].consults),
                     "cell": d.cell.model_dump() if d.cell else None} for d in doctors],
        "consultations": [], "patient_sentences": [], "compliance_judgements": []}
    cases = {c.id: c.model_dump(mode="json") for c in h.cases}
    for d in doctors:
        r = results[d.name]
        keys = {}
        for c, judged in zip(r.consults, r.sentences):
            keys[c.case_id] = content_key("consultation", r.identity, d.name, cases[c.case_id],
                                          settings["consultation"])
            out["consultations"].append(outputs.consultation_record(c, keys[c.case_id]))
            out["patient_sentences"] += [
                {"key": content_key("patient sentence", keys[c.case_id], j, settings["fidelity"]),
                 "doctor": c.doctor, "case": c.case_id, **j} for j in judged]
        out["compliance_judgements"] += [
            {"key": content_key("compliance", keys[j["case"]], j["rule"], settings["rem"]), **j}
            for j in r.compliance]
    return out


# -- what the notebook shows -----------------------------------------------------------------

def outputs_of(built: dict[str, Any], records: dict[str, list[dict]], stage,
               results: dict[str, DoctorResult], doctors: list[DoctorConfig],
               model_ids: dict[str, str], h: Harness) -> DoctorsOutputs:
    """The run's outputs: the tables and figures as written (from ``records`` as they
    read back), with the run's objects."""
    out = DoctorsOutputs(
        consultations=[c for r in results.values() for c in r.consults],
        compliance=built["compliance"], doctors=doctors, model_ids=model_ids,
        prompts={n: t.sha for n, t in h.templates.items()},
        radar=built["compliance_radar"] if records["compliance_judgements"] else None,
        consult_rows=outputs.consult_rows_of(records, stage.params),
        split_overlap=built["split_overlap"], records=records)
    out.metrics = metrics_of(out)
    return out


def metrics_of(out: DoctorsOutputs) -> dict[str, Any]:
    m: dict[str, Any] = {"cases": len(out.records.get("cases", [])),
                         "doctors": len(out.doctors)}
    behaviour_rows = tables.doctor_behaviour(out.consult_rows)
    if not behaviour_rows.empty:
        m["patient_unsupported_share"] = round(float(
            behaviour_rows["patient_unsupported_share"].max()), 4)
    return m
