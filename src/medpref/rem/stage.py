"""Stage 03_rem: train the REM, evaluate every scorer of ``rem.scorers`` (Table 5), compliance.

``run(stage)`` does the work in order, checks the yield, writes every output and returns
what the notebook shows. The steps themselves live in :mod:`medpref.rem.build_rem`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from medpref.contracts import write_jsonl
from medpref.prompts import load_prompt
from medpref.rem import build_rem as b03
from medpref.rem.compliance import dialogue_states, radar_plot
from medpref.rem.figures import draw_flowchart, plot_confusions
from medpref.reports import save_figure, write_table
from medpref.stagekit import Stage
from medpref.training.sft import TrainResult


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
    prompts: dict[str, str] = field(default_factory=dict)


def rules_table(inputs: b03.RemInputs) -> pd.DataFrame:
    return pd.DataFrame([{"id": r.id, "name": r.name, "kind": r.kind,
                          "predecessors": ", ".join(r.predecessors),
                          "constrained_by": ", ".join(r.constrained_by)}
                         for r in inputs.flowchart])


def raw_examples(runs, per_scorer: int = 2) -> pd.DataFrame:
    """A few raw answers per scorer (all are kept in predictions.jsonl)."""
    return pd.DataFrame([{"scorer": r["scorer"], "rule": r["rule"], "gold": r["gold"],
                          "score": r["score"], "raw": (r["raw"] or [""])[0][:160]}
                         for run in runs for r in run.records[:per_scorer]])


def run(stage: Stage) -> RemOutputs:
    """Train, evaluate, score compliance; fail before writing when too few labels came out."""
    p, seed = stage.p, stage.seed
    paths = b03.output_paths(p)
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
        states = dialogue_states(b03.compliance_dialogues(p))
        compliance = b03.compliance_tables(p.compliance_scorers, stage.llm, p, inputs, states,
                                           seed)
    usable = sum(r["label"] is not None for run in runs for r in run.records)
    stage.check_yield(usable, len(eval_set) * len(runs), what="REM labels")

    out = RemOutputs(
        rules=rules_table(inputs), counts=b03.split_counts(inputs), train=train,
        losses=b03.training_table(train), table5=b03.table5(runs, p),
        per_rule=b03.per_rule_table(runs),
        majority=b03.baseline_majority(eval_set, inputs.split("train")),
        compliance=pd.concat([t.assign(scorer=m) for m, t in compliance.items()],
                             ignore_index=True),
        examples=raw_examples(runs))
    out.metrics = b03.stage_metrics(runs, p, train, out.majority)
    out.prompts = {p.prompt: load_prompt(p.prompt).sha}
    _write(out, inputs.flowchart, runs, compliance, states, paths)
    return out


def _write(out: RemOutputs, flowchart, runs, compliance, states,
           paths: dict[str, Path]) -> None:
    write_table(out.counts, paths["flowchart"].parent / "annotation_counts")
    write_table(out.losses, paths["training"])
    write_jsonl(paths["predictions"], [r for run in runs for r in run.records])
    write_table(out.table5, paths["table5"])
    write_table(out.per_rule, paths["per_rule"])
    write_table(out.compliance, paths["compliance"])
    out.figures = {
        "flowchart": save_figure(draw_flowchart(flowchart), paths["flowchart"]),
        "confusion": save_figure(plot_confusions(b03.confusion_tables(runs)),
                                 paths["confusion"]),
        "radar": save_figure(radar_plot({f"embedded dialogues ({m})": t
                                         for m, t in compliance.items()},
                                        title=f"Rule compliance, {len(states)} embedded "
                                              f"dialogues"), paths["radar"])}

