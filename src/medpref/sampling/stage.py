"""Stage 01's run: sample splits, predict trajectories, check the yield, write the set.

The notebook ``notebooks/01_sampling.ipynb`` is::

    stage = open_stage("01_sampling", params_path)
    out = sampling_stage.run(stage)
    ...                                   # show out.summary, an item, out.rejected
    stage.finish(out.metrics)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from medpref.contracts import UnlabeledItem, write_jsonl
from medpref.data.split import load_split
from medpref.params import repo_path
from medpref.sampling.build import (
    build_unlabeled,
    load_exemplar_pool,
    load_source_dialogues,
    metrics,
)
from medpref.sampling.outputs import OUTPUTS
from medpref.sampling.tables import candidate_records
from medpref.stagekit import Stage

ITEMS = "unlabeled.jsonl"


@dataclass
class SamplingOutputs:
    """What stage 01 made: the items, the recorded rejections and their summaries."""

    items: list[UnlabeledItem]
    rejected: list[dict]
    summary: pd.DataFrame
    metrics: dict[str, Any]
    rounds: pd.DataFrame = field(default_factory=pd.DataFrame)
    short: pd.DataFrame = field(default_factory=pd.DataFrame)
    models: dict[str, str] = field(default_factory=dict)
    prompts: dict[str, str] = field(default_factory=dict)
    n_dialogues: int = 0
    n_exemplars: int = 0


def run(stage: Stage) -> SamplingOutputs:
    """Build the unlabeled set; fail before writing anything when too little came out.
    The items go to ``data/01_sampling``; the per-candidate records, the rejections and
    the tables built from them (:data:`medpref.sampling.outputs.OUTPUTS`) to the reports."""
    p = stage.p
    with stage.step("load"):
        split = load_split(repo_path(stage.params.shared.split))
        dialogues = load_source_dialogues(p, split)
        pool = load_exemplar_pool(p, split)
    annotator = stage.role(p.call("continuation").role)
    speakers = {speaker: stage.role(call.role) for speaker, call in p.round_calls.items()}
    with stage.step("generate"):
        result = build_unlabeled(p, annotator, stage.seed, dialogues, pool, speakers)
    stage.check_yield(len(result.items), p.n_items)
    with stage.step("write"):
        write_jsonl(stage.data(ITEMS), result.items)
        write_jsonl(stage.data("round_answers.jsonl"), result.round_records)
        built = OUTPUTS.write(stage.reports_dir, {
            "candidates": candidate_records(result.items), "rejected": result.rejected,
        }, stage.params)
    out = SamplingOutputs(result.items, result.rejected, built["summary"],
                          metrics(result, p.n_items, p.future_rounds),
                          built["future_rounds"], built["short_futures"],
                          prompts=result.prompt_shas,
                          n_dialogues=len(dialogues), n_exemplars=len(pool))
    stage.note_provenance(models=out.models, prompts=out.prompts)
    return out
