"""Stage 03_rem: train the LoRA REM, fit the encoder REM and the baselines, evaluate every
scorer of ``rem.scorers`` (Table 5) on the dev, test and independent sets, compliance.

``run(stage)`` does the work in order, checks the yield, writes every output and returns
what the notebook shows. The steps themselves live in :mod:`medpref.rem.build_rem`; what
the stage writes is declared once in :mod:`medpref.rem.outputs`: the records of every
judgement and of the adapter's training, and the tables and figures built from them alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from medpref.finetune.sft import TrainResult
from medpref.params import repo_path
from medpref.rem import build_rem as b03
from medpref.rem.eval_sets import stratified_subset
from medpref.rem.outputs import OUTPUTS, split_predictions
from medpref.rem.table5 import chosen_scorer
from medpref.stagekit import Stage


@dataclass
class RemOutputs:
    """What stage 03 produced (tables as DataFrames, figures as written PNG paths)."""

    rules: pd.DataFrame
    counts: pd.DataFrame
    train: TrainResult
    losses: pd.DataFrame
    table5: pd.DataFrame
    per_rule: pd.DataFrame
    majority: dict[str, float]
    compliance: pd.DataFrame
    examples: pd.DataFrame
    figures: dict[str, Path] = field(default_factory=dict)
    sets: pd.DataFrame = field(default_factory=pd.DataFrame)       # every set × items × scorer
    selection: pd.DataFrame = field(default_factory=pd.DataFrame)  # the dev split's choice
    paired: pd.DataFrame = field(default_factory=pd.DataFrame)     # chosen vs baselines
    kappa: pd.DataFrame = field(default_factory=pd.DataFrame)      # independent test's κ
    metrics: dict[str, Any] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)


def rules_table(inputs: b03.RemInputs) -> pd.DataFrame:
    return pd.DataFrame([{"id": r.id, "name": r.name, "kind": r.kind,
                          "predecessors": ", ".join(r.predecessors),
                          "constrained_by": ", ".join(r.constrained_by)}
                         for r in inputs.flowchart])


def raw_examples(runs, per_scorer: int = 2) -> pd.DataFrame:
    """A few raw answers per scorer (all are kept in records/predictions.jsonl)."""
    return pd.DataFrame([{"scorer": r["scorer"], "rule": r["rule"], "gold": r["gold"],
                          "score": r["score"], "raw": (r.get("raw") or [""])[0][:160]}
                         for run in runs for r in run.records[:per_scorer]])


def evaluate(stage: Stage, inputs: b03.RemInputs, features, seed: int) -> list:
    """Every scorer of ``rem.scorers`` on every evaluation set: a fitted scorer on every
    item, an LLM scorer on the set's fixed subset (:func:`medpref.rem.eval_sets.
    stratified_subset`, ``rem.llm_eval_rows``) of the sets ``rem.llm_eval_sets`` names."""
    p = stage.p
    runs = []
    for set_name, items in b03.eval_sets(p, inputs).items():
        subset = {it.id for it in stratified_subset(b03.subset_pool(inputs, set_name, items),
                                                    p.llm_eval_rows, seed)}
        for name, settings in p.scorers.items():
            chosen = b03.scorer_items(settings, set_name, items, subset, p)
            if chosen is None:
                continue
            with stage.step(f"evaluate_{name}_{set_name}"):
                runs.append(b03.run_scorer(name, stage.llm, p, inputs, chosen, seed,
                                           set_name, subset, features))
    return runs


def run(stage: Stage) -> RemOutputs:
    """Train, fit, evaluate, score compliance; fail before writing when too few labels
    came out."""
    from medpref.remscore.scorers import state_features

    p, seed = stage.p, stage.seed
    inputs = b03.load_inputs(p, repo_path(stage.params.shared.split))
    if inputs.turns_left_out:
        print(f"rem.turns: {len(inputs.turns_left_out)} row(s) left out, sharing a run of "
              f"{p.construction.overlap_words} words with an eval-split dialogue: "
              f"{sorted(inputs.turns_left_out)}")
    with stage.step("train"):
        base_model = stage.params.shared.llm.roles[p.role].model
        train = b03.train_rem(p, inputs, base_model, seed)
    features = state_features(p)
    with stage.step("fit"):
        fits = b03.fit_scorers(p, inputs, features, seed)
    runs = evaluate(stage, inputs, features, seed)
    with stage.step("compliance"):
        compliance = b03.compliance_records(p.compliance_scorers, stage.llm, p, inputs,
                                            b03.compliance_dialogues(p), seed, features)
    usable = sum(r["label"] is not None for run in runs for r in run.records)
    stage.check_yield(usable, sum(len(run.records) for run in runs), what="REM labels")
    with stage.step("tables"):
        built = OUTPUTS.write(stage.reports_dir, {
            **split_predictions([r for run in runs for r in run.records]),
            "scorer_runs": b03.scorer_run_records(runs, p, fits),
            "training_loss": b03.training_records(train),
            "compliance_judgements": compliance,
        }, stage.params)
    test_set = inputs.split(p.eval_split, p.eval_per_rule, hand=False)
    out = RemOutputs(
        rules=rules_table(inputs), counts=built["annotation_counts"], train=train,
        losses=built["training"], table5=built["table5"], per_rule=built["per_rule"],
        majority=b03.baseline_majority(test_set, inputs.split("train")),
        compliance=built["compliance"], examples=raw_examples(runs),
        figures={name: stage.reports_dir / f"{name}.png"
                 for name in ("flowchart", "confusion", "compliance_radar")},
        sets=built["table5_sets"], selection=built["rem_selection"],
        paired=built["table5_paired"], kappa=built["independent_kappa"])
    out.metrics = b03.stage_metrics(out.table5, len(test_set), train, out.majority,
                                    chosen_scorer(out.selection))
    stage.note_provenance(models=out.models)   # its prompt: the loader records it
    return out
