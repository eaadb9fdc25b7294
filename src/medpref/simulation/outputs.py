"""Stage 06's outputs, declared once: its per-item records and the tables built from them.

Every model answer, grade and score the stage's tables read is a record
(``reports/06_simulation/records/``), one row per item with its content ``key``:

* ``cases`` — each SP case of the run: department, language, checklist sizes and what
  ``control_script`` is expected to earn per category (the controls' gate reads it);
* ``sp_doctors`` — each doctor under test: kind, role, adapter, model id, how many cases it
  met in the SP test (a Table 3 grid cell: ``simulation.grid_cases``);
* ``consultations`` — each SP consultation (doctor × case): the turns, each model doctor
  turn's raw completion where it differs from the turn, where each patient reply came from
  (which fallback, if any), how it ended, the error;
* ``grades`` — every checklist grade (consultation × item): verdict, method, evidence
  sentence and turn, the echoes and listings refused, abstentions, a judge's raw answers
  (a field at its default, None or empty, is left out);
* ``patient_sentences`` — every patient sentence judged against its case (MiniLM):
  similarity to the best chunk and to the question, verbatim or not, the verdict;
* ``compliance_judgements`` — stage 03's REM on each transcript, per rule (the radar);
* ``next_turn_items`` — each held-out next-turn item: its reference turn, and the GPD
  check's verdicts on it (the reference against itself and against an unrelated turn);
* ``next_turn_predictions`` — each doctor's prediction per item, the raw completion, the
  GPD judge's parsed and raw verdict (BLEU and ROUGE are recomputed from the texts);
* ``heldout_cuts`` and ``heldout_turns`` — the held-out compliance states (each a dialogue
  cut before a doctor turn), and each policy's (and control's) turn on each with its REM
  score per rule;
* ``grader_verdicts`` — each hand-graded item with every grader's verdict on it;
* ``overlap_pairs`` — the SP cases' overlap check against the split's corpus: each listed
  pair's cosine and shared disease words, each case that could not be checked.

The tables, the radar and the transcripts page are pure functions of those records and
the params (no model call, no MiniLM), so ``medpref tables 06_simulation`` rebuilds them.
The records of the embedded default hold only the project's own text (its SP cases and
dialogues); a run on AgentClinic, CSPT or MTS-Dialog writes fragments of that licensed
data into them (the patient answers with its case's text), as the transcripts page does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from medpref.contracts import Turn
from medpref.outputs import Figure, Page, Records, StageOutputs, Table
from medpref.simulation import grading, heldout, nextturn, overlap, questions, tables
from medpref.simulation.consult import Consultation
from medpref.simulation.doctors import grid_cell
from medpref.simulation.grading import ItemGrade

Rows = Mapping[str, list[dict[str, Any]]]


# -- the stage's objects → records ---------------------------------------------------------

def step_record(step: dict[str, Any]) -> dict[str, Any]:
    """A consultation step as recorded: a patient reply's sources without the texts the
    turns already hold (per question: where the answer came from and its score), and
    without the retrieval query (the last rounds' text)."""
    out = {k: v for k, v in step.items() if k not in ("answered_from", "query")}
    if "answered_from" in step:
        out["answered_from"] = [{"from": t.get("from"), "score": t.get("score")}
                                for t in step["answered_from"]]
    return out


def consultation_record(c: Consultation, key: str) -> dict[str, Any]:
    """One consultation as recorded (``Consultation.record`` with compact steps): a doctor
    step keeps the model's raw completion only where it differs from the turn it gave
    (absent: the turn is the completion as written, or a control wrote it)."""
    rec = c.record()
    said = iter(t["text"] for t in rec["turns"] if t["role"] == "doctor")
    steps = []
    for s in rec["steps"]:
        s = step_record(s)
        if s.get("speaker") == "doctor" and s.get("raw") in (None, next(said, None)):
            s = {k: v for k, v in s.items() if k != "raw"}
        steps.append(s)
    return {"key": key, **rec, "steps": steps}


#: the fields every grade record has; the others only where they say something (not None,
#: not empty), so that a run's grades stay small
GRADE_CORE = ("case", "doctor", "category", "item", "passed", "method")


def grade_record(g: ItemGrade, key: str) -> dict[str, Any]:
    return {"key": key, **{k: v for k, v in g.__dict__.items()
                           if k in GRADE_CORE or v not in (None, [])}}


def judgement_record(j, rule) -> dict[str, Any]:
    """A REM judgement's fields, as stage 03 records them (label, score, samples, unusable
    answers, raw comments; a probability scorer's score-token probabilities and mass)."""
    def number(x):
        return None if x is None else float(x)

    row = {"rule": rule.id, "name": rule.name, "kind": rule.kind, "label": j.label,
           "score": number(j.score), "samples": [number(x) for x in j.samples],
           "unparsable": j.unparsable, "raw": list(j.comments)}
    if hasattr(j, "probs"):
        row.update(probs={k: float(v) for k, v in j.probs.items()}, mass=number(j.mass))
    return row


# -- records → the stage's objects ---------------------------------------------------------

def consultations_of(records: Rows) -> list[Consultation]:
    return [Consultation(r["case"], r["department"], r["lang"], r["doctor"], r["doctor_model"],
                         [Turn(role=t["role"], text=t["text"]) for t in r["turns"]],
                         list(r["steps"]), r["ended_by"], r["error"], r["kind"])
            for r in records["consultations"]]


GRADE_FIELDS = tuple(ItemGrade.__dataclass_fields__)


def grades_of(records: Rows) -> list[ItemGrade]:
    """The grades (a field a record leaves out has its default: None or empty)."""
    return [ItemGrade(**{k: r[k] for k in GRADE_FIELDS if k in r}) for r in records["grades"]]


def kinds_of(records: Rows) -> dict[str, str]:
    """doctor → model | control."""
    return {d["doctor"]: d["kind"] for d in records["sp_doctors"]}


def sentences_by_consultation(records: Rows) -> dict[tuple[str, str], list[dict]]:
    out: dict[tuple[str, str], list[dict]] = {}
    for r in records["patient_sentences"]:
        out.setdefault((r["doctor"], r["case"]), []).append(r)
    return out


@dataclass
class SPView:
    """What the SP tables share, rebuilt from the records: the consultations and grades,
    each consultation's counts (``consult_rows``), the per-case scores and the kinds."""

    consults: list[Consultation]
    grades: list[ItemGrade]
    consult_rows: list[dict]
    per_case: pd.DataFrame
    kinds: dict[str, str]

    @property
    def table2(self) -> pd.DataFrame:
        return tables.table2(self.per_case.to_dict("records"))


def per_case_rows(consults, grades) -> list[dict]:
    """One row per consultation: its scores per category (Eq. 6's c/m), the methods that
    graded it, its abstained items and the items whose only match was an echo."""
    rows = []
    for c in consults:
        mine = [g for g in grades if g.case == c.case_id and g.doctor == c.doctor]
        scores = grading.case_scores(mine, [c.case_id])[0]
        rows.append({"doctor": c.doctor, "kind": c.kind, "case": c.case_id,
                     "department": c.department,
                     **{k: scores[k] for k in grading.CATEGORIES},
                     "graded_by": ",".join(sorted({g.method for g in mine})),
                     "abstained_items": sum(g.passed is None for g in mine),
                     "echo_excluded_items": sum(bool(g.echo_excluded) and not g.passed
                                                for g in mine)})
    return rows


def per_case_table(consults, grades, consult_rows: Sequence[dict]) -> pd.DataFrame:
    """``per_case``: each consultation's scores beside the patient's honesty counts."""
    per_case = pd.DataFrame(per_case_rows(consults, grades))
    if consult_rows:   # the patient's honesty per case, beside the case's scores
        honesty = pd.DataFrame(consult_rows)[["doctor", "case", "rounds", "ended_by",
                                              "sentences", "volunteered", "unsupported",
                                              "fallbacks"]]
        per_case = per_case.merge(honesty, on=["doctor", "case"], how="left")
    return per_case


#: what several builders of one build share, computed once: (the records' lists, the
#: params, the values computed from them) of the latest builds. Holding the lists keeps
#: their ids from being reused while an entry lives; builders never change a record.
_SHARED: list[tuple[tuple, Any, dict[str, Any]]] = []


def shared(records: Rows, params, name: str, compute):
    """``compute()`` once per build (the same record lists and params) and ``name``."""
    lists = tuple(records.values())
    entry = next((e for e in _SHARED if e[1] is params and len(e[0]) == len(lists)
                  and all(a is b for a, b in zip(e[0], lists))), None)
    if entry is None:
        entry = (lists, params, {})
        _SHARED.insert(0, entry)
        del _SHARED[2:]
    values = entry[2]
    if name not in values:
        values[name] = compute()
    return values[name]


def sp_view(records: Rows, params) -> SPView:
    """The SP tables' shared view of the records (computed once per build)."""
    return shared(records, params, "sp_view", lambda: _sp_view(records, params))


def _sp_view(records: Rows, params) -> SPView:
    from medpref.simulation.behaviour import consult_row

    consults, grades = consultations_of(records), grades_of(records)
    judged = sentences_by_consultation(records)
    rows = [consult_row(c, judged.get((c.doctor, c.case_id), []), params.simulation)
            for c in consults]
    return SPView(consults, grades, rows, per_case_table(consults, grades, rows),
                  kinds_of(records))


def next_turn_rows(records: Rows) -> list[dict]:
    """Every doctor's next-turn item rows, with the text scores recomputed."""
    known = {r["item"] for r in records["next_turn_items"]}
    for r in records["next_turn_predictions"]:
        if r["item"] not in known:
            raise ValueError(f"records/next_turn_predictions.jsonl: item '{r['item']}' of doctor "
                             f"'{r['doctor']}' is not in records/next_turn_items.jsonl")
    return nextturn.item_rows(records["next_turn_predictions"], records["next_turn_items"])


def next_turn_summary(records: Rows, params) -> pd.DataFrame:
    """One row per doctor with next-turn items (:func:`nextturn.summarise`), in order."""
    def compute():
        rows, n_boot, seed = next_turn_rows(records), _boot(params), params.shared.seed
        doctors = list(dict.fromkeys(r["doctor"] for r in rows))
        return pd.DataFrame([nextturn.summarise(d, [r for r in rows if r["doctor"] == d],
                                                n_boot, seed) for d in doctors])

    return shared(records, params, "next_turn_summary", compute).copy()


def gpd_check_of(records: Rows, params):
    """The GPD check (None: no next-turn items)."""
    return shared(records, params, "gpd_check", lambda: nextturn.check_of(
        records["next_turn_items"], _boot(params), params.shared.seed))


def _boot(params) -> int:
    return params.simulation.grader.bootstrap_rounds


# -- builders: Table 2 and its companions --------------------------------------------------

def run_items(records: Rows, params) -> list:
    """The model doctors' run items with their hand grades (:mod:`simulation.corrected`)."""
    from medpref.simulation.corrected import hand_graded_run_items

    return shared(records, params, "run_items", lambda: hand_graded_run_items(
        sp_view(records, params).consults, sp_view(records, params).grades,
        records["grader_verdicts"]))


def table2_table(records: Rows, params) -> pd.DataFrame:
    """PLPF Table 2, each model doctor's row saying whether the grader's error was
    measured on its sentences (``grader``: :func:`corrected.validation_reading`)."""
    from medpref.simulation.corrected import validation_reading

    t2 = sp_view(records, params).table2
    if t2.empty:
        return t2
    reading = validation_reading(run_items(records, params),
                                 params.simulation.grader.min_validated_share)
    return t2.assign(grader=[reading if k == "model" else "" for k in t2["kind"]])


def table2_corrected_table(records: Rows, params) -> pd.DataFrame:
    """Each model doctor's ALL score per category beside its Rogan–Gladen correction for
    the grader's error on the run's hand-graded sentences (:mod:`simulation.corrected`)."""
    from medpref.simulation.corrected import corrected_table

    g = params.simulation.grader
    return tables.with_kind(corrected_table(sp_view(records, params).per_case,
                                            run_items(records, params), _boot(params),
                                            params.shared.seed, g.identifiable_margin,
                                            g.min_validated_share), sp_view(records, params).kinds)


def table2_read_table(records: Rows, params) -> pd.DataFrame:
    """Each model doctor's ALL score per category beside what a blind reader found earned
    (:func:`corrected.read_table`), with the grader's validation reading."""
    from medpref.simulation.corrected import read_table, validation_reading

    g, items = params.simulation.grader, run_items(records, params)
    return tables.with_kind(read_table(sp_view(records, params).per_case, items,
                                       _boot(params), params.shared.seed),
                            sp_view(records, params).kinds).assign(
        grader=validation_reading(items, g.min_validated_share))


def per_case_builder(records: Rows, params) -> pd.DataFrame:
    return sp_view(records, params).per_case.copy()


def fidelity_table(records: Rows, params) -> pd.DataFrame:
    sp = sp_view(records, params)
    return tables.with_kind(tables.fidelity_table(sp.consult_rows), sp.kinds)


def table2_ci_table(records: Rows, params) -> pd.DataFrame:
    sp = sp_view(records, params)
    return tables.with_kind(tables.table2_intervals(sp.per_case, _boot(params)), sp.kinds)


def _paired(records: Rows, params) -> pd.DataFrame:
    def compute():
        sp = sp_view(records, params)
        return tables.with_kind(tables.table2_paired(sp.per_case, n_boot=_boot(params)),
                                sp.kinds)

    return shared(records, params, "table2_paired", compute).copy()


def table2_paired_table(records: Rows, params) -> pd.DataFrame:
    return _paired(records, params)


def table2_range_table(records: Rows, params) -> pd.DataFrame:
    sp = sp_view(records, params)
    return tables.table2_range(sp.per_case, _paired(records, params), sp.kinds,
                               n_boot=_boot(params))


def controls_gate_table(records: Rows, params) -> pd.DataFrame:
    """The controls' verdicts (:func:`tables.controls_gate`): each control of the run by
    its registered polarity, the positive one against the expected coverage each case's
    record holds."""
    from medpref.simulation.controls import CONTROLS

    g = params.simulation.controls_gate
    expected = {(c["case"], cat): v for c in records["cases"]
                for cat, v in c["expected_coverage"].items()}
    polarity = {d["doctor"]: CONTROLS[d["doctor"]].polarity for d in records["sp_doctors"]
                if d["kind"] == "control"}
    return tables.controls_gate(sp_view(records, params).per_case, polarity, expected,
                                g.max_negative_pass, g.script_fraction)


def behaviour_table(records: Rows, params) -> pd.DataFrame:
    """Per doctor, the means of its consultations' behaviour counts (with its kind)."""
    sp = sp_view(records, params)
    return tables.with_kind(tables.doctor_behaviour(sp.consult_rows), sp.kinds)


def doctors_table(records: Rows, params) -> pd.DataFrame:
    """Each doctor's identity (kind, role, adapter, model id) beside its behaviour."""
    ids = pd.DataFrame([{"doctor": d["doctor"], "kind": d["kind"], "role": d["role"],
                         "adapter": d["adapter"] or "", "model_id": d["model_id"]}
                        for d in records["sp_doctors"]])
    behaviour = behaviour_table(records, params)
    if not behaviour.empty:
        ids = ids.merge(behaviour.drop(columns=["kind"], errors="ignore"), on="doctor",
                        how="left")
    return ids


# -- builders: PLPF Table 3 and follow-up Table 6 ------------------------------------------

#: Why the grid cells are not SP-tested by default (``simulation.grid_cases: 0``).
GRID_NOT_RUN = ("not SP-tested (simulation.grid_cases: 0): on the embedded default each cell "
                "trains on a dozen or two pairs, and the 3 cases a CPU run affords detect no "
                "difference between cells; set simulation.grid_cases: null to test them on "
                "every case")
NO_GRID_POLICY = ("no grid policy: stage 05 trained no grid_<weighting>_<trajectory> run "
                  "(training.dpo.runs)")


def grid_note(records: Rows, params) -> str:
    """What Table 3 says about its cells' SP test: not trained, not tested, or on how
    many of the run's cases."""
    p = params.simulation
    cells = [d for d in records["sp_doctors"]
             if d["kind"] == "model" and grid_cell(d["doctor"], p.grid_pattern)]
    tested = sorted({d["sp_cases"] for d in cells if d["sp_cases"]})
    if not cells:
        return NO_GRID_POLICY
    if not tested:
        return GRID_NOT_RUN
    n_cases = len(records["cases"])
    if tested == [n_cases]:
        return f"SP test on all {n_cases} cases"
    return (f"SP test on {'/'.join(map(str, tested))} of the {n_cases} cases "
            "(simulation.grid_cases); read table3_grid_ci's mde before comparing cells")


def grid_layout(params) -> pd.DataFrame:
    """Table 3's cells with no score: the annotation grid's weightings × metrics, one
    column per trajectory length (``annotation.grid``); none known, no row."""
    grid = params.annotation.grid if "annotation" in params.raw else None
    if grid is None:
        return pd.DataFrame(columns=["weighting", "metric"])
    metrics = sorted(tables.SHORT.values())
    return pd.DataFrame([{"weighting": w, "metric": m,
                          **{f"k={k}": float("nan") for k in sorted(grid.trajectories)}}
                         for w in sorted(grid.weightings) for m in metrics])


def grid_table(records: Rows, params) -> pd.DataFrame:
    """PLPF Table 3 (:func:`tables.table3_grid`) with a ``note`` on its cells' SP test;
    without a tested cell, the grid's layout with no score and the reason."""
    grid = tables.table3_grid(sp_view(records, params).table2, params.simulation.grid_pattern)
    if grid.empty:
        grid = grid_layout(params)
    note = grid_note(records, params)
    if grid.empty:
        return pd.DataFrame([{"weighting": "", "metric": "", "note": note}])
    return grid.assign(note=note)


def grid_ci_table(records: Rows, params) -> pd.DataFrame:
    return tables.table3_intervals(sp_view(records, params).per_case,
                                   params.simulation.grid_pattern, n_boot=_boot(params))


def table6_table(records: Rows, params) -> pd.DataFrame:
    return tables.table6(sp_view(records, params).table2, next_turn_summary(records, params),
                         params.simulation.table6_policies)


def table6_ci_table(records: Rows, params) -> pd.DataFrame:
    """Follow-up Table 6's companion; its GPD verdicts read "not valid" when the GPD
    check failed."""
    table = tables.table6_intervals(sp_view(records, params).per_case, next_turn_rows(records),
                                    params.simulation.table6_policies, n_boot=_boot(params))
    check = gpd_check_of(records, params)
    if check is not None and not check.valid and len(table):
        table.loc[table["metric"] == "Next-turn GPD", "verdict"] = "not valid"
    return table


# -- builders: next turn, compliance, held-out, questions, validation, overlap ------------

def next_turn_table(records: Rows, params) -> pd.DataFrame:
    checked, _ = nextturn.apply_gpd_check(next_turn_summary(records, params), pd.DataFrame(),
                                          gpd_check_of(records, params))
    return checked


def next_turn_paired_table(records: Rows, params) -> pd.DataFrame:
    paired = nextturn.paired_table(next_turn_rows(records), "sft", _boot(params),
                                   params.shared.seed)
    _, checked = nextturn.apply_gpd_check(pd.DataFrame(), paired, gpd_check_of(records, params))
    return checked


def next_turn_check_table(records: Rows, params) -> pd.DataFrame:
    check = gpd_check_of(records, params)
    return check.table if check is not None else pd.DataFrame(columns=nextturn.CHECK_COLUMNS)


def compliance_tables(records: Rows) -> dict[str, pd.DataFrame]:
    """doctor → its transcripts' compliance per rule (:func:`rem.compliance.
    compliance_summary`), doctors in record order."""
    from medpref.remscore.compliance import compliance_summary

    out = {}
    for doctor in dict.fromkeys(r["doctor"] for r in records["compliance_judgements"]):
        mine = [r for r in records["compliance_judgements"] if r["doctor"] == doctor]
        rules = list(dict.fromkeys((r["rule"], r["name"], r["kind"]) for r in mine))
        out[doctor] = compliance_summary(rules, {rule: [r["score"] for r in mine
                                                        if r["rule"] == rule]
                                                 for rule, _, _ in rules})
    return out


def _rem_mode(records: Rows) -> str:
    rows = records["compliance_judgements"]
    return rows[0]["rem"] if rows else ""


def compliance_table(records: Rows, params) -> pd.DataFrame:
    """Every doctor's compliance per rule, and its rank per rule (PLPF Fig. 3: 1 = most
    compliant)."""
    comp = compliance_tables(records)
    if not comp:
        return pd.DataFrame()
    long = pd.concat([t.assign(doctor=d, rem=_rem_mode(records)) for d, t in comp.items()],
                     ignore_index=True)
    long["rank"] = long.groupby("rule")["mean"].rank(ascending=False, method="min")
    return long


def radar_figure(records: Rows, params):
    """PLPF Fig. 3 on the SP transcripts; a figure that says so when nothing was scored."""
    from medpref.remscore.compliance import radar_plot
    from medpref.reports import figure

    comp = compliance_tables(records)
    if comp:
        return radar_plot(comp, title="Rule compliance of SP transcripts "
                                      f"(REM: {_rem_mode(records)})")
    fig, ax = figure(figsize=(5.5, 2.0))
    ax.axis("off")
    ax.text(0.5, 0.5, "No REM compliance scored in this run\n(simulation.rem_radar off, or no "
                      "model doctor spoke)", ha="center", va="center")
    return fig


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


def grader_validation_table(records: Rows, params) -> pd.DataFrame:
    from medpref.simulation.validation import validation_table

    return validation_table(records["grader_verdicts"], _boot(params), params.shared.seed)


def split_overlap_table(records: Rows, params) -> pd.DataFrame:
    return overlap.table_of(records["overlap_pairs"])


# -- the transcripts page ------------------------------------------------------------------

def annotated_records(records: Rows, params) -> list[dict]:
    """Each consultation's record with what a reader needs: per doctor sentence whether
    it echoes the patient, per patient sentence whether the case supports it, and every
    checklist item's grade with the sentence that earned it."""
    from medpref.echo import doctor_sentences, split_sentences
    from medpref.simulation.patients import is_dont_know

    p = params.simulation
    sp = sp_view(records, params)
    fid = {(r["doctor"], r["case"]): set(r["unsupported_at"]) for r in sp.consult_rows}
    nothing_asked = {t.strip() for t in p.patient.nothing_asked.values()}
    scores = {(r["doctor"], r["case"]): r for r in sp.per_case.to_dict("records")}
    rows = []
    for c in sp.consults:
        echoes = {(s.turn, s.text) for s in doctor_sentences(
            c.turns, p.grader.echo_overlap, p.grader.echo_min_new) if s.echo}
        unsupported = fid.get((c.doctor, c.case_id), set())
        rec = c.record()
        rec["chief_complaint"] = c.turns[0].text if c.turns else ""
        for i, t in enumerate(rec["turns"]):
            t["sentences"] = [{"text": s, "echo": (i, s) in echoes,
                               "unsupported": t["role"] == "patient" and s in unsupported,
                               "dont_know": t["role"] == "patient" and is_dont_know(s),
                               "nothing_asked": t["role"] == "patient"
                               and s.strip() in nothing_asked}
                              for s in split_sentences(t["text"])]
        sc = scores.get((c.doctor, c.case_id), {})
        rec["scores"] = {k: (None if pd.isna(sc.get(k)) else sc.get(k))
                         for k in grading.CATEGORIES}
        rec["items"] = [{"category": g.category, "item": g.item, "passed": g.passed,
                         "method": g.method, "evidence_turn": g.evidence_turn,
                         "evidence": g.evidence, "echo_excluded": g.echo_excluded,
                         "listing_excluded": g.listing_excluded}
                        for g in sp.grades if g.case == c.case_id and g.doctor == c.doctor]
        rows.append(rec)
    return rows


def transcripts_page(records: Rows, params) -> str:
    from medpref.simulation.transcripts_html import render_transcripts_html

    return render_transcripts_html(annotated_records(records, params))


OUTPUTS = StageOutputs("06_simulation", (
    Records("cases", "each SP case of the run: department, language, checklist sizes, "
            "control_script's expected coverage per category"),
    Records("sp_doctors", "each doctor under test: kind, role, adapter, model id, SP cases met"),
    Records("consultations", "each SP consultation (doctor × case): turns, each doctor turn's "
            "raw answer, where each patient reply came from (fallback), how it ended, error; "
            "key: the doctor's model and adapter, the case, the decoding and patient settings"),
    Records("grades", "every checklist grade (consultation × item): verdict, method, evidence "
            "sentence and turn, echoes and listings refused, a judge's raw answers"),
    Records("patient_sentences", "every patient sentence judged against its case: MiniLM "
            "similarity to the best chunk and to the question, verbatim, verdict"),
    Records("compliance_judgements", "stage 03's REM on each transcript (cut at its last "
            "doctor turn), per rule: label, score, samples, raw comments"),
    Records("next_turn_items", "each held-out next-turn item: reference turn, and the GPD "
            "check's verdicts (reference vs itself, vs an unrelated turn; raw and parsed)"),
    Records("next_turn_predictions", "each doctor's next-turn prediction per item: raw "
            "completion or error, the GPD judge's parsed and raw verdict"),
    Records("heldout_cuts", "each held-out compliance state: dialogue, part, cut, "
            "diagnosis turn, history length, where its bad turn came from"),
    Records("heldout_turns", "each policy's and control's turn per held-out state, with the "
            "REM's score per rule"),
    Records("grader_verdicts", "each hand-graded item: the hand verdict and every grader's "
            "(configured and compared), with the sentence it credited"),
    Records("overlap_pairs", "the SP cases' overlap check: each listed case × dialogue pair "
            "(cosine, shared disease words, part, status), each unchecked case"),
    Table("table2", table2_table, floatfmt=".1f"),
    Table("per_case", per_case_builder, floatfmt=".2f"),
    Table("patient_fidelity", fidelity_table, floatfmt=".2f"),
    Table("next_turn", next_turn_table, floatfmt=".2f"),
    Table("next_turn_paired", next_turn_paired_table, floatfmt=".3f"),
    Table("next_turn_gpd_check", next_turn_check_table, floatfmt=".3f"),
    Table("table3_grid", grid_table, floatfmt=".1f"),
    Table("table6_rethinker", table6_table, floatfmt=".2f"),
    Table("table3_grid_ci", grid_ci_table, floatfmt=".3f"),
    Table("table6_rethinker_ci", table6_ci_table, floatfmt=".3f"),
    Table("grader_validation", grader_validation_table, floatfmt=".3f"),
    Table("table2_ci", table2_ci_table, floatfmt=".1f"),
    Table("table2_paired", table2_paired_table, floatfmt=".3f"),
    Table("table2_range", table2_range_table, floatfmt=".1f"),
    Table("table2_corrected", table2_corrected_table, floatfmt=".3f"),
    Table("table2_read", table2_read_table, floatfmt=".1f"),
    Table("controls_gate", controls_gate_table, floatfmt=".1f"),
    Table("compliance", compliance_table, floatfmt=".3f"),
    Figure("compliance_radar", radar_figure),
    Table("doctors", doctors_table, floatfmt=".3f"),
    Table("heldout_compliance", heldout_table, floatfmt=".3f"),
    Table("heldout_states", heldout_states_table, floatfmt=".0f"),
    Table("question_share", question_share_table, floatfmt=".3f"),
    Table("split_overlap", split_overlap_table, floatfmt=".3f"),
    Page("transcripts", transcripts_page, suffix=".html",
         doc="every consultation for clinicians: one self-contained page"),
))
