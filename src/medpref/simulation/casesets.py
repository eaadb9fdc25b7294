"""The control doctors on every case set the SP stage accepts, with no model call.

For one case set (the embedded cases, CSPT, or one of AgentClinic's four files) this
builds every case, plays the control doctors (:mod:`medpref.simulation.controls`)
against the case's simulated patient, grades them with the configured grader and
writes each control's Sym./Test/Dis. (Eq. 6, in points) beside what a clinician's
reading says the script covers. It is the instrument check behind stage 06's gate
(``simulation.controls_gate``), run on a set before any doctor is::

    python -m medpref.simulation.casesets --source cspt --path DIR_OF_ITS_TWO_ARCHIVES
    python -m medpref.simulation.casesets --source nejm_extended --limit 40

``--path`` for AgentClinic is the folder holding ``agentclinic/`` (default: the shared
data directory). A category a case cannot measure (every item named in its opening
complaint, :func:`~medpref.simulation.grading.unmeasurable_categories`) is left out of
every score; the table says where a whole set cannot measure one (:func:`unmeasurable`).
Below the table stands the stage's gate on the set, as stage 06 would judge it.

What a clinician reads in each script comes from stage 06's file
(``simulation.controls_gate.script_coverage``) and from the hand-read files of
:data:`EXTRA_COVERAGE` (``--coverage``), so that rows read since the stage last ran
gate the set too; ``--cases`` or ``--hand-read`` play only some cases::

    python -m medpref.simulation.casesets --source cspt --path DIR --hand-read
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from medpref.contracts import ContractError, SPCase, text_lines
from medpref.simulation import controls, grading, tables
from medpref.simulation.config import SimulationParams

#: the case sets by the name the check takes: (stage source, AgentClinic file)
CASE_SETS = {"embedded": ("embedded", None), "cspt": ("cspt", None),
             "medqa": ("agentclinic", "medqa"),
             "medqa_extended": ("agentclinic", "medqa_extended"),
             "nejm": ("agentclinic", "nejm"), "nejm_extended": ("agentclinic", "nejm_extended")}
SHORT = {"symptoms": "Sym.", "tests": "Test", "diseases": "Dis."}
#: hand-read script coverage files read besides stage 06's (``controls_gate.script_coverage``,
#: a pinned input of the stage): rows read after the stage last ran, kept apart until its
#: next run merges them into the stage's file; none today (``--coverage`` names some)
EXTRA_COVERAGE: tuple[str, ...] = ()


def load_case_set(name: str, path: str | Path | None = None, limit: int | None = None,
                  start: int = 0, ids: Sequence[str] | None = None) -> list[SPCase]:
    """The cases of one named case set (:data:`CASE_SETS`): those named in ``ids`` (in the
    set's order; an id the set lacks is refused) or all, then ``limit`` of them from the
    ``start``-th (0-based; the extended AgentClinic files begin with the cases of the
    shorter ones)."""
    from medpref.data import adapters

    if name not in CASE_SETS:
        raise ValueError(f"unknown case set {name!r}; expected one of {sorted(CASE_SETS)}")
    source, file = CASE_SETS[name]
    if source == "embedded":
        cases = adapters.embedded_sp_cases(path)
    elif source == "cspt":
        if path is None:
            raise ValueError("case set 'cspt' needs --path (the folder of its two archives)")
        cases = adapters.cspt_cases(Path(path))
    else:
        cases = adapters.agentclinic_cases(path, file=file)
    cases = list(cases)
    if ids is not None:
        missing = sorted(set(ids) - {c.id for c in cases})
        if missing:
            raise ValueError(f"case set {name!r} has no case {', '.join(missing)}")
        wanted = set(ids)
        cases = [c for c in cases if c.id in wanted]
    return cases[start:None if limit is None else start + limit]


def coverage_files(p: SimulationParams, extra: Sequence[str | Path] = EXTRA_COVERAGE
                   ) -> list[Path]:
    """The hand-read coverage files a control run reads: stage 06's (when configured),
    then ``extra`` (paths relative to the repository unless absolute)."""
    from medpref.params import repo_path

    stage = [p.controls_gate.script_coverage] if p.controls_gate.script_coverage else []
    return [repo_path(f) for f in (*stage, *extra)]


def hand_coverage(paths: Sequence[Path], cases: Sequence[SPCase]
                  ) -> dict[tuple[str, str], controls.ScriptCoverage]:
    """The hand-read rows of these cases from every file, each checked against its case
    (:func:`~medpref.simulation.controls.load_script_coverage`). A (case, category) read
    in two files is refused naming both, whether or not the case is in this run: the
    files merge into one at stage 06's next rerun, and two readings of one script would
    leave the gate to whichever file came last."""
    out: dict[tuple[str, str], controls.ScriptCoverage] = {}
    first: dict[tuple[str, str], str] = {}
    for path in paths:
        out.update(controls.load_script_coverage(path, cases))
        for line, key in _row_keys(path):
            if key in first:
                raise ContractError(path, line, "case", f"{key[0]} {key[1]} is read in two "
                                    f"files: here and {first[key]}")
            first[key] = f"{path}:{line}"
    return out


def _row_keys(path: Path):
    """(line, (case, category)) of each row of a coverage file that
    :func:`~medpref.simulation.controls.load_script_coverage` has already accepted."""
    for line, raw in text_lines(path):
        if raw.strip():
            row = json.loads(raw)
            yield line, (row["case"], row["category"])


@dataclass
class Instrument:
    """The pieces of stage 06 a control run needs: the patient, the grader, the rounds."""

    setup: object           # consult.SimulationSetup
    grader: object
    rounds: int


def build_instrument(p: SimulationParams, cases: Sequence[SPCase], encode) -> Instrument:
    """Stage 06's patient and grader for these cases, as the stage builds them (no judge:
    a judge grader needs a served model and is not a control run)."""
    from medpref.prompts import load_prompt
    from medpref.simulation import consult
    from medpref.simulation.graders import GraderContext, build_grader
    from medpref.simulation.knowledge import build_knowledge_bases
    from medpref.simulation.patients import PatientContext, build_patient

    kbs = build_knowledge_bases(cases, encode, p.patient.chunk_tokens)
    patient = build_patient(p.patient.kind, PatientContext(
        p.patient, {c.id: c for c in cases}, kbs, encode))
    setup = consult.SimulationSetup(patient=patient, doctor_template=load_prompt(p.doctor_prompt),
                                    rounds=p.rounds)
    gsetup = grading.GradingSetup(
        judge=None, templates=[], count_template=None, encode=encode,
        pass_threshold=p.grader.pass_threshold, max_candidates=p.grader.max_candidates,
        embedding_threshold=p.grader.embedding_threshold)
    grader = build_grader(p.grader.mode, GraderContext(p.grader, gsetup, None))
    return Instrument(setup, grader, p.rounds)


def play_controls(cases: Sequence[SPCase], inst: Instrument, names: Sequence[str]
                  ) -> tuple[pd.DataFrame, list, list]:
    """Each control against every case: one row per (control, case) with its c/m per
    category, and the consultations and grades behind them."""
    from medpref.simulation import consult
    from medpref.simulation.outputs import per_case_rows

    by_id = {c.id: c for c in cases}
    rows, all_consults, all_grades = [], [], []
    for name in names:
        doctor = controls.build_control(name, controls.ControlContext(by_id, inst.rounds))
        consults = consult.simulate(list(cases), doctor, inst.setup)
        grades = grading.leave_out_unmeasurable(inst.grader.grade(consults, by_id), by_id)
        rows += per_case_rows(consults, grades)
        all_consults += consults
        all_grades += grades
    return pd.DataFrame(rows), all_consults, all_grades


def unmeasurable(cases: Sequence[SPCase]) -> dict[str, str]:
    """The categories this case set cannot measure, with why: every item of the category
    named in the case's opening complaint (a question about it only repeats the patient,
    so a perfect interview scores 0 there), in every case that has such items."""
    out = {}
    for cat in grading.CATEGORIES:
        with_items = [c for c in cases if getattr(c.checklist, cat)]
        if with_items and all(cat in grading.unmeasurable_categories(c) for c in with_items):
            out[cat] = (f"every {cat[:-1]} item of all {len(with_items)} cases is named in the "
                        "opening complaint")
    return out


def control_table(per_case: pd.DataFrame, expected: dict[tuple[str, str], float | None]
                  ) -> pd.DataFrame:
    """Per control: its Eq. 6 score per category over all the set's cases (points, the
    mean of c/m over the cases the category measures; NaN where none does), and per
    category what a clinician's reading expects of the script where one is known."""
    rows = []
    for control, sub in per_case.groupby("doctor", sort=False):
        row = {"control": control, "cases": len(sub)}
        for cat in grading.CATEGORIES:
            vals = sub[cat].dropna().astype(float)
            row[SHORT[cat]] = 100.0 * vals.mean() if len(vals) else float("nan")
        rows.append(row)
    out = pd.DataFrame(rows)
    cover = {SHORT[cat]: _expected_mean(per_case, expected, cat) for cat in grading.CATEGORIES}
    out.attrs["expected"] = cover
    return out


def _expected_mean(per_case, expected, cat) -> float:
    vals = [expected.get((c, cat)) for c in per_case["case"].unique()]
    vals = [v for v in vals if v is not None]
    return 100.0 * sum(vals) / len(vals) if vals else float("nan")


def run_case_set(name: str, path=None, limit: int | None = None, params=None,
                 names: Sequence[str] | None = None, start: int = 0,
                 coverage: Sequence[str | Path] = EXTRA_COVERAGE,
                 ids: Sequence[str] | None = None, hand_read: bool = False):
    """The controls' table of one case set, its per-case rows, grades and what it cost.
    ``coverage``: hand-read files read besides stage 06's (:func:`coverage_files`);
    ``ids``: only these cases; ``hand_read``: only the cases some file has a row for."""
    from medpref.embedding import load_encoder
    from medpref.params import load_params, repo_path

    p = (params or load_params()).simulation
    cases = load_case_set(name, path, limit, start, ids)
    t0 = time.perf_counter()
    # the hand reading first: a row that no longer fits its case stops before the long part
    files = coverage_files(p, coverage)
    hand = hand_coverage(files, cases)
    if hand_read:
        cases = [c for c in cases if any((c.id, cat) in hand for cat in grading.CATEGORIES)]
        if not cases:
            raise ValueError(f"no case of {name!r} has a hand-read row in "
                             f"{', '.join(map(str, files))}")
    expected = controls.expected_coverage(cases, hand)
    encode = load_encoder(repo_path(p.embedding_model))
    inst = build_instrument(p, cases, encode)
    per_case, consults, grades = play_controls(cases, inst, names or list(controls.CONTROLS))
    skip = unmeasurable(cases)
    table = control_table(per_case, expected)
    g = p.controls_gate
    polarity = {n: controls.CONTROLS[n].polarity for n in per_case["doctor"].unique()}
    gate = tables.controls_gate(per_case, polarity, expected, g.max_negative_pass,
                                g.script_fraction)
    read = sorted({case for case, _ in hand})
    table.attrs.update(case_set=name, n_cases=len(cases), unmeasurable=skip, gate=gate,
                       seconds=time.perf_counter() - t0, hand_read=read,
                       coverage=[_shown(f) for f in files])
    return table, per_case, grades


def render(table: pd.DataFrame) -> str:
    """The table as markdown, with the expected script coverage and what was left out."""
    a = table.attrs
    lines = [f"### {a['case_set']} ({a['n_cases']} cases, {a['seconds']:.0f} s)", "",
             table.to_markdown(index=False, floatfmt=".1f"), "",
             "control_script expected (hand-read or derived coverage): "
             + ", ".join(f"{k} {v:.1f}" for k, v in a["expected"].items())]
    if "hand_read" in a:      # scripts/caseset_judge.py renders tables without it
        lines.append(f"hand-read cases in this run: {len(a['hand_read'])} "
                     f"(from {', '.join(a['coverage']) or 'no file'})")
    for cat, why in a["unmeasurable"].items():
        lines.append(f"{SHORT[cat]} left out of every score: {why}")
    lines += ["", "The stage's gate on this set (simulation.controls_gate):", "",
              a["gate"].to_markdown(index=False, floatfmt=".1f")]
    return "\n".join(lines) + "\n"


def _shown(path: Path) -> str:
    """A path as the table prints it: relative to the repository where it lies inside."""
    from medpref.params import REPO_ROOT

    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT.resolve()))
    except ValueError:
        return str(path)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", required=True, choices=sorted(CASE_SETS))
    ap.add_argument("--path", default=None, help="CSPT: folder of its archives; "
                    "AgentClinic: folder holding agentclinic/ (default: shared data)")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--start", type=int, default=0, help="skip this many cases first")
    ap.add_argument("--controls", nargs="+", default=None, choices=sorted(controls.CONTROLS),
                    help="the controls to play (default: every registered one)")
    ap.add_argument("--cases", nargs="+", default=None, metavar="ID",
                    help="play only these cases (before --start/--limit)")
    ap.add_argument("--hand-read", action="store_true",
                    help="play only the cases with a hand-read coverage row (after "
                         "--cases/--start/--limit)")
    ap.add_argument("--coverage", nargs="*", default=list(EXTRA_COVERAGE), metavar="FILE",
                    help="hand-read coverage read besides stage 06's "
                         "(simulation.controls_gate.script_coverage), relative to the "
                         "repository unless absolute; default: %(default)s; --coverage "
                         "alone: none")
    ap.add_argument("--per-case", default=None, help="write the per-case rows (CSV) here")
    args = ap.parse_args(argv)
    table, per_case, _ = run_case_set(args.source, args.path, args.limit, names=args.controls,
                                      start=args.start, coverage=args.coverage, ids=args.cases,
                                      hand_read=args.hand_read)
    print(render(table))
    if args.per_case:
        per_case.to_csv(args.per_case, index=False)


if __name__ == "__main__":
    main()
