"""Does the simulated patient speak as a patient? Per case source, without any model.

Drives the extractive patient (the default, ``simulation.patient.kind``; it needs MiniLM
only, no language model) with the four control doctors (control_script, control_reciter,
control_lecture, control_echo) for ``simulation.rounds`` rounds on every case of each
source, once with the case text as the source wrote it (``voice: verbatim``, the patient
before issue 41) and once in the patient's words (``voice: patient``), and counts the
patient lines (fallbacks left out) in the second person or with an actor instruction, with
a field label, with markdown, in the third person (where the patient speaks for
themself), or with a result nobody asked for (``medpref.simulation.voice``).

    python scripts/patient_voice.py --data ../shared/data \\
        --cspt /path/to/SpTesting [--limit 40] [--examples 3] [--out table.md]

``--data`` is a folder whose ``agentclinic/`` holds the published ``agentclinic_*.jsonl``
files (each file present is measured); ``--cspt`` a CSPT copy in any form
``medpref.data.cspt`` reads. The embedded cases are always measured. The table goes to
stdout (and ``--out``); it holds counts only, no case text; ``--examples`` prints faulty
lines to stderr for a reader.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pandas as pd

from medpref.data.agentclinic import AGENTCLINIC_FILES, agentclinic_cases
from medpref.data.cspt import load_cspt
from medpref.data.sp_cases import embedded_sp_cases
from medpref.params import REPO_ROOT, load_params, repo_path
from medpref.sentences import split_sentences
from medpref.simulation import consult, controls
from medpref.simulation.knowledge import section_sentences
from medpref.simulation.patients import (
    ExtractivePatient,
    PatientContext,
    fallback_sentences,
)
from medpref.simulation.voice import (
    FAULTS,
    FINDINGS_SECTION,
    has_informant,
    line_faults,
    patient_facts,
    reports_result,
)

CONTROLS = ("control_script", "control_reciter", "control_lecture", "control_echo")


def sources(args) -> dict[str, list]:
    out = {"embedded": embedded_sp_cases()}
    if args.cspt:
        out["cspt"] = load_cspt(args.cspt)[0]
    for name, file in AGENTCLINIC_FILES.items():
        if args.data and (args.data / "agentclinic" / file).is_file():
            out[f"agentclinic_{name}"] = list(agentclinic_cases(args.data, file=name))
    return {k: v[:args.limit] if args.limit else v for k, v in out.items()}




def warm(encode, cases) -> None:
    """Encode in one batch what the patient will compare: each case's sentences in both
    voices, its scripted questions, and the script and reciter controls' sentences."""
    texts = []
    for c in cases:
        if c.lang == "zh":             # Chinese is compared by character bigrams, not MiniLM
            continue
        texts += [*patient_facts(c).history, *patient_facts(c).findings]
        texts += [s for v in c.patient_info.values() for s in section_sentences(str(v))]
        texts += [q.get("doctor", "") for q in c.script]
        texts += [s for line in controls.script_lines(c)[0] for s in split_sentences(line)]
        texts += split_sentences(controls.recital(c))
    encode([t for t in texts if t.strip()])


def measure(cases, voice: str, encode, p) -> list[dict]:
    """Every control's consultations of ``cases`` with the extractive patient in
    ``voice``: one row per patient line with its faults."""
    params = p.patient.model_copy(update={"voice": voice, "kind": "extractive"})
    by_id = {c.id: c for c in cases}
    patient = ExtractivePatient(PatientContext(params, by_id, {}, encode))
    setup = consult.SimulationSetup(patient=patient, doctor_template=None, rounds=p.rounds)
    no_fact = fallback_sentences(params)
    rows = []
    for name in CONTROLS:
        doctor = controls.build_control(name, controls.ControlContext(by_id, p.rounds))
        for c in consult.simulate(cases, doctor, setup):
            informant = has_informant(by_id[c.case_id])
            for line in line_faults(c.turns, lambda t: t.strip() in no_fact, informant):
                rows.append({"doctor": name, "case": c.case_id, **line,
                             "question": c.turns[line["turn"] - 1].text})
    return rows


def summary(rows: list[dict], source: str, voice: str, n_cases: int) -> dict:
    lines = len(rows)
    row = {"source": source, "voice": voice, "cases": n_cases, "patient_lines": lines,
           "faulty": sum(bool(r["faults"]) for r in rows)}
    row["faulty_share"] = row["faulty"] / lines if lines else 0.0
    row.update({f: sum(f in r["faults"] for r in rows) for f in FAULTS})
    return row


def history_results(cases, source: str) -> dict:
    """Sentences of the history sections (all but the findings sections) that report an
    examination or test result: as the source wrote them, and in the patient's voice."""
    verbatim = [s for c in cases for name, text in c.patient_info.items()
                if not FINDINGS_SECTION.search(name) for s in section_sentences(str(text))]
    return {"source": source, "cases": len(cases), "history_sentences": len(verbatim),
            "with_result_verbatim": sum(map(reports_result, verbatim)),
            "with_result_patient": sum(reports_result(s) for c in cases
                                       for s in patient_facts(c).history)}


def provenance(argv: list[str]) -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=REPO_ROOT).stdout.strip() or "unknown"
    command = " ".join(["python scripts/patient_voice.py", "--data DATA --cspt CSPT", *argv])
    return f"Made by `{command}` at commit {commit}."


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, help="a folder holding agentclinic/*.jsonl")
    ap.add_argument("--cspt", type=Path)
    ap.add_argument("--limit", type=int, default=None, help="cases per source (default: all)")
    ap.add_argument("--examples", type=int, default=0)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    from medpref.embedding import load_encoder, memoized

    p = load_params().simulation
    encode = memoized(load_encoder(repo_path(p.embedding_model)))
    table, history = [], []
    for source, cases in sources(args).items():
        history.append(history_results(cases, source))
        print(f"{source}: {len(cases)} cases", file=sys.stderr, flush=True)
        warm(encode, cases)
        for voice in ("verbatim", "patient"):
            rows = measure(cases, voice, encode, p)
            table.append(summary(rows, source, voice, len(cases)))
            for r in [r for r in rows if r["faults"]][:args.examples]:
                print(f"[{source} {voice} {r['doctor']} {r['case']}] {','.join(r['faults'])}: "
                      f"{r['question'][:80]!r} -> {r['text'][:200]!r}", file=sys.stderr)
    argv = ["--limit", str(args.limit)] if args.limit else []
    text = "\n\n".join([
        provenance(argv), "Patient lines (not fallbacks) with each fault, by source and voice:",
        pd.DataFrame(table).to_markdown(index=False, floatfmt=".3f"),
        "History sentences that report an examination or test result:",
        pd.DataFrame(history).to_markdown(index=False)])
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
