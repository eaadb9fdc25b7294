"""Stage 06's run: the Standardized Patient test and the next-turn evaluation.

:func:`run` does, for every doctor under test (the configured roles and every trained
policy found under ``simulation.trained_policies``):

(stage 05's trained policies: SFT and each DPO run)

1. the SP consultations on the case subset, in lock-step across cases
   (:func:`medpref.simulation.consult.simulate`), and the patient's honesty counts;
2. checklist grading by the judge role (Eq. 6) → Table 2 (per department and ALL);
3. next-turn prediction on held-out dialogues: BLEU-4, ROUGE-L P/R/F1, length, GPD;
4. rule compliance of its transcripts with stage 03's REM (the radar of PLPF Fig. 3);

then the PLPF Table 3 grid and follow-up Table 6 from the policies that exist, and the
grader's agreement with the hand-graded items (accuracy, Cohen's κ).
"""

from __future__ import annotations

import dataclasses
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
from medpref.params import repo_path
from medpref.prompts import load_prompt
from medpref.reports import save_figure, write_table
from medpref.simulation import consult, grading, nextturn, tables
from medpref.simulation.config import DoctorConfig, SimulationParams
from medpref.simulation.doctors import all_doctors, trained_doctors
from medpref.simulation.knowledge import build_knowledge_bases
from medpref.simulation.patient import patient_fidelity
from medpref.simulation.validation import validate_grader


@dataclass
class SimulationOutputs:
    consultations: list[consult.Consultation]
    grades: list[grading.ItemGrade]
    table2: pd.DataFrame
    per_case: pd.DataFrame
    fidelity: pd.DataFrame
    next_turn: pd.DataFrame
    compliance: pd.DataFrame
    grid: pd.DataFrame
    table6: pd.DataFrame
    grader_validation: pd.DataFrame
    doctors: list[DoctorConfig]
    model_ids: dict[str, str]
    prompts: dict[str, str]
    metrics: dict[str, Any] = field(default_factory=dict)
    radar: Any = None


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
        return adapters.agentclinic_cases(p.source_root, p.source_limit)
    if p.source == "cspt":
        if not p.source_root:
            raise ValueError("simulation.source 'cspt' needs simulation.source_root (the "
                             "CSPT folder or zip)")
        return adapters.cspt_cases(repo_path(p.source_root))[:p.source_limit]
    return read_jsonl(repo_path(p.cases), SPCase)


def held_out_dialogues(p: SimulationParams) -> list[Dialogue]:
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
    return dialogues[-nt.n_dialogues:]


# -- per doctor ----------------------------------------------------------------------------

def doctor_client(stage, d: DoctorConfig):
    return stage.role(d.role, adapter=d.adapter) if d.adapter else stage.role(d.role)


def consult_rows(consults, kbs, encode, p: SimulationParams) -> list[dict]:
    rows = []
    for c in consults:
        fid = patient_fidelity(c.turns, kbs[c.case_id], encode, p.patient.support_threshold,
                               p.patient.relevance_threshold)
        rows.append({"doctor": c.doctor, "case": c.case_id, "department": c.department,
                     "rounds": c.rounds, "ended_by": c.ended_by,
                     "sentences": fid.sentences, "volunteered": fid.volunteered,
                     "unsupported": fid.unsupported,
                     "empty_turns": sum(1 for s in c.steps if s.get("empty")),
                     "examples": fid.examples})
    return rows


def per_case_rows(consults, grades) -> list[dict]:
    rows = []
    for c in consults:
        mine = [g for g in grades if g.case == c.case_id and g.doctor == c.doctor]
        scores = grading.case_scores(mine, [c.case_id])[0]
        rows.append({"doctor": c.doctor, "case": c.case_id, "department": c.department,
                     **{k: scores[k] for k in grading.CATEGORIES},
                     "judge_items": sum(g.method == "judge" for g in mine),
                     "fallback_items": sum(g.method != "judge" for g in mine)})
    return rows


def make_judge(stage, p: SimulationParams, role: str) -> grading.Judge:
    g = p.grader
    return grading.Judge(stage.role(role), mode=g.mode, k=g.k, temperature=g.temperature,
                         max_new_tokens=g.max_new_tokens, min_mass=g.min_mass, seed=stage.seed)


def rem_scorer(stage, p: SimulationParams):
    """Stage 03's fine-tuned REM when its adapter exists, else the in-context expected one."""
    from medpref.rem.scorers import build_scorer, finetuned_settings
    from medpref.rules import load_rules

    flowchart = load_rules(repo_path(p.rules))
    if p.rem_adapter and (repo_path(p.rem_adapter) / "adapter_config.json").exists():
        client = stage.role(p.rem_role, adapter=p.rem_adapter)
        return build_scorer("finetuned", client, flowchart, [], max_new_tokens=64,
                            **finetuned_settings(repo_path(p.rem_adapter))), flowchart, "finetuned"
    examples = read_jsonl(repo_path(p.rem_icl_examples), RemAnnotation)
    return (build_scorer("expected", stage.role(p.rem_role), flowchart, examples, n_examples=1),
            flowchart, "expected")


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
    grading: grading.GradingSetup
    gpd_judge: grading.Judge
    items: list[nextturn.NextTurnItem]
    scorer: Any = None
    flowchart: Any = None
    rem_mode: str = ""


def build_harness(stage, p: SimulationParams) -> Harness:
    from medpref.medqa.database import load_encoder

    cases = select_cases(load_cases(p), p.n_cases, p.case_ids)
    with stage.step("knowledge bases"):
        encode = load_encoder(repo_path(p.embedding_model))
        kbs = build_knowledge_bases(cases, encode, p.patient.chunk_tokens)
    templates = {n: load_prompt(n) for n in
                 [p.doctor_prompt, p.patient.prompt, *p.grader.prompts, p.grader.count_prompt,
                  p.next_turn.gpd_prompt]}
    setup = consult.SimulationSetup(
        patient=stage.role(p.patient.role), patient_template=templates[p.patient.prompt],
        doctor_template=templates[p.doctor_prompt], kbs=kbs, encode=encode, rounds=p.rounds,
        top_k=p.patient.top_k, query_rounds=p.patient.query_rounds,
        end_marker=p.patient.end_marker, max_sentences=p.patient.max_sentences,
        patient_max_new_tokens=p.patient.max_new_tokens,
        doctor_max_new_tokens=p.doctor_max_new_tokens, doctor_temperature=p.doctor_temperature,
        seed=stage.seed)
    gsetup = grading.GradingSetup(
        judge=None if p.grader.mode == "embedding" else make_judge(stage, p, p.grader.role),
        templates=[templates[n] for n in p.grader.prompts],
        count_template=templates[p.grader.count_prompt],
        encode=encode if p.grader.fallback == "embedding" or p.grader.mode == "embedding"
        else None,
        pass_threshold=p.grader.pass_threshold, max_candidates=p.grader.max_candidates,
        fallback_threshold=p.grader.fallback_threshold)
    items = (nextturn.next_turn_items(held_out_dialogues(p), p.next_turn.cuts_per_dialogue,
                                      stage.seed, p.next_turn.history_max_turns)
             if p.next_turn.enabled else [])
    h = Harness(cases, encode, kbs, templates, setup, gsetup,
                make_judge(stage, p, p.next_turn.gpd_role), items)
    if p.rem_radar:
        h.scorer, h.flowchart, h.rem_mode = rem_scorer(stage, p)
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
    consults = consult.simulate(h.cases, client, d.name, h.setup)
    grades = grading.grade_consultations(consults, {c.id: c for c in h.cases}, h.grading)
    fid = consult_rows(consults, h.kbs, h.encode, p)
    nt = None
    if h.items:
        nt = nextturn.evaluate_next_turn(h.items, client, d.name, h.templates[p.doctor_prompt],
                                         h.gpd_judge, h.templates[p.next_turn.gpd_prompt],
                                         p.next_turn.max_new_tokens)
    comp = compliance_of(consults, h.scorer, h.flowchart) if h.scorer is not None else None
    return DoctorResult(consults, grades, fid, nt, comp)


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
        validation = grader_validation(p, h.grading)
    consults = [c for r in results.values() for c in r.consults]
    stage.check_yield(sum(1 for c in consults if c.doctor_turns), len(h.cases) * len(doctors),
                      what="consultations")
    out = assemble(p, results, validation, doctors, model_ids, h)
    write_outputs(stage, out, [row for r in results.values() if r.next_turn
                               for row in r.next_turn.items])
    return out


def grader_validation(p: SimulationParams, gsetup) -> pd.DataFrame:
    """Agreement with the hand-graded items of the configured grader and, beside it, of
    the embedding grade alone (no model calls), so the judge can be compared with it."""
    path = repo_path(p.grader.graded_items) if p.grader.graded_items else None
    if path is None or not path.exists():
        return pd.DataFrame()
    items = read_jsonl(path, SPGradedItem)
    tables_ = [validate_grader(items, gsetup).assign(grader=p.grader.mode)]
    if gsetup.judge is not None and gsetup.encode is not None:
        plain = dataclasses.replace(gsetup, judge=None)
        tables_.append(validate_grader(items, plain).assign(grader="embedding"))
    out = pd.concat(tables_, ignore_index=True)
    return out[["grader", *[c for c in out.columns if c != "grader"]]]


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
    out = SimulationOutputs(
        consultations=consults, grades=grades, table2=t2, per_case=per_case,
        fidelity=tables.fidelity_table(fid_rows),
        next_turn=nt, compliance=comp_long, grid=tables.table3_grid(t2, p.grid_pattern),
        table6=tables.table6(t2, nt, p.table6_policies), grader_validation=validation,
        doctors=doctors, model_ids=model_ids,
        prompts={n: t.sha for n, t in h.templates.items()})
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
    for _, row in (gv[gv["category"] == "all"] if not gv.empty else gv).iterrows():
        m[f"grader/{row['grader']}"] = {
            "accuracy": round(float(row["accuracy"]), 3), "items": int(row["items"]),
            "kappa": None if pd.isna(row["kappa"]) else round(float(row["kappa"]), 3)}
    return m


def write_outputs(stage, out: SimulationOutputs, nt_items: list[dict]) -> None:
    write_jsonl(stage.data("transcripts.jsonl"), [c.record() for c in out.consultations])
    write_jsonl(stage.data("grades.jsonl"), [g.__dict__ for g in out.grades])
    write_jsonl(stage.data("next_turn.jsonl"), nt_items)
    report = stage.report
    write_table(out.table2, report("table2"), floatfmt=".1f")
    write_table(out.per_case, report("per_case"), floatfmt=".2f")
    write_table(out.fidelity, report("patient_fidelity"), floatfmt=".2f")
    write_table(out.next_turn, report("next_turn"), floatfmt=".2f")
    write_table(out.grid, report("table3_grid"), floatfmt=".1f")
    write_table(out.table6, report("table6_rethinker"), floatfmt=".2f")
    write_table(out.grader_validation, report("grader_validation"), floatfmt=".3f")
    write_table(out.compliance, report("compliance"), floatfmt=".3f")
    write_table(pd.DataFrame([{"doctor": d.name, "role": d.role, "adapter": d.adapter or "",
                               "model_id": out.model_ids.get(d.name, "")} for d in out.doctors]),
                report("doctors"))
    if out.radar is not None:
        save_figure(out.radar, report("compliance_radar.png"))
