#!/usr/bin/env python
"""Does adding labelled real turns to the REM's rows help? (issue 40)

Fits every fitted REM scorer three times, as stage 03 fits it: on the constructed rows
alone; with the ``train`` part of ``data/embedded/rem/real_turns.jsonl`` added (its
labeller-l1 scores, each turn once per rule; ``--weight`` repeats them); and with the
independent test's first draw added as well (``with_real_draw1``: draw 1 becomes training
data, so it is not scored for that variant). Prints exact agreement per set (constructed
dev, the real turns' ``dev`` part, the independent test's draws ``independent`` and
``independent_2``) and per rule, and each encoder's paired intervals against the baselines
on the real dev part (where a choice would be made) and on the draws it did not train on
(reported, never chosen on). No LLM; a few minutes on two cores with the MiniLM cache of
rem_fitted_check.py.

    PYTHONPATH=src python scripts/rem_real_check.py [--weight 1]

This is the experiment that led to ``rem.turns`` (stage 03 now trains on labelled turns and
chooses on their dev part); it sets ``rem.turns`` off to rerun as it was.
"""
import argparse
import dataclasses
import json
import os
import pickle
import tempfile

import pandas as pd

from medpref.contracts import RemAnnotation, Turn
from medpref.params import load_params, repo_path
from medpref.rem import build_rem as b03
from medpref.rem.eval_sets import items_of
from medpref.rem.table5 import paired_table
from medpref.remscore.scorers import state_features

ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
ap.add_argument("--labels", default=repo_path("data/embedded/rem/real_turns.jsonl"))
ap.add_argument("--weight", type=int, default=1, help="copies of each real training row")
args = ap.parse_args()
LABELS, WEIGHT = args.labels, args.weight
CACHE = os.path.join(tempfile.gettempdir(), "medpref_rem_emb.pkl")

params = load_params()
p = params.rem
seed = params.shared.seed
# the experiment as it was run before rem.turns existed: constructed rows, chosen on their dev
p = p.model_copy(update={"fitted": p.fitted.model_copy(update={"model_dir": tempfile.mkdtemp()}),
                         "scorers": {k: v for k, v in p.scorers.items() if v.fitted},
                         "turns": None, "select_on": "dev"})
inputs = b03.load_inputs(p, repo_path(params.shared.split))
features = state_features(p)
if os.path.exists(CACHE):
    with open(CACHE, "rb") as fh:
        features._cache.update(pickle.load(fh))

with open(LABELS, encoding="utf-8") as fh:
    real = [json.loads(line) for line in fh if line.strip()]


def anns(part, tag):
    out = []
    for r in real:
        if r["part"] != part:
            continue
        hist = [Turn(**t) for t in r["history"]] + [Turn(role="doctor", text=r["turn"])]
        for rule, s in r["labels"]["l1"].items():
            a = RemAnnotation(id=f"{r['id']}:{rule}", rule=rule, history=hist, score=s,
                              comment="", split=tag)
            out.append(a)
    return out


def draw1_rows() -> list[RemAnnotation]:
    """The independent test's first draw as training rows (labeller l1, one per rule)."""
    return [RemAnnotation(id=f"{row.id}:{rule}", rule=rule, history=row.state,
                          score=int(row.labels["l1"][rule]), comment="", split="train")
            for row in inputs.independent if row.source.draw == 1
            for rule in inputs.flowchart.ids]


real_train, real_dev = anns("train", "train"), anns("dev", "real_dev")
with_real = inputs.annotations + [a.model_copy(update={"id": f"{a.id}#{k}"})
                                  for k in range(WEIGHT) for a in real_train]
variants = {"constructed": inputs,
            "with_real": dataclasses.replace(inputs, annotations=with_real),
            "with_real_draw1": dataclasses.replace(inputs, annotations=with_real + draw1_rows())}
sets = {"dev": items_of(inputs.split(p.dev_split)), "real_dev": items_of(real_dev),
        **{b03.independent_set_name(d): b03.independent_items(inputs.independent,
                                                              inputs.flowchart.ids, d)
           for d in b03.draws(inputs.independent)}}
allpreds = []
for vname, inp in variants.items():
    fits = b03.fit_scorers(p, inp, features, seed)
    for set_name, items in sets.items():
        if vname.endswith("draw1") and set_name == "independent":
            continue                      # its training rows
        for name in fits:
            run = b03.run_scorer(name, None, p, inp, items, seed, set_name, None, features)
            for r in run.records:
                allpreds.append({**r, "scorer": f"{vname}:{name}"})
with open(CACHE, "wb") as fh:
    pickle.dump(dict(features._cache), fh)
df = pd.DataFrame(allpreds)
df["ok"] = (df["label"] == df["gold"]).astype(float)
pd.set_option("display.width", 250)
print(df.pivot_table(index="scorer", columns="eval_set", values="ok", aggfunc="mean").round(3))
for s in ("real_dev", "independent", "independent_2"):
    sub = df[df.eval_set == s]
    print(s, "per rule")
    print(sub.pivot_table(index="scorer", columns="rule", values="ok", aggfunc="mean").round(3))
for win in ("constructed:encoder", "with_real:encoder", "with_real_draw1:encoder"):
    variant = win.split(":")[0]
    for s in ("real_dev", "independent", "independent_2"):
        if variant.endswith("draw1") and s == "independent":
            continue
        print(win, s)
        print(paired_table(allpreds, win, [f"{variant}:{n}" for n in
                                           ("encoder_blind", "length", "surface")],
                           inputs.flowchart.ids, p.bootstrap_rounds, seed, sets={s: (s,)})
              .query("scope in ['all', 'A']").round(2).to_string())
