"""Stage 03_rem: train the REM, evaluate every scorer of ``rem.scorers`` (Table 5), compliance.

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
from medpref.rem import build_rem as b03
from medpref.rem.outputs import OUTPUTS
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
                          "score": r["score"], "raw": (r["raw"] or [""])[0][:160]}
                         for run in runs for r in run.records[:per_scorer]])


def run(stage: Stage) -> RemOutputs:
    """Train, evaluate, score compliance; fail before writing when too few labels came out."""
    p, seed = stage.p, stage.seed
    inputs = b03.load_inputs(p)
    with stage.step("train"):
        base_model = stage.params.shared.llm.roles[p.role].model
        train = b03.train_rem(p, inputs, base_model, seed)
    eval_set = inputs.split(p.eval_split, p.eval_per_rule)
    runs = []
    for name in p.scorers:
        with stage.step(f"evaluate_{name}"):
            runs.append(b03.run_scorer(name, stage.llm, p, inputs, eval_set, seed))
    with stage.step("compliance"):
        compliance = b03.compliance_records(p.compliance_scorers, stage.llm, p, inputs,
                                            b03.compliance_dialogues(p), seed)
    usable = sum(r["label"] is not None for run in runs for r in run.records)
    stage.check_yield(usable, len(eval_set) * len(runs), what="REM labels")
    with stage.step("tables"):
        built = OUTPUTS.write(stage.reports_dir, {
            "predictions": [r for run in runs for r in run.records],
            "scorer_runs": b03.scorer_run_records(runs, p),
            "training_loss": b03.training_records(train),
            "compliance_judgements": compliance,
        }, stage.params)
    out = RemOutputs(
        rules=rules_table(inputs), counts=built["annotation_counts"], train=train,
        losses=built["training"], table5=built["table5"], per_rule=built["per_rule"],
        majority=b03.baseline_majority(eval_set, inputs.split("train")),
        compliance=built["compliance"], examples=raw_examples(runs),
        figures={name: stage.reports_dir / f"{name}.png"
                 for name in ("flowchart", "confusion", "compliance_radar")})
    out.metrics = b03.stage_metrics(out.table5, len(eval_set), train, out.majority)
    stage.note_provenance(models=out.models)   # its prompt: the loader records it
    return out
