"""Choose the SP grader's settings on the dev half of the hand-graded items, report test.

Grid over the echo-aware grader's thresholds (echo overlap, new units an own sentence
needs, MiniLM match, lexical share) and over the embedding grader's cosine threshold;
each setting's Cohen's κ on the dev half (``medpref.simulation.validation.split_of``);
the best dev κ (ties: the higher accuracy, then the first in grid order) is then graded
once on the test half, with its bootstrap 95 % interval. No model calls beyond MiniLM.

    python scripts/select_grader.py            # prints both tables; ~1 min on 2 cores
"""

from __future__ import annotations

import itertools

import pandas as pd

from medpref.contracts import SPGradedItem, read_jsonl
from medpref.medqa.database import load_encoder
from medpref.params import load_params, repo_path
from medpref.prompts import load_prompt
from medpref.simulation.graders import GraderContext, build_grader
from medpref.simulation.grading import GradingSetup
from medpref.simulation.validation import split_of, validate_grader

GRID = {
    "echo_aware": {"echo_overlap": [0.5, 0.6, 0.75], "echo_min_new": [1, 2],
                   "match_threshold": [0.45, 0.5, 0.55, 0.6, 0.65],
                   "lexical_threshold": [0.6, 0.75, 1.0]},
    "embedding": {"embedding_threshold": [0.4, 0.45, 0.5, 0.55, 0.6, 0.65]},
}


def cached(encode):
    memo: dict[str, object] = {}

    def run(texts):
        todo = [t for t in dict.fromkeys(texts) if t not in memo]
        if todo:
            memo.update(zip(todo, encode(todo)))
        import numpy as np

        return np.array([memo[t] for t in texts])
    return run


def grader_for(mode: str, setting: dict, base, encode):
    g = base.grader.model_copy(update={k: v for k, v in setting.items()
                                       if k != "embedding_threshold"})
    setup = GradingSetup(judge=None, templates=[load_prompt(n) for n in g.prompts],
                         count_template=load_prompt(g.count_prompt), encode=encode,
                         max_candidates=g.max_candidates,
                         embedding_threshold=setting.get("embedding_threshold",
                                                         g.embedding_threshold))
    return build_grader(mode, GraderContext(g, setup))


def main() -> None:
    p = load_params().simulation
    items = read_jsonl(repo_path(p.grader.graded_items), SPGradedItem)
    split = split_of(items)
    dev = [g for g in items if split[g.id] == "dev"]
    test = [g for g in items if split[g.id] == "test"]
    encode = cached(load_encoder(repo_path(p.embedding_model)))
    print(f"{len(items)} hand-graded items: dev {len(dev)}, test {len(test)}")
    chosen = []
    for mode, grid in GRID.items():
        rows = []
        for values in itertools.product(*grid.values()):
            setting = dict(zip(grid, values))
            t = validate_grader(dev, grader_for(mode, setting, p, encode), n_boot=100)
            row = t[(t["split"] == "all") & (t["category"] == "all")].iloc[0]
            rows.append({**setting, "kappa": row["kappa"], "accuracy": row["accuracy"]})
        grid_df = pd.DataFrame(rows)
        best = grid_df.sort_values(["kappa", "accuracy"], ascending=False, kind="stable").iloc[0]
        print(f"\n{mode}: dev grid ({len(grid_df)} settings), top 5")
        print(grid_df.sort_values(["kappa", "accuracy"], ascending=False,
                                  kind="stable").head(5).to_string(index=False))
        setting = {k: best[k] for k in grid}
        setting = {k: (int(v) if k == "echo_min_new" else float(v)) for k, v in setting.items()}
        t = validate_grader(test, grader_for(mode, setting, p, encode), n_boot=2000)
        t.insert(0, "setting", str(setting))
        t.insert(0, "grader", mode)
        chosen.append(t[t["split"] == "all"])
    print("\nchosen on dev, graded on test:")
    cols = ["grader", "setting", "category", "items", "accuracy", "kappa", "kappa_lo",
            "kappa_hi", "echo_negatives", "echo_negatives_passed"]
    print(pd.concat(chosen)[cols].to_string(index=False))


if __name__ == "__main__":
    main()
