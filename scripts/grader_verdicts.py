"""Rewrite the grading stage's ``records/grader_verdicts.jsonl`` from the hand-graded items.

The record holds every hand-graded item (``simulation.grader.graded_items``) with the
verdict of the configured grader and of each compared one; it needs no doctor, patient
or judge call when those graders are MiniLM-only (echo_aware, embedding), so a new batch
of hand-graded items reaches ``grader_validation`` and ``table2_corrected`` without
rerunning a stage. Then rebuild the tables from the records:

    python scripts/grader_verdicts.py                  # ~1 min on 2 cores
    python -m medpref tables 06_sp_grading             # the tables, from the records

(``dvc repro sp_grading`` does the same and regrades the consultations, with no doctor
model: the commit path.)
"""

from __future__ import annotations

import argparse

from medpref import REPO_ROOT
from medpref.embedding import load_encoder
from medpref.outputs import write_rows
from medpref.params import load_params, repo_path
from medpref.prompts import load_prompt
from medpref.simulation.graders import GRADERS, GraderContext, build_grader
from medpref.simulation.grading import GradingSetup
from medpref.simulation.grading_outputs import OUTPUTS
from medpref.simulation.grading_stage import grader_verdicts


def graders_of(g, encode) -> dict:
    """The configured and compared graders; one that needs a judge role is refused."""
    setup = GradingSetup(judge=None, templates=[load_prompt(n) for n in g.prompts],
                         count_template=load_prompt(g.count_prompt), encode=encode,
                         pass_threshold=g.pass_threshold, max_candidates=g.max_candidates,
                         embedding_threshold=g.embedding_threshold)
    names = list(dict.fromkeys([g.mode, *g.compare]))
    for name in names:
        GRADERS.get(name)
    return {name: build_grader(name, GraderContext(g, setup)) for name in names}


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args()
    params = load_params()
    p = params.simulation
    graders = graders_of(p.grader, load_encoder(repo_path(p.embedding_model)))
    rows = grader_verdicts(p, graders, params.shared.seed)
    spec = next(r for r in OUTPUTS.records if r.name == "grader_verdicts")
    path = spec.path(OUTPUTS.reports_dir(REPO_ROOT))
    write_rows(path, spec.keyed(rows))
    print(f"{len(rows)} hand-graded items → {path}")


if __name__ == "__main__":
    main()
