"""Stage 06's doctors (dvc stage ``simulation``), declared once: what the doctors said and
how the patient and the REM answered, as per-item records, and the tables built from them.

Every model answer of the SP test is a record (``reports/06_simulation/records/``), one
row per item with its content ``key``:

* ``cases`` — each SP case of the run: department, language, checklist sizes and what
  ``control_script`` is expected to earn per category (the controls' gate reads it);
* ``sp_doctors`` — each doctor under test: kind, role, adapter, model id, how many cases it
  met in the SP test (a Table 3 grid cell: ``simulation.grid_cases``);
* ``consultations`` — each SP consultation (doctor × case): the turns, each model doctor
  turn's raw completion where it differs from the turn, where each patient reply came from
  (which fallback, if any), how it ended, the error;
* ``patient_sentences`` — every patient sentence judged against its case (MiniLM):
  similarity to the best chunk and to the question, verbatim or not, the verdict;
* ``compliance_judgements`` — stage 03's REM on each transcript, per rule (the radar);
* ``overlap_pairs`` — the SP cases' overlap check against the split's corpus: each listed
  pair's cosine and shared disease words, each case that could not be checked.

The checklist grades, Table 2 and everything built from them are the grading stage's
(:mod:`medpref.simulation.grading_outputs`, ``reports/06_sp_grading``), which reads these
records: a change to a grader parameter reruns only that stage, from these consultations.
The next turn and the held-out compliance are stages of their own
(:mod:`~medpref.simulation.nextturn_stage`, :mod:`~medpref.simulation.heldout_stage`).
The tables and the radar are pure functions of the records and the params (no model call,
no MiniLM), so ``medpref tables 06_simulation`` rebuilds them. The records of the
embedded default hold only the project's own text (its SP cases and dialogues); a run on
AgentClinic, CSPT or MTS-Dialog writes fragments of that licensed data into them (the
patient answers with its case's text), as the transcripts page does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from medpref.outputs import Figure, Records, StageOutputs, Table, shared
from medpref.simulation import grading, overlap, tables
from medpref.simulation.consult import Consultation
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
    return [Consultation.from_record(r) for r in records["consultations"]]


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


def sp_view(records: Rows, params) -> SPView:
    """The SP tables' shared view of the records (computed once per build)."""
    return shared(records, "sp_view", lambda: _sp_view(records, params))


def _sp_view(records: Rows, params) -> SPView:
    consults, grades = consultations_of(records), grades_of(records)
    rows = consult_rows_of(records, params, consults)
    return SPView(consults, grades, rows, per_case_table(consults, grades, rows),
                  kinds_of(records))


def consult_rows_of(records: Rows, params, consults: Sequence[Consultation] | None = None
                    ) -> list[dict]:
    """Each consultation's honesty and behaviour counts (:func:`behaviour.consult_row`),
    from the consultations and patient sentences alone (no grade)."""
    from medpref.simulation.behaviour import consult_row

    judged = sentences_by_consultation(records)
    return [consult_row(c, judged.get((c.doctor, c.case_id), []), params.simulation)
            for c in (consultations_of(records) if consults is None else consults)]


def _boot(params) -> int:
    return params.simulation.grader.bootstrap_rounds


# -- builders: compliance, overlap -----------------------------------------------------

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


def split_overlap_table(records: Rows, params) -> pd.DataFrame:
    return overlap.table_of(records["overlap_pairs"])


OUTPUTS = StageOutputs("06_simulation", (
    Records("cases", "each SP case of the run: department, language, checklist sizes, "
            "control_script's expected coverage per category"),
    Records("sp_doctors", "each doctor under test: kind, role, adapter, model id, SP cases met"),
    Records("consultations", "each SP consultation (doctor × case): turns, each doctor turn's "
            "raw answer, where each patient reply came from (fallback), how it ended, error; "
            "key: the doctor's model and adapter, the case, the decoding and patient settings"),
    Records("patient_sentences", "every patient sentence judged against its case: MiniLM "
            "similarity to the best chunk and to the question, verbatim, verdict"),
    Records("compliance_judgements", "stage 03's REM on each transcript (cut at its last "
            "doctor turn), per rule: label, score, samples, raw comments"),
    Records("overlap_pairs", "the SP cases' overlap check: each listed case × dialogue pair "
            "(cosine, shared disease words, part, status), each unchecked case"),
    Table("compliance", compliance_table, floatfmt=".3f"),
    Figure("compliance_radar", radar_figure),
    Table("split_overlap", split_overlap_table, floatfmt=".3f"),
))
