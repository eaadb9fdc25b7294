"""Stage 06's doctors (dvc stage ``simulation``): the SP consultations, the next-turn
evaluation and the held-out compliance, every model answer as a record.

:func:`run` does, for every doctor under test (the configured roles and every trained
policy of stage 05's hand-off, :mod:`~medpref.simulation.doctors`):

1. the SP consultations on the cases (a PLPF Table 3 grid cell: ``simulation.grid_cases``
   of them, by default none), in lock-step across cases
   (:func:`medpref.simulation.consult.simulate`) with the configured patient
   (:mod:`~medpref.simulation.patients`), and the patient's honesty counts (the run fails
   when too many patient sentences are not in the case);
2. next-turn prediction on held-out dialogues: BLEU-4, ROUGE-L P/R/F1, length, GPD;
3. rule compliance of its transcripts with stage 03's REM (the radar of PLPF Fig. 3);
4. held-out process compliance: its next turn on states of the written split's eval
   dialogues, scored per rule by the REM beside two controls (the real next turn, a
   premature diagnosis), against SFT by state (:mod:`~medpref.simulation.heldout`).

Before any of it, the SP cases are checked against the split
(:mod:`~medpref.simulation.overlap`: a training dialogue of an SP case's disease and
presentation fails the stage); after the doctors, the GPD judge is checked
(:func:`~medpref.simulation.nextturn.gpd_check`) and the share of turns that ask a
question is tabled (:mod:`~medpref.simulation.questions`).

Beside the model doctors, the control doctors of ``simulation.controls``
(:mod:`~medpref.simulation.controls`: a clinician's script, a checklist recital, a lecture,
an echo) hold consultations on every case with no model call.

The checklist grades (Eq. 6), Table 2 with its companions, Tables 3 and 6, the controls'
gate, the grader's agreement with the hand-graded items and the transcripts page are the
grading stage's (dvc stage ``sp_grading``, :mod:`medpref.simulation.grading_stage`), which
reads this stage's records: a change to a grader parameter reruns the grading alone,
from the consultations recorded here, with no doctor model (a grader's code is read by
both stages: the params validator imports the grader registry).

Every answer is kept as a per-item record (:data:`medpref.simulation.outputs.OUTPUTS`,
``reports/06_simulation/records``); the records are written first and every table and
the radar are built from them as they read back, the path ``medpref tables
06_simulation`` takes with no model call. The overlap check and the fidelity guard stop
the run before a record is written.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from medpref.contracts import Dialogue, RemAnnotation, SPCase, read_jsonl
from medpref.identity import content_id
from medpref.llm.types import CallSpec
from medpref.outputs import content_key
from medpref.params import repo_path
from medpref.prompts import load_prompt
from medpref.simulation import (
    behaviour,
    consult,
    controls,
    grading,
    heldout,
    nextturn,
    outputs,
    overlap,
    questions,
    tables,
)
from medpref.simulation.config import DoctorConfig, SimulationParams
from medpref.simulation.doctors import all_doctors, grid_cell, trained_doctors
from medpref.simulation.knowledge import build_knowledge_bases
from medpref.simulation.outputs import per_case_rows  # noqa: F401  (stage 06's public name)
from medpref.simulation.patients import PatientContext, build_patient


@dataclass
class DoctorsOutputs:
    """What stage 06's doctors show: its tables and figures as written (built from its
    records, :data:`medpref.simulation.outputs.OUTPUTS`), and the run's objects."""

    consultations: list[consult.Consultation]
    next_turn: pd.DataFrame
    next_turn_paired: pd.DataFrame
    compliance: pd.DataFrame
    doctors: list[DoctorConfig]
    model_ids: dict[str, str]
    prompts: dict[str, str]
    metrics: dict[str, Any] = field(default_factory=dict)
    radar: Any = None
    consult_rows: list[dict] = field(default_factory=list)   # honesty + behaviour counts
    heldout: Any = None        # heldout.HeldoutResult: held-out process compliance
    split_overlap: pd.DataFrame = field(default_factory=pd.DataFrame)   # SP cases ~ dialogues
    gpd_check: Any = None      # nextturn.GpdCheck: is GPD valid with this judge?
    question_share: pd.DataFrame = field(default_factory=pd.DataFrame)  # asking turns, vs base
    records: dict[str, list[dict]] = field(default_factory=dict)    # as written, keys included


# -- inputs --------------------------------------------------------------------------------

def select_cases(cases: Sequence[SPCase], n: int | None, ids: Sequence[str] | None
                 ) -> list[SPCase]:
    """``ids`` if given; else the first ``n`` in round-robin over departments (file
    order), so a small subset spans departments; ``n=None``: all."""
    if ids:
        by_id = {c.id: c for c in cases}
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise KeyError(f"simulation.case_ids: no case {missing}")
        return [by_id[i] for i in ids]
    if n is None or n >= len(cases):
        return list(cases)
    queues: dict[str, list[SPCase]] = {}
    for c in cases:
        queues.setdefault(c.department, []).append(c)
    picked: list[SPCase] = []
    while len(picked) < n:
        for q in queues.values():
            if q and len(picked) < n:
                picked.append(q.pop(0))
    return picked


def load_cases(p: SimulationParams) -> list[SPCase]:
    """The SP cases: embedded JSONL or a real set through its adapter."""
    from medpref.data import adapters

    if p.source == "agentclinic":
        return adapters.agentclinic_cases(p.source_root, p.source_limit, file=p.agentclinic_file)
    if p.source == "cspt":
        if not p.source_root:
            raise ValueError("simulation.source 'cspt' needs simulation.source_root (the "
                             "CSPT folder or zip)")
        return adapters.cspt_cases(repo_path(p.source_root))[:p.source_limit]
    return read_jsonl(repo_path(p.cases), SPCase)


def held_out_dialogues(p: SimulationParams, params=None) -> list[Dialogue]:
    """The next-turn dialogues. Of a real set: its ``source_split``, ``dialogue_ids`` or
    else the last ``n_dialogues``. Of the embedded file: only the written split's eval
    part (``params``: the whole params, whose ``shared.split`` names it), ``dialogue_ids``
    (each must be an eval dialogue) or else the last ``n_dialogues`` of that part."""
    nt = p.next_turn
    if nt.source != "embedded":
        from medpref.data import adapters

        load = {"mts_dialog": adapters.mts_dialogues, "aci_bench": adapters.aci_dialogues}
        dialogues = load[nt.source](nt.source_split)
        if nt.dialogue_ids:
            return [d for d in dialogues if d.id in set(nt.dialogue_ids)]
        return dialogues[-nt.n_dialogues:]
    from medpref.data.split import load_split
    from medpref.params import SharedParams

    split = load_split(repo_path((params.shared if params is not None else SharedParams()).split))
    dialogues = heldout.eval_dialogues(repo_path(nt.dialogues), split)
    if nt.dialogue_ids:
        outside = [i for i in nt.dialogue_ids if split.part(i) != "eval"]
        if outside:
            raise ValueError(f"simulation.next_turn.dialogue_ids: {outside} are not in the eval "
                             f"part of {split.path}")
        return [d for d in dialogues if d.id in set(nt.dialogue_ids)]
    return dialogues[-nt.n_dialogues:]


# -- per doctor ----------------------------------------------------------------------------

def doctor_client(stage, d: DoctorConfig):
    return stage.role(d.role, adapter=d.adapter) if d.adapter else stage.role(d.role)


def make_judge(stage, p: SimulationParams, call: CallSpec) -> grading.Judge:
    """A judge that answers as ``call`` says and decodes as ``simulation.grader`` says."""
    g = p.grader
    return grading.Judge(stage.role(call.role), call, mode=g.mode, k=g.k,
                         temperature=g.temperature, min_mass=g.min_mass, seed=stage.seed)


def rem_scorer(stage, p: SimulationParams):
    """Stage 03's REM named ``simulation.rem_scorer`` (built as stage 03 builds it); with
    none named, its fine-tuned REM when the adapter exists, else the in-context one."""
    from medpref.remscore.scorers import build_scorer, finetuned_settings, scorer_from_settings
    from medpref.rules import load_rules

    flowchart = load_rules(repo_path(p.rules))
    if p.rem_scorer:
        rem = stage.params.rem
        if p.rem_scorer not in rem.scorers:
            raise ValueError(f"simulation.rem_scorer '{p.rem_scorer}' is not in rem.scorers "
                             f"({sorted(rem.scorers)})")
        return (scorer_from_settings(p.rem_scorer, rem.scorers[p.rem_scorer], stage.llm, rem,
                                     flowchart, stage.seed), flowchart, p.rem_scorer)
    call = p.call("rem_comment")
    if p.rem_adapter and (repo_path(p.rem_adapter) / "adapter_config.json").exists():
        client = stage.role(call.role, adapter=p.rem_adapter)
        return build_scorer("finetuned", client, flowchart, [], call=call,
                            **finetuned_settings(repo_path(p.rem_adapter))), flowchart, "finetuned"
    examples = read_jsonl(repo_path(p.rem_icl_examples), RemAnnotation)
    return (build_scorer("expected", stage.role(call.role), flowchart, examples, call=call,
                         n_examples=1), flowchart, "expected")


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
    """What every doctor's evaluation shares: cases, knowledge bases, judges, templates."""

    cases: list[SPCase]
    encode: Any
    kbs: dict
    templates: dict
    setup: consult.SimulationSetup
    gpd_judge: grading.Judge
    items: list[nextturn.NextTurnItem]
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
    templates = {n: load_prompt(n) for n in
                 [p.doctor_prompt, p.call("patient").prompt, p.call("gpd").prompt]}
    patient = build_patient(p.patient.kind, PatientContext(
        p.patient, {c.id: c for c in cases}, kbs, encode, templates[p.call("patient").prompt],
        lambda: stage.role(p.call("patient").role), p.call("patient")))
    dd = p.doctor_decoding
    setup = consult.SimulationSetup(
        patient=patient, doctor_template=templates[p.doctor_prompt], rounds=p.rounds,
        doctor_temperature=dd.temperature,
        seed=stage.seed, repetition_penalty=dd.repetition_penalty,
        no_repeat_ngram_size=dd.no_repeat_ngram_size, stop_after_question=dd.stop_after_question)
    items = (nextturn.next_turn_items(held_out_dialogues(p, stage.params),
                                      p.next_turn.cuts_per_dialogue,
                                      stage.seed, p.next_turn.history_max_turns)
             if p.next_turn.enabled else [])
    h = Harness(cases, encode, kbs, templates, setup, make_judge(stage, p, p.call("gpd")),
                items)
    if p.rem_radar:
        h.scorer, h.flowchart, h.rem_mode = rem_scorer(stage, p)
    h.skipped_rows = list(getattr(loaded, "skipped", []))
    return h


@dataclass
class DoctorResult:
    """One doctor's evaluation, as the records hold it."""

    consults: list[consult.Consultation]
    sentences: list[list[dict]]        # per consultation: its patient sentences, judged
    next_turn: list[dict] | None       # its next-turn item rows (None: not evaluated)
    compliance: list[dict]             # the REM's judgements of its transcripts, per rule
    identity: dict[str, Any] = field(default_factory=dict)   # its model, by content


def evaluate_doctor(stage, p: SimulationParams, h: Harness, d: DoctorConfig, client
                    ) -> DoctorResult:
    """One model doctor: SP consultations (none for a Table 3 grid cell with
    ``simulation.grid_cases: 0``), patient honesty, next turn, REM."""
    cases = cases_for(p, h, d)
    doctor = consult.ModelDoctor(d.name, client, p.doctor_call(d), h.setup)
    consults, sentences = consult_and_judge(p, h, cases, doctor)
    nt = None
    if h.items:
        nt = nextturn.evaluate_next_turn(h.items, client, d.name, h.templates[p.doctor_prompt],
                                         h.gpd_judge, h.templates[p.call("gpd").prompt],
                                         p.next_turn_call(d),
                                         p.grader.bootstrap_rounds, stage.seed).items
    comp = (compliance_rows(consults, h.scorer, h.flowchart, h.rem_mode)
            if h.scorer is not None else [])
    return DoctorResult(consults, sentences, nt, comp, client.identity)


def consult_and_judge(p: SimulationParams, h: Harness, cases: Sequence[SPCase], doctor):
    """Any doctor's SP consultations and each one's patient sentences judged against its
    case (the grading stage grades them)."""
    if not cases:
        return [], []
    consults = consult.simulate(cases, doctor, h.setup)
    return consults, [behaviour.fidelity_judgements(c, h.kbs, h.encode, p) for c in consults]


def evaluate_control(p: SimulationParams, h: Harness, d: DoctorConfig) -> DoctorResult:
    """One control doctor on every case (no grid subset): consultations, patient honesty.
    No model call, so no next turn and no REM radar."""
    doctor = controls.build_control(d.name, controls.ControlContext(
        {c.id: c for c in h.cases}, p.rounds))
    consults, sentences = consult_and_judge(p, h, h.cases, doctor)
    return DoctorResult(consults, sentences, None, [], {"control": d.name})


def cases_for(p: SimulationParams, h: Harness, d: DoctorConfig) -> list[SPCase]:
    """All cases, or for a Table 3 grid cell the ``grid_cases`` subset (the same
    round-robin subset for every cell, so the cells stay paired; 0: none, the cells are
    not SP-tested); a control runs on every case."""
    grid = d.kind == "model" and grid_cell(d.name, p.grid_pattern) is not None
    if p.grid_cases is not None and grid:
        return select_cases(h.cases, p.grid_cases, None) if p.grid_cases else []
    return h.cases


def doctors_of(stage, p: SimulationParams) -> list[DoctorConfig]:
    """The model doctors (configured, then trained policies), then the controls."""
    trained = []
    if p.trained_policies and "training" in stage.params.raw:
        trained = trained_doctors(stage.params)
    return [*all_doctors(p.doctors, trained), *control_doctors(p)]


def trained_names(doctors: Sequence[DoctorConfig]) -> list[str]:
    """The trained policies among the doctors under test: models with an adapter."""
    return [d.name for d in doctors if d.kind == "model" and d.adapter]


def control_doctors(p: SimulationParams) -> list[DoctorConfig]:
    return [DoctorConfig(name=name, role="", kind="control") for name in p.controls]


def run(stage) -> DoctorsOutputs:
    """The SP consultations, next turn, GPD check and held-out compliance: every answer
    as a record, then the tables built from the records alone (what ``medpref tables``
    rebuilds). The overlap check and the fidelity guard fail the run before anything is
    written; the grades and the controls' gate are the grading stage's."""
    p: SimulationParams = stage.p
    if p.torch_threads is not None:
        import torch

        torch.set_num_threads(p.torch_threads)
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
    with stage.step("gpd check"):
        records["next_turn_items"] = as_json(next_turn_items(stage, p, h, settings))
    with stage.step("held-out compliance"):
        held = heldout.run_heldout(stage, p, h, [d for d in doctors if d.kind == "model"],
                                   lambda d: doctor_client(stage, d))
    records["heldout_cuts"] = [{"key": content_key("heldout state", r, settings["heldout"]), **r}
                               for r in held.state_rows]
    records["heldout_turns"] = [{"key": content_key("heldout turn", r, settings["heldout"]),
                                 **r} for r in held.turns]
    with stage.step("tables"):   # the records, then the tables from the records as written
        outputs.OUTPUTS.write_records(stage.reports_dir, records)
        written = outputs.OUTPUTS.load_records(stage.reports_dir)
        built = outputs.OUTPUTS.build(written, stage.params)
        outputs.OUTPUTS.write_built(stage.reports_dir, built)
    out = outputs_of(built, written, stage, results, doctors, model_ids, h, held)
    out.metrics.update({**heldout.metrics_of(out.heldout),
                        **overlap.metrics_of(out.split_overlap),
                        **nextturn.gpd_check_metrics(out.gpd_check),
                        **questions.metrics_of(out.question_share)})
    out.metrics["cases_skipped_malformed"] = len(h.skipped_rows)   # AgentClinic rows
    stage.note_provenance(models=out.model_ids, prompts=out.prompts)
    return out


# -- records ---------------------------------------------------------------------------------

def record_settings(stage, p: SimulationParams, h: Harness) -> dict[str, Any]:
    """What besides the doctor and the item determines a record: the settings each kind
    of record is keyed by (hashed into its content key)."""
    prompts = {n: t.sha for n, t in h.templates.items()}
    keyed = p.keyed_settings()
    rem = {"mode": h.rem_mode, "rules": content_id(repo_path(p.rules)),
           "scorer": getattr(getattr(h.scorer, "client", None), "identity", None)}
    return {
        "consultation": {"rounds": p.rounds, "doctor_prompt": prompts[p.doctor_prompt],
                         "decoding": keyed["decoding"],
                         "patient": keyed["patient"],
                         "encoder": p.embedding_model, "seed": stage.seed},
        "fidelity": {"support": p.patient.support_threshold,
                     "relevance": p.patient.relevance_threshold,
                     "encoder": p.embedding_model},
        "next_turn": {"prompt": prompts[p.doctor_prompt],
                      "max_new_tokens": p.call("next_turn").max_new_tokens,
                      "gpd_prompt": prompts[p.call("gpd").prompt],
                      "judge": h.gpd_judge.client.identity, "seed": stage.seed},
        "rem": rem,
        "heldout": {"heldout": keyed["heldout"], "rem": rem,
                    "prompt": prompts[p.doctor_prompt], "seed": stage.seed,
                    "split": content_id(repo_path(stage.params.shared.split)),
                    "dialogues": content_id(repo_path(p.heldout.dialogues))},
        "overlap": {"overlap": p.split_overlap.model_dump(mode="json"),
                    "encoder": p.embedding_model,
                    "split": content_id(repo_path(stage.params.shared.split)),
                    "dialogues": content_id(repo_path(p.split_overlap.dialogues))},
    }


def sp_records(p: SimulationParams, h: Harness, doctors: Sequence[DoctorConfig],
               results: dict[str, DoctorResult], model_ids: dict[str, str],
               settings: dict[str, Any]) -> dict[str, list[dict]]:
    """The SP test's records: the cases, the doctors, and per doctor its consultations,
    patient sentences, REM judgements and next-turn predictions, each row keyed by
    what determined it."""
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
                     "sp_cases": len(results[d.name].consults)} for d in doctors],
        "consultations": [], "patient_sentences": [],
        "compliance_judgements": [], "next_turn_predictions": []}
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
        items = {it.id: it for it in h.items}
        out["next_turn_predictions"] += [
            {"key": content_key("next turn", r.identity, d.name,
                                turns_of(items[row["item"]].history),
                                items[row["item"]].reference, settings["next_turn"]), **row}
            for row in nextturn.prediction_records(r.next_turn or [], model_ids[d.name])]
    return out


def turns_of(turns) -> list[dict]:
    return [{"role": t.role, "text": t.text} for t in turns]


def next_turn_items(stage, p: SimulationParams, h: Harness, settings: dict[str, Any]
                    ) -> list[dict]:
    """The next-turn items as records, with the GPD check's verdicts on each
    (:func:`nextturn.gpd_check`: is GPD valid with this judge?); none without items."""
    if not h.items:
        return []
    check = nextturn.gpd_check(h.items, h.gpd_judge, h.templates[p.call("gpd").prompt],
                               p.grader.bootstrap_rounds, stage.seed)
    rows = nextturn.item_records(h.items, check, h.gpd_judge.client.model_id)
    return [{"key": content_key("next-turn item", turns_of(it.history), row,
                                settings["next_turn"]),
             **row} for it, row in zip(h.items, rows)]


# -- what the notebook shows -----------------------------------------------------------------

def as_json(value):
    """``value`` as its records read back (tuples as lists, numpy numbers as Python
    ones), so the gates judge what the tables will be built from."""
    from medpref.outputs import _plain

    return json.loads(json.dumps(value, ensure_ascii=False, default=_plain))


def outputs_of(built: dict[str, Any], records: dict[str, list[dict]], stage,
               results: dict[str, DoctorResult], doctors: list[DoctorConfig],
               model_ids: dict[str, str], h: Harness, held) -> DoctorsOutputs:
    """The run's outputs: the tables and figures as written (from ``records`` as they
    read back), with the run's objects."""
    out = DoctorsOutputs(
        consultations=[c for r in results.values() for c in r.consults],
        next_turn=built["next_turn"], next_turn_paired=built["next_turn_paired"],
        compliance=built["compliance"], doctors=doctors, model_ids=model_ids,
        prompts={n: t.sha for n, t in h.templates.items()},
        radar=built["compliance_radar"] if records["compliance_judgements"] else None,
        consult_rows=outputs.consult_rows_of(records, stage.params),
        heldout=heldout.HeldoutResult(built["heldout_states"], built["heldout_compliance"],
                                      held.turns, held.note, held.state_rows),
        split_overlap=built["split_overlap"], gpd_check=outputs.gpd_check_of(records,
                                                                             stage.params),
        question_share=built["question_share"], records=records)
    out.metrics = metrics_of(out)
    return out


def metrics_of(out: DoctorsOutputs) -> dict[str, Any]:
    m: dict[str, Any] = {"cases": len(out.records.get("cases", [])),
                         "doctors": len(out.doctors)}
    for _, row in out.next_turn.iterrows():
        m[f"next_turn/{row['doctor']}"] = {k: (None if pd.isna(row[k]) else round(float(row[k]), 3))
                                          for k in ("bleu4", "rougeL_f1", "rougeL_r", "gpd")}
    behaviour_rows = tables.doctor_behaviour(out.consult_rows)
    if not behaviour_rows.empty:
        m["patient_unsupported_share"] = round(float(
            behaviour_rows["patient_unsupported_share"].max()), 4)
    return m
