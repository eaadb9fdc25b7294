"""Stage 06's grading (dvc stage ``sp_grading``), declared once: the checklist grades of
every consultation stage 06's doctors held, the grader's verdicts on the hand-graded
items, and every table built from them.

Records (``reports/06_sp_grading/records/``), one row per item with its content ``key``:

* ``grades`` — every checklist grade (consultation × item): verdict, method, evidence
  sentence and turn, the echoes and listings refused, abstentions, a judge's raw answers
  (a field at its default, None or empty, is left out);
* ``grader_verdicts`` — each hand-graded item with every grader's verdict on it.

The builders also read the doctors' records (:data:`medpref.simulation.outputs.OUTPUTS`:
the cases, the consultations, the patient's sentences, from ``reports/06_simulation``) and
the next-turn rows Table 6 shows (:data:`medpref.simulation.nextturn_stage.OUTPUTS`, from
``reports/06_next_turn``); :class:`~medpref.simulation.common.ReadingOutputs` loads them
beside this stage's own, so ``medpref tables 06_sp_grading`` rebuilds Table 2, its
companions, Tables 3 and 6 and the transcripts page with no model call and no MiniLM.
"""

from __future__ import annotations

import pandas as pd

from medpref.outputs import Page, Records, Table, shared
from medpref.simulation import grading, tables
from medpref.simulation.common import ReadingOutputs
from medpref.simulation.doctors import recorded_cells
from medpref.simulation.nextturn_stage import OUTPUTS as NEXT_TURN
from medpref.simulation.nextturn_stage import gpd_check_of, next_turn_rows, next_turn_summary
from medpref.simulation.outputs import OUTPUTS as DOCTORS
from medpref.simulation.outputs import Rows, _boot, sp_view

# -- builders: Table 2 and its companions --------------------------------------------------

def run_items(records: Rows, params) -> list:
    """The model doctors' run items with their hand grades (:mod:`simulation.corrected`)."""
    from medpref.simulation.corrected import hand_graded_run_items

    return shared(records, "run_items", lambda: hand_graded_run_items(
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

    return shared(records, "table2_paired", compute).copy()


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
NO_GRID_POLICY = ("no grid policy: stage 05 trained no run on the pairs of a cell of stage "
                  "04's grid (training.dpo.runs)")


def grid_note(records: Rows, params) -> str:
    """What Table 3 says about its cells' SP test: not trained, not tested, or on how
    many of the run's cases."""
    grid = recorded_cells(records["sp_doctors"])
    cells = [d for d in records["sp_doctors"] if d["doctor"] in grid]
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
    grid = tables.table3_grid(sp_view(records, params).table2,
                              recorded_cells(records["sp_doctors"]))
    if grid.empty:
        grid = grid_layout(params)
    note = grid_note(records, params)
    if grid.empty:
        return pd.DataFrame([{"weighting": "", "metric": "", "note": note}])
    return grid.assign(note=note)


def grid_ci_table(records: Rows, params) -> pd.DataFrame:
    return tables.table3_intervals(sp_view(records, params).per_case,
                                   recorded_cells(records["sp_doctors"]),
                                   n_boot=_boot(params))


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


def grader_validation_table(records: Rows, params) -> pd.DataFrame:
    from medpref.simulation.validation import validation_table

    return validation_table(records["grader_verdicts"], _boot(params), params.shared.seed)


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


OUTPUTS = ReadingOutputs("06_sp_grading", (
    Records("grades", "every checklist grade (consultation × item): verdict, method, evidence "
            "sentence and turn, echoes and listings refused, a judge's raw answers"),
    Records("grader_verdicts", "each hand-graded item: the hand verdict and every grader's "
            "(configured and compared), with the sentence it credited"),
    Table("table2", table2_table, floatfmt=".1f"),
    Table("per_case", per_case_builder, floatfmt=".2f"),
    Table("patient_fidelity", fidelity_table, floatfmt=".2f"),
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
    Table("doctors", doctors_table, floatfmt=".3f"),
    Page("transcripts", transcripts_page, suffix=".html",
         doc="every consultation for clinicians: one self-contained page"),
), reads=(DOCTORS, NEXT_TURN))
