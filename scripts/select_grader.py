"""Choose the SP grader's settings on the dev half of the hand-graded items, report test.

Grid over the echo-aware grader's thresholds (echo overlap, new units an own sentence
needs, MiniLM match, lexical share) and over the embedding grader's cosine threshold;
each setting's Cohen's κ on the dev half (``medpref.simulation.validation.split_of``);
the best dev κ (ties: the higher accuracy, then the first in grid order) is then graded
once on the test half, with its bootstrap 95 % interval. No model calls beyond MiniLM.

    python scripts/select_grader.py            # prints both tables; ~1 min on 2 cores
    python scripts/select_grader.py --dev-only # the grid on dev only (before a change)

``--report`` grades every hand-graded item with the grader as params set it (no grid)
and prints, per split, batch and category: items, cases, κ, recall and precision of
"pass", each with its case-clustered bootstrap interval (what a rule change is reported
with). ``--out FILE.csv`` also writes the table. ``--dev-errors`` lists the dev items
on which grader and hand grade differ: the only errors a rule change may be built from.

    python scripts/select_grader.py --report --out benchmarks/results/gv.csv
    python scripts/select_grader.py --dev-errors
"""

from __future__ import annotations

import argparse
import itertools

import pandas as pd

from medpref.contracts import SPGradedItem, read_jsonl
from medpref.embedding import load_encoder, memoized
from medpref.params import load_params, repo_path
from medpref.prompts import load_prompt
from medpref.simulation.graders import GraderContext, build_grader
from medpref.simulation.grading import GradingSetup
from medpref.simulation.validation import (
    agreement_rows,
    disagreements,
    grade_hand_items,
    split_of,
    validate_grader,
)

GRID = {
    "echo_aware": {"echo_overlap": [0.5, 0.6, 0.75], "echo_min_new": [1, 2],
                   "match_threshold": [0.45, 0.5, 0.55, 0.6, 0.65],
                   "lexical_threshold": [0.6, 0.75, 1.0]},
    "embedding": {"embedding_threshold": [0.4, 0.45, 0.5, 0.55, 0.6, 0.65]},
}




def grader_for(mode: str, setting: dict, base, encode):
    g = base.grader.model_copy(update={k: v for k, v in setting.items()
                                       if k != "embedding_threshold"})
    setup = GradingSetup(judge=None, templates=[load_prompt(n) for n in g.prompts],
                         count_template=load_prompt(g.count_prompt), encode=encode,
                         max_candidates=g.max_candidates,
                         embedding_threshold=setting.get("embedding_threshold",
                                                         g.embedding_threshold))
    return build_grader(mode, GraderContext(g, setup))


REPORT_COLUMNS = ["split", "batch", "category", "items", "cases", "kappa", "kappa_lo",
                  "kappa_hi", "recall", "recall_lo", "recall_hi", "precision",
                  "precision_lo", "precision_hi", "gold_pass", "predicted_pass"]


def report(p, encode, out: str | None, dev_errors: bool) -> None:
    """The configured grader on every hand-graded item (no grid)."""
    items = read_jsonl(repo_path(p.grader.graded_items), SPGradedItem)
    grades = grade_hand_items(items, grader_for(p.grader.mode, {}, p, encode))
    if dev_errors:
        table = disagreements(items, grades)
        with pd.option_context("display.max_colwidth", 120, "display.width", 250):
            print(table.to_string(index=False))
        return
    table = pd.DataFrame(agreement_rows(items, grades, p.grader.bootstrap_rounds, seed=0))
    with pd.option_context("display.width", 250):
        print(table[REPORT_COLUMNS].round(3).to_string(index=False))
    if out:
        table.to_csv(out, index=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--report", action="store_true", help="the configured grader, no grid")
    ap.add_argument("--dev-errors", action="store_true", help="dev items graded wrong")
    ap.add_argument("--out", help="CSV for --report")
    ap.add_argument("--dev-only", action="store_true",
                    help="the grid on dev only; the test half is not graded")
    args = ap.parse_args()
    p = load_params().simulation
    if args.report or args.dev_errors:
        report(p, memoized(load_encoder(repo_path(p.embedding_model))), args.out, args.dev_errors)
        return
    items = read_jsonl(repo_path(p.grader.graded_items), SPGradedItem)
    split = split_of(items)
    dev = [g for g in items if split[g.id] == "dev"]
    test = [g for g in items if split[g.id] == "test"]
    encode = memoized(load_encoder(repo_path(p.embedding_model)))
    print(f"{len(items)} hand-graded items: dev {len(dev)}, test {len(test)}")
    chosen = []
    for mode, grid in GRID.items():
        rows = []
        for values in itertools.product(*grid.values()):
            setting = dict(zip(grid, values))
            t = validate_grader(dev, grader_for(mode, setting, p, encode), n_boot=100)
            row = t[(t["split"] == "all") & (t["category"] == "all")
                    & (t["batch"] == "all")].iloc[0]
            rows.append({**setting, "kappa": row["kappa"], "accuracy": row["accuracy"]})
        grid_df = pd.DataFrame(rows)
        best = grid_df.sort_values(["kappa", "accuracy"], ascending=False, kind="stable").iloc[0]
        print(f"\n{mode}: dev grid ({len(grid_df)} settings), top 5")
        print(grid_df.sort_values(["kappa", "accuracy"], ascending=False,
                                  kind="stable").head(5).to_string(index=False))
        setting = {k: best[k] for k in grid}
        setting = {k: (int(v) if k == "echo_min_new" else float(v)) for k, v in setting.items()}
        if args.dev_only:
            continue
        t = validate_grader(test, grader_for(mode, setting, p, encode), n_boot=2000)
        t.insert(0, "setting", str(setting))
        t.insert(0, "grader", mode)
        chosen.append(t[(t["split"] == "all") & (t["batch"] == "all")])
    if args.dev_only:
        return
    print("\nchosen on dev, graded on test:")
    cols = ["grader", "setting", "category", "items", "accuracy", "kappa", "kappa_lo",
            "kappa_hi", "echo_negatives", "echo_negatives_passed"]
    print(pd.concat(chosen)[cols].to_string(index=False))


if __name__ == "__main__":
    main()
