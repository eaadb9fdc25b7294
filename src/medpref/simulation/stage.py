"""Stage 06's run: the Standardized Patient test and the next-turn evaluation.

:func:`run` does, for every doctor under test (the configured roles and every trained
policy found under ``simulation.trained_policies``):

(stage 05's trained policies: SFT and each DPO run)

1. the SP consultations on the case subset, in lock-step across cases
   (:func:`medpref.simulation.consult.simulate`) with the configured patient
   (:mod:`~medpref.simulation.patients`), and the patient's honesty counts (the run fails
   when too many patient sentences are not in the case);
2. checklist grading by the configured grader (:mod:`~medpref.simulation.graders`,
   Eq. 6) → Table 2 (per department and ALL), with intervals and paired comparisons;
3. next-turn prediction on held-out dialogues: BLEU-4, ROUGE-L P/R/F1, length, GPD;
4. rule compliance of its transcripts with stage 03's REM (the radar of PLPF Fig. 3);
5. held-out process compliance: its next turn on states of dialogues stage 01 never split,
   scored per rule by the REM, against SFT by state (:mod:`~medpref.simulation.heldout`);

then the PLPF Table 3 grid and follow-up Table 6 from the policies that exist (each with
a companion of intervals, paired verdicts and minimum detectable differences), the
grader's agreement with the hand-graded items (accuracy, Cohen's κ with its interval,
per split), the doctors' behaviour and a transcripts page for clinicians.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from medpref.contracts import (
    Dialogue,
    RemAnnotation,
    SPCase,
    SPGradedItem,
    read_jsonl,
    write_jsonl,
)
from medpref.llm.types import CallSpec
from medpref.params import repo_path
from medpref.prompts import load_prompt
from medpref.reports import save_figure, write_table
from medpref.simulation import behaviour, consult, grading, heldout, nextturn, tables
from medpref.simulation.config import DoctorConfig, SimulationParams
from medpref.simulation.doctors import all_doctors, grid_cell, trained_doctors
from medpref.simulation.echo import doctor_sentences
from medpref.simulation.graders import GraderContext, build_grader
from medpref.simulation.knowledge import build_knowledge_bases, split_sentences
from medpref.simulation.patients import PatientContext, build_patient, is_dont_know
from medpref.simulation.validation import validate_grader


@dataclass
class SimulationOutputs:
    consultations: list[consult.Consultation]
    grades: list[grading.ItemGrade]
    table2: pd.DataFrame
    per_case: pd.DataFrame
    fidelity: pd.DataFrame
    next_turn: pd.DataFrame
    next_turn_paired: pd.DataFrame
    compliance: pd.DataFrame
    grid: pd.DataFrame
    table6: pd.DataFrame
    grader_validation: pd.DataFrame
    table2_ci: pd.DataFrame
    table2_paired: pd.DataFrame
    behaviour: pd.DataFrame
    doctors: list[DoctorConfig]
    model_ids: dict[str, str]
    prompts: dict[str, str]
    metrics: dict[str, Any] = field(default_factory=dict)
    radar: Any = None
    consult_rows: list[dict] = field(default_factory=list)   # honesty + behaviour counts
    heldout: Any = None        # heldout.HeldoutResult: held-out process compliance
    grid_ci: pd.DataFrame = field(default_factory=pd.DataFrame)     # beside table3_grid
    table6_ci: pd.DataFrame = field(default_factory=pd.DataFrame)   # beside table6


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
    """The next-turn dialogues: ``dialogue_ids``, else the last ``n_dialogues`` of the
    source — of the embedded file, only dialogues stage 01 never split into preference
    items (``params``: the whole params, to know those splits; without a ``sampling``
    section there is no stage 01 and nothing was split)."""
    nt = p.next_turn
    if nt.source != "embedded":
        from medpref.data import adapters

        load = {"mts_dialog": adapters.mts_dialogues, "aci_bench": adapters.aci_dialogues}
        dialogues = load[nt.source](nt.source_split)
    else:
        dialogues = read_jsonl(repo_path(nt.dialogues), Dialogue)
    if nt.dialogue_ids:
        wanted = set(nt.dialogue_ids)
        return [d for d in dialogues if d.id in wanted]
    if nt.source == "embedded" and params is not None and "sampling" in params.raw:
        split = heldout.sampled_dialogue_ids(params, nt.dialogues)
        dialogues = [d for d in dialogues if d.id not in split]
    return dialogues[-nt.n_dialogues:]


# -- per doctor ----------------------------------------------------------------------------

def doctor_client(stage, d: DoctorConfig):
    return stage.role(d.role, adapter=d.adapter) if d.adapter else stage.role(d.role)


def per_case_rows(consults, grades) -> list[dict]:
    rows = []
    for c in consults:
        mine = [g for g in grades if g.case == c.case_id and g.doctor == c.doctor]
        scores = grading.case_scores(mine, [c.case_id])[0]
        rows.append({"doctor": c.doctor, "case": c.case_id, "department": c.department,
                     **{k: scores[k] for k in grading.CATEGORIES},
                     "graded_by": ",".join(sorted({g.method for g in mine})),
                     "abstained_items": sum(g.passed is None for g in mine),
                     "echo_excluded_items": sum(bool(g.echo_excluded) and not g.passed
                                                for g in mine)})
    return rows


def make_judge(stage, p: SimulationParams, call: CallSpec) -> grading.Judge:
    """A judge that answers as ``call`` says and decodes as ``simulation.grader`` says."""
    g = p.grader
    return grading.Judge(stage.role(call.role), call, mode=g.mode, k=g.k,
                         temperature=g.temperature, min_mass=g.min_mass, seed=stage.seed)


def rem_scorer(stage, p: SimulationParams):
    """Stage 03's fine-tuned REM when its adapter exists, else the in-context expected one."""
    from medpref.rem.scorers import build_scorer, finetuned_settings
    from medpref.rules import load_rules

    flowchart = load_rules(repo_path(p.rules))
    call = p.rem_call
    if p.rem_adapter and (repo_path(p.rem_adapter) / "adapter_config.json").exists():
        client = stage.role(call.role, adapter=p.rem_adapter)
        return build_scorer("finetuned", client, flowchart, [], call=call,
                            **finetuned_settings(repo_path(p.rem_adapter))), flowchart, "finetuned"
    examples = read_jsonl(repo_path(p.rem_icl_examples), RemAnnotation)
    return (build_scorer("expected", stage.role(call.role), flowchart, examples, call=call,
                         n_examples=1), flowchart, "expected")


def compliance_of(consults, scorer, flowchart) -> pd.DataFrame:
    from medpref.rem.compliance import cut_at_final_doctor_turn, rule_compliance

    states = [cut_at_final_doctor_turn(c.turns) for c in consults if c.doctor_turns]
    if not states:
        return pd.DataFrame()
    return rule_compliance(states, scorer, flowchart.rules)


# -- the run -------------------------------------------------------------------------------

@dataclass
class Harness:
    """What every doctor's evaluation shares: cases, knowledge bases, judges, templates."""

    cases: list[SPCase]
    encode: Any
    kbs: dict
    templates: dict
    setup: consult.SimulationSetup
    grader: Any
    graders: dict
    gpd_judge: grading.Judge
    items: list[nextturn.NextTurnItem]
    scorer: Any = None
    flowchart: Any = None
    rem_mode: str = ""
    #: source rows skipped as malformed (AgentClinic's ``skipped``), counted in the metrics
    skipped_rows: list = field(default_factory=list)


def build_harness(stage, p: SimulationParams) -> Harness:
    from medpref.medqa.database import load_encoder

    loaded = load_cases(p)
    cases = select_cases(loaded, p.n_cases, p.case_ids)
    with stage.step("knowledge bases"):
        encode = load_encoder(repo_path(p.embedding_model))
        kbs = build_knowledge_bases(cases, encode, p.patient.chunk_tokens)
    templates = {n: load_prompt(n) for n in
                 [p.doctor_prompt, p.patient.prompt, *p.grader.prompts, p.grader.count_prompt,
                  p.next_turn.gpd_prompt]}
    patient = build_patient(p.patient.kind, PatientContext(
        p.patient, {c.id: c for c in cases}, kbs, encode, templates[p.patient.prompt],
        lambda: stage.role(p.patient.call.role)))
    dd = p.doctor_decoding
    setup = consult.SimulationSetup(
        patient=patient, doctor_template=templates[p.doctor_prompt], rounds=p.rounds,
        doctor_temperature=dd.temperature,
        seed=stage.seed, repetition_penalty=dd.repetition_penalty,
        no_repeat_ngram_size=dd.no_repeat_ngram_size, stop_after_question=dd.stop_after_question)
    gsetup = grading.GradingSetup(
        judge=None, templates=[templates[n] for n in p.grader.prompts],
        count_template=templates[p.grader.count_prompt], encode=encode,
        pass_threshold=p.grader.pass_threshold, max_candidates=p.grader.max_candidates,
        embedding_threshold=p.grader.embedding_threshold)
    ctx = GraderContext(p.grader, gsetup, lambda: make_judge(stage, p, p.grader_call))
    graders = {name: build_grader(name, ctx) for name in dict.fromkeys([p.grader.mode,
                                                                         *p.grader.compare])}
    items = (nextturn.next_turn_items(held_out_dialogues(p, stage.params),
                                      p.next_turn.cuts_per_dialogue,
                                      stage.seed, p.next_turn.history_max_turns)
             if p.next_turn.enabled else [])
    h = Harness(cases, encode, kbs, templates, setup, graders[p.grader.mode], graders,
                make_judge(stage, p, p.gpd_call), items)
    if p.rem_radar:
        h.scorer, h.flowchart, h.rem_mode = rem_scorer(stage, p)
    h.skipped_rows = list(getattr(loaded, "skipped", []))
    return h


@dataclass
class DoctorResult:
    consults: list[consult.Consultation]
    grades: list[grading.ItemGrade]
    fidelity: list[dict]
    next_turn: nextturn.NextTurnResult | None
    compliance: pd.DataFrame | None


def evaluate_doctor(stage, p: SimulationParams, h: Harness, d: DoctorConfig, client
                    ) -> DoctorResult:
    """One doctor: SP consultations, checklist grades, patient honesty, next turn, REM."""
    cases = cases_for(p, h, d)
    consults = consult.simulate(cases, client, d.name, h.setup, p.doctor_call(d))
    grades = h.grader.grade(consults, {c.id: c for c in cases})
    fid = behaviour.consult_rows(consults, h.kbs, h.encode, p)
    nt = None
    if h.items:
        nt = nextturn.evaluate_next_turn(h.items, client, d.name, h.templates[p.doctor_prompt],
                                         h.gpd_judge, h.templates[p.next_turn.gpd_prompt],
                                         p.next_turn_call(d),
                                         p.grader.bootstrap_rounds, stage.seed)
    comp = compliance_of(consults, h.scorer, h.flowchart) if h.scorer is not None else None
    return DoctorResult(consults, grades, fid, nt, comp)


def cases_for(p: SimulationParams, h: Harness, d: DoctorConfig) -> list[SPCase]:
    """All cases, or for a Table 3 grid cell the cheaper ``grid_cases`` subset (the
    same round-robin subset for every cell, so the cells stay paired)."""
    if p.grid_cases is not None and grid_cell(d.name, p.grid_pattern) is not None:
        return select_cases(h.cases, p.grid_cases, None)
    return h.cases


def doctors_of(stage, p: SimulationParams) -> list[DoctorConfig]:
    trained = []
    if p.trained_policies and "training" in stage.params.raw:
        trained = trained_doctors(stage.params)
    return all_doctors(p.doctors, trained)


def run(stage) -> SimulationOutputs:
    p: SimulationParams = stage.p
    if p.torch_threads is not None:
        import torch

        torch.set_num_threads(p.torch_threads)
    h = build_harness(stage, p)
    doctors = doctors_of(stage, p)
    results, model_ids = {}, {}
    for d in doctors:
        client = doctor_client(stage, d)
        model_ids[d.name] = client.model_id
        with stage.step(f"doctor {d.name}"):
            results[d.name] = evaluate_doctor(stage, p, h, d, client)
    with stage.step("grader validation"):
        validation = grader_validation(p, h.graders, stage.seed)
    consults = [c for r in results.values() for c in r.consults]
    stage.check_yield(sum(1 for c in consults if c.doctor_turns),
                      sum(len(cases_for(p, h, d)) for d in doctors), what="consultations")
    behaviour.check_fidelity([f for r in results.values() for f in r.fidelity],
                             p.patient.max_unsupported_share, p.patient.guard_min_sentences)
    out = assemble(p, results, validation, doctors, model_ids, h)
    write_outputs(stage, out, [row for r in results.values() if r.next_turn
                               for row in r.next_turn.items])
    with stage.step("held-out compliance"):
        out.heldout = heldout.run_heldout(stage, p, h, doctors, lambda d: doctor_client(stage, d))
    out.metrics.update(heldout.metrics_of(out.heldout))
    out.metrics["cases_skipped_malformed"] = len(h.skipped_rows)
    return out


def grader_validation(p: SimulationParams, graders: dict, seed: int) -> pd.DataFrame:
    """Agreement with the hand-graded items of every grader in ``grader.compare`` and
    the configured one, per split (dev: where settings were chosen; test: reported)."""
    path = repo_path(p.grader.graded_items) if p.grader.graded_items else None
    if path is None or not path.exists():
        return pd.DataFrame()
    items = read_jsonl(path, SPGradedItem)
    out = pd.concat([validate_grader(items, g, p.grader.bootstrap_rounds, seed).assign(
        grader=name, default=name == p.grader.mode) for name, g in graders.items()],
        ignore_index=True)
    return out[["grader", "default", *[c for c in out.columns if c not in ("grader", "default")]]]


def assemble(p: SimulationParams, results: dict[str, DoctorResult], validation, doctors, model_ids,
             h: Harness) -> SimulationOutputs:
    consults = [c for r in results.values() for c in r.consults]
    grades = [g for r in results.values() for g in r.grades]
    fid_rows = [f for r in results.values() for f in r.fidelity]
    per_case = pd.DataFrame(per_case_rows(consults, grades))
    if fid_rows:   # the patient's honesty per case, beside the case's scores
        honesty = pd.DataFrame(fid_rows)[["doctor", "case", "rounds", "ended_by", "sentences",
                                          "volunteered", "unsupported"]]
        per_case = per_case.merge(honesty, on=["doctor", "case"], how="left")
    t2 = tables.table2(per_case.to_dict("records"))
    nt = pd.DataFrame([r.next_turn.summary for r in results.values() if r.next_turn])
    comp = {d: r.compliance for d, r in results.items()
            if r.compliance is not None and not r.compliance.empty}
    comp_long = (pd.concat([t.assign(doctor=d, rem=h.rem_mode) for d, t in comp.items()],
                           ignore_index=True) if comp else pd.DataFrame())
    if not comp_long.empty:   # PLPF Fig. 3 ranks the models per rule (1 = most compliant)
        comp_long["rank"] = comp_long.groupby("rule")["mean"].rank(ascending=False,
                                                                     method="min")
    n_boot = p.grader.bootstrap_rounds
    nt_rows = [row for r in results.values() if r.next_turn for row in r.next_turn.items]
    out = SimulationOutputs(
        consultations=consults, grades=grades, table2=t2, per_case=per_case,
        fidelity=tables.fidelity_table(fid_rows),
        next_turn=nt, compliance=comp_long,
        next_turn_paired=nextturn.paired_table(nt_rows, "sft", n_boot, h.setup.seed),
        grid=tables.table3_grid(t2, p.grid_pattern),
        table6=tables.table6(t2, nt, p.table6_policies), grader_validation=validation,
        table2_ci=tables.table2_intervals(per_case, n_boot),
        table2_paired=tables.table2_paired(per_case, n_boot=n_boot),
        behaviour=tables.doctor_behaviour(fid_rows), consult_rows=fid_rows,
        doctors=doctors, model_ids=model_ids,
        prompts={n: t.sha for n, t in h.templates.items()},
        grid_ci=tables.table3_intervals(per_case, p.grid_pattern, n_boot=n_boot),
        table6_ci=tables.table6_intervals(per_case, nt_rows, p.table6_policies,
                                          n_boot=n_boot))
    out.metrics = metrics_of(out)
    if comp:
        from medpref.rem.compliance import radar_plot

        out.radar = radar_plot(comp, title=f"Rule compliance of SP transcripts (REM: {h.rem_mode})")
    return out


def metrics_of(out: SimulationOutputs) -> dict[str, Any]:
    m: dict[str, Any] = {"cases": int(out.per_case["case"].nunique()) if len(out.per_case) else 0,
                         "doctors": len(out.doctors)}
    if not out.table2.empty:
        for _, row in tables.all_scores(out.table2).iterrows():
            m[f"sp/{row.name}"] = {k: (None if pd.isna(v) else round(float(v), 2))
                                  for k, v in row.items()}
    for _, row in out.next_turn.iterrows():
        m[f"next_turn/{row['doctor']}"] = {k: (None if pd.isna(row[k]) else round(float(row[k]), 3))
                                          for k in ("bleu4", "rougeL_f1", "rougeL_r", "gpd")}
    gv = out.grader_validation
    test = (gv[(gv["category"] == "all") & (gv["split"] == "test")] if not gv.empty else gv)
    for _, row in test.iterrows():
        m[f"grader/{row['grader']}"] = {
            "accuracy": round(float(row["accuracy"]), 3), "items": int(row["items"]),
            **{k: None if pd.isna(row[k]) else round(float(row[k]), 3)
               for k in ("kappa", "kappa_lo", "kappa_hi")}}
    if not out.behaviour.empty:
        m["patient_unsupported_share"] = round(float(
            out.behaviour["patient_unsupported_share"].max()), 4)
    return m


def write_outputs(stage, out: SimulationOutputs, nt_items: list[dict]) -> None:
    records = annotated_records(out, stage.p)
    write_jsonl(stage.data("transcripts.jsonl"), records)
    write_jsonl(stage.data("grades.jsonl"), [g.__dict__ for g in out.grades])
    write_jsonl(stage.data("next_turn.jsonl"), nt_items)
    report = stage.report
    write_table(out.table2, report("table2"), floatfmt=".1f")
    write_table(out.per_case, report("per_case"), floatfmt=".2f")
    write_table(out.fidelity, report("patient_fidelity"), floatfmt=".2f")
    write_table(out.next_turn, report("next_turn"), floatfmt=".2f")
    write_table(out.next_turn_paired, report("next_turn_paired"), floatfmt=".3f")
    write_table(out.grid, report("table3_grid"), floatfmt=".1f")
    write_table(out.table6, report("table6_rethinker"), floatfmt=".2f")
    write_table(out.grid_ci, report("table3_grid_ci"), floatfmt=".3f")
    write_table(out.table6_ci, report("table6_rethinker_ci"), floatfmt=".3f")
    write_table(out.grader_validation, report("grader_validation"), floatfmt=".3f")
    write_table(out.table2_ci, report("table2_ci"), floatfmt=".1f")
    write_table(out.table2_paired, report("table2_paired"), floatfmt=".3f")
    write_table(out.compliance, report("compliance"), floatfmt=".3f")
    ids = pd.DataFrame([{"doctor": d.name, "role": d.role, "adapter": d.adapter or "",
                         "model_id": out.model_ids.get(d.name, "")} for d in out.doctors])
    if not out.behaviour.empty:
        ids = ids.merge(out.behaviour, on="doctor", how="left")
    write_table(ids, report("doctors"), floatfmt=".3f")
    from medpref.simulation.transcripts_html import write_transcripts_html

    write_transcripts_html(records, report("transcripts.html"))
    if out.radar is not None:
        save_figure(out.radar, report("compliance_radar.png"))


def annotated_records(out: SimulationOutputs, p: SimulationParams) -> list[dict]:
    """Each consultation's record with what a reader needs: per doctor sentence whether
    it echoes the patient, per patient sentence whether the case supports it, and every
    checklist item's grade with the sentence that earned it."""
    fid = {(r["doctor"], r["case"]): set(r["unsupported_at"]) for r in out.consult_rows}
    scores = {(r["doctor"], r["case"]): r for r in out.per_case.to_dict("records")}
    rows = []
    for c in out.consultations:
        echoes = {(s.turn, s.text) for s in doctor_sentences(
            c.turns, p.grader.echo_overlap, p.grader.echo_min_new) if s.echo}
        unsupported = fid.get((c.doctor, c.case_id), set())
        rec = c.record()
        rec["chief_complaint"] = c.turns[0].text if c.turns else ""
        for i, t in enumerate(rec["turns"]):
            t["sentences"] = [{"text": s, "echo": (i, s) in echoes,
                               "unsupported": t["role"] == "patient" and s in unsupported,
                               "dont_know": t["role"] == "patient" and is_dont_know(s)}
                              for s in split_sentences(t["text"])]
        sc = scores.get((c.doctor, c.case_id), {})
        rec["scores"] = {k: (None if pd.isna(sc.get(k)) else sc.get(k))
                         for k in grading.CATEGORIES}
        rec["items"] = [{"category": g.category, "item": g.item, "passed": g.passed,
                         "method": g.method, "evidence_turn": g.evidence_turn,
                         "evidence": g.evidence, "echo_excluded": g.echo_excluded}
                        for g in out.grades if g.case == c.case_id and g.doctor == c.doctor]
        rows.append(rec)
    return rows
