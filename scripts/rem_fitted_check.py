#!/usr/bin/env python
"""Table 5's fitted rows without a stage run (issue 40).

Every fitted REM scorer of ``rem.scorers`` (encoder, rule-blind, length, surface,
majority) is fitted as stage 03 fits it and scored on every REM set (dev, constructed
test, hand test, the independent test); printed: Table 5 per set, the dev split's choice,
the winner's paired intervals against ``rem.paired_against`` on the constructed and the
independent test, and the winner's Eq. 4 thresholds calibrated on dev. No LLM: about a
minute of fitting on two idle cores once the embeddings are cached (``--cache``).
The LLM rows (sampled, expected, finetuned) need stage 03 itself.

    PYTHONPATH=src python scripts/rem_fitted_check.py [--cache FILE] [--predictions FILE]
        [--turns-file FILE ...] [--dev-only] [--sets turns_dev ...] [--embedding-model NAME]
        [--independent-file FILE ...] [--stage-models]

``--turns-file`` adds labelled-turn files beside ``rem.turns.files`` (``--dev-only``: only
their development rows, the control with the same development set); ``--sets`` scores only
the named sets (a data change is compared on ``turns_dev`` before a blind draw sees it);
``--embedding-model`` fits with another encoder than ``rem.fitted.embedding_model``;
``--independent-file`` scores a draw kept in its own file as one more independent set;
``--stage-models`` scores with the models the last stage-03 run saved, not a refit.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pickle
import tempfile
import time
from pathlib import Path

import pandas as pd

from medpref.params import load_params, repo_path
from medpref.rem import build_rem as b03
from medpref.rem.eval_sets import stratified_subset
from medpref.rem.table5 import chosen_scorer, paired_table, selection_table, table5_sets
from medpref.remscore.scorers import state_features
from medpref.scoring.thresholds import threshold_rows


def main() -> None:
    ap = argparse.ArgumentParser(description="Table 5's fitted rows without a stage run")
    ap.add_argument("--cache", help="embeddings by text, reused between runs (default: a "
                    "file in the temporary folder named after the encoder)")
    ap.add_argument("--embedding-model", help="the encoder instead of "
                    "rem.fitted.embedding_model (a packaged encoder's name or a folder)")
    ap.add_argument("--predictions", help="also write every prediction record (JSONL)")
    ap.add_argument("--turns-file", action="append", default=[], metavar="FILE",
                    help="a labelled-turn file added to rem.turns.files (repeatable)")
    ap.add_argument("--dev-only", action="store_true",
                    help="the --turns-file rows join the development set only")
    ap.add_argument("--sets", nargs="+", help="score only these sets (default: all)")
    ap.add_argument("--stage-models", action="store_true",
                    help="score with the models stage 03 saved (rem.fitted.model_dir) "
                         "instead of fitting them again")
    ap.add_argument("--independent-file", action="append", default=[], metavar="FILE",
                    help="labelled items read beside rem.independent (a draw kept in its "
                         "own file until a stage-03 run reads it; repeatable)")
    args = ap.parse_args()
    params = load_params()
    p = params.rem
    extra = [os.path.abspath(f) for f in args.turns_file]
    listed = {os.path.abspath(repo_path(f)) for f in p.turns.files}
    if extra:
        p = p.model_copy(update={"turns": p.turns.model_copy(
            update={"files": [*p.turns.files, *(f for f in extra if f not in listed)]})})
    if args.independent_file:
        joined = Path(tempfile.mkdtemp()) / "independent.jsonl"
        joined.write_text("".join(Path(f).read_text(encoding="utf-8") for f in
                                  [repo_path(p.independent), *args.independent_file]),
                          encoding="utf-8")
        p = p.model_copy(update={"independent": str(joined)})
    fitted = {} if args.stage_models else {"model_dir": tempfile.mkdtemp()}
    if args.embedding_model:
        fitted["embedding_model"] = args.embedding_model
    p = p.model_copy(update={"fitted": p.fitted.model_copy(update=fitted)})
    if args.cache is None:  # one cache per encoder: vectors of one never stand in for another's
        tag = "".join(ch if ch.isalnum() else "_" for ch in p.fitted.embedding_model)
        args.cache = os.path.join(tempfile.gettempdir(), f"medpref_rem_emb_{tag}.pkl")
    seed = params.shared.seed
    inputs = b03.load_inputs(p, repo_path(params.shared.split))
    if args.dev_only:
        ids = {json.loads(line)["id"] for f in extra
               for line in Path(f).read_text(encoding="utf-8").splitlines()}
        inputs = dataclasses.replace(inputs, annotations=[
            a for a in inputs.annotations
            if not (a.split == "train" and a.id.split(":")[0] in ids)])
    features = state_features(p)
    if os.path.exists(args.cache):
        with open(args.cache, "rb") as fh:
            features._cache.update(pickle.load(fh))
    t0 = time.perf_counter()
    if args.stage_models:
        from medpref.remscore.fitted import load_model

        fits = {name: load_model(repo_path(p.fitted.model_dir), name)
                for name, s in p.scorers.items() if s.fitted}
        print("stage 03's models:", {k: v.content_id for k, v in fits.items()}, flush=True)
    else:
        fits = b03.fit_scorers(p, inputs, features, seed)
        print(f"fit: {time.perf_counter() - t0:.1f} s",
              {k: round(v.fit_s, 1) for k, v in fits.items()}, flush=True)
    runs = []
    for set_name, items in b03.eval_sets(p, inputs).items():
        if args.sets and set_name not in args.sets:
            continue
        subset = {it.id for it in stratified_subset(items, p.llm_eval_rows, seed)}
        for name in fits:
            runs.append(b03.run_scorer(name, None, p, inputs, items, seed, set_name, subset,
                                       features))
    with open(args.cache, "wb") as fh:
        pickle.dump(dict(features._cache), fh)
    preds = [r for run in runs for r in run.records]
    if args.predictions:
        with open(args.predictions, "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in preds)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 30)
    recs = b03.scorer_run_records(runs, p, fits)
    print(table5_sets(recs, preds, p.near_constant_share).round(2).to_string())
    sel = selection_table(recs, preds, p.dev_split)
    print(sel.round(2).to_string())
    win = chosen_scorer(sel)
    print("dev winner:", win)
    print(paired_table(preds, win, p.paired_against, inputs.flowchart.ids,
                       p.bootstrap_rounds, seed).round(2).to_string())
    dev = pd.DataFrame([{"rule": r["rule"], "value": r["score"], "gold": r["gold"]}
                        for r in preds if r["scorer"] == win and r["eval_set"] == p.dev_split
                        and r["score"] is not None])
    print(pd.DataFrame(threshold_rows(win, dev)).to_string())


if __name__ == "__main__":
    main()
