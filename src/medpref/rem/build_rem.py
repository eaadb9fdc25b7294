"""Stage 03_rem: train the REM, evaluate the three scorers (Table 5), rule compliance.

The notebook calls these functions in order; each does one step and returns plain data
(records, tables), so the notebook only shows them and writes them out.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from medpref.contracts import Dialogue, RemAnnotation, read_jsonl
from medpref.identity import content_id
from medpref.llm import LLMSession
from medpref.params import repo_path
from medpref.prompts import load_prompt
from medpref.rem.base import RuleJudgement
from medpref.rem.config import RemParams, RemTrainParams
from medpref.rem.evaluation import confusion, label_spread, match_metrics, per_rule_metrics
from medpref.rem.scorers import PromptedScorer, describe_settings, scorer_from_settings
from medpref.rem.task import build_messages, format_answer, select_examples
from medpref.rules import Flowchart, load_rules
from medpref.training.arguments import hardware_kwargs
from medpref.training.hardware import Hardware, load_hardware
from medpref.training.runs import (
    FIT_RECORD,
    finish_checkpoints,
    fit,
    run_key,
    save_trained_adapter,
    write_json,
)
from medpref.training.sft import (
    LoraSettings,
    TrainResult,
    build_sft_trainer,
    drop_too_long,
    load_base,
    portable_path,
    with_lora,
)


@dataclass
class RemInputs:
    flowchart: Flowchart
    annotations: list[RemAnnotation]
    icl_examples: list[RemAnnotation]

    def split(self, name: str, per_rule: int | None = None) -> list[RemAnnotation]:
        """The annotations of a split; with ``per_rule``, that many per rule, covering
        every score before repeating one (a small balanced evaluation set)."""
        rows = [a for a in self.annotations if getattr(a, "split", None) == name]
        if per_rule is None:
            return rows
        return [a for rule in self.flowchart.ids for a in select_examples(rows, rule, per_rule)]


def load_inputs(p: RemParams) -> RemInputs:
    """Rules, annotations and in-context examples, validated; an annotation whose rule
    is not in the flowchart is an error naming its id."""
    flowchart = load_rules(repo_path(p.rules))
    anns = read_jsonl(repo_path(p.annotations), RemAnnotation)
    icl = read_jsonl(repo_path(p.icl_examples), RemAnnotation)
    for source, rows in ((p.annotations, anns), (p.icl_examples, icl)):
        for a in rows:
            if a.rule not in flowchart.by_id:
                raise ValueError(f"{source}: record '{a.id}': unknown rule '{a.rule}'")
    return RemInputs(flowchart, anns, icl)


def output_paths(p: RemParams) -> dict[str, Path]:
    root = repo_path(p.reports)
    names = {"flowchart": "flowchart.png", "table5": "table5", "per_rule": "per_rule",
             "confusion": "confusion.png", "predictions": "predictions.jsonl",
             "training": "training", "compliance": "compliance", "radar": "compliance_radar.png",
             "metrics": "metrics.json", "ledger": "ledger.json", "timings": "timings.json",
             "provenance": "provenance.json"}
    return {k: root / v for k, v in names.items()} | {"adapter": repo_path(p.train.adapter_dir)}


def split_counts(inputs: RemInputs) -> pd.DataFrame:
    """Annotations per rule × split × score, and in-context examples per rule × score."""
    rows = [{"rule": a.rule, "set": getattr(a, "split", "?"), "score": a.score}
            for a in inputs.annotations]
    rows += [{"rule": a.rule, "set": "icl", "score": a.score} for a in inputs.icl_examples]
    table = (pd.DataFrame(rows).value_counts().unstack("score", fill_value=0)
             .reindex(columns=[0, 1, 2], fill_value=0))
    table.columns = [f"score_{s}" for s in table.columns]
    return table.reset_index().sort_values(["set", "rule"], ignore_index=True)


# -- training -----------------------------------------------------------------------------
def sft_examples(annotations: Sequence[RemAnnotation], flowchart: Flowchart,
                 prompt_name: str, detail: str,
                 order: str = "comment_first") -> list[dict[str, list[dict[str, str]]]]:
    """The REM task as trl prompt-completion examples: the zero-shot prompt → the answer
    'Comment: …\nScore: N' (or 'Score: N\nComment: …' with ``order="score_first"``)."""
    prompt = load_prompt(prompt_name)
    return [{"prompt": build_messages(prompt, flowchart[a.rule], a.history, (), detail, order),
             "completion": [{"role": "assistant",
                             "content": format_answer(a.comment, a.score, order)}]}
            for a in annotations]


def rem_steps(n_train: int, t: RemTrainParams, hardware: Hardware) -> int:
    """Optimizer steps of the REM's run: an explicit ``rem.train.max_steps`` wins;
    otherwise ``epochs`` over ``n_train`` examples, capped by the hardware's
    ``rem.max_steps``."""
    if t.max_steps is not None:
        return t.max_steps
    rem = hardware.rem
    per_epoch = math.ceil(n_train / (rem.per_device_batch_size * rem.grad_accumulation))
    steps = max(1, math.ceil(t.epochs * per_epoch))
    return min(steps, rem.max_steps) if rem.max_steps is not None else steps


def rem_sft_config(t: RemTrainParams, hardware: Hardware, ckpt_dir: str | Path, seed: int,
                   steps: int):
    """The REM's ``SFTConfig``: the hardware's ``rem`` section (batch, accumulation,
    precision, checkpoints, length grouping) and the ``rem.train`` recipe; the loss on
    the answer (the completion) only."""
    from trl import SFTConfig

    return SFTConfig(**hardware_kwargs(hardware.rem, hardware, ckpt_dir, seed),
                     max_steps=steps, learning_rate=t.learning_rate,
                     warmup_steps=t.warmup_steps, lr_scheduler_type="linear",
                     max_length=t.max_length, packing=False, completion_only_loss=True,
                     # batches of similar length pad little (the collator pads to the longest)
                     train_sampling_strategy="group_by_length" if hardware.rem.group_by_length
                     else "random")


def train_rem(p: RemParams, inputs: RemInputs, base_model: str, seed: int) -> TrainResult:
    """LoRA-train the REM on the train split with ``SFTTrainer`` (the answer-only loss);
    the adapter, its task card and ``fit.json`` go to ``train.adapter_dir``. A killed run
    resumes from its last checkpoint in ``train.checkpoints_dir``."""
    from transformers import set_seed

    t, hardware, base_path = p.train, load_hardware(p.train.hardware), repo_path(base_model)
    examples = sft_examples(inputs.split("train"), inputs.flowchart, p.prompt, t.rule_detail,
                            t.answer_order)
    set_seed(seed)
    tok, base = load_base(base_path, hardware, device="cpu")
    data, dropped = drop_too_long(tok, examples, t.max_length, ("completion",))
    if not data:
        raise ValueError(f"no REM training example fits rem.train.max_length={t.max_length}")
    model = with_lora(base, LoraSettings(r=t.lora_r, alpha=t.lora_alpha, dropout=t.lora_dropout,
                                         target_modules=tuple(t.target_modules)))
    ckpt_dir, card = repo_path(t.checkpoints_dir), rem_task_card(p)
    trainer = build_sft_trainer(model, tok, data, rem_sft_config(
        t, hardware, ckpt_dir, seed, rem_steps(len(data), t, hardware)),
        compact_lm_head=hardware.rem.compact_lm_head)
    key = run_key(kind="rem", train=t.model_dump(), hardware=hardware.model_dump(
        exclude={"policy"}), seed=seed, data=data, base=content_id(base_path), card=card)
    result = fit(trainer, ckpt_dir, key)
    model.peft_config["default"].base_model_name_or_path = portable_path(base_path)
    out_dir = repo_path(t.adapter_dir)
    save_trained_adapter(trainer, model, out_dir, card)
    write_json(out_dir / FIT_RECORD, {
        "n_train": len(data), "n_dropped": dropped, "steps": result.steps,
        "resumed_from": result.resumed_from, "runtime_s": round(result.runtime_s, 1),
        "log_history": result.log_history})
    finish_checkpoints(ckpt_dir, keep=False)
    return TrainResult(out_dir, len(data), dropped, result.steps, result.runtime_s,
                       [{"step": h["step"], "loss": h["loss"]} for h in result.train_logs()])


def rem_task_card(p: RemParams) -> dict[str, Any]:
    """How the REM adapter was trained to read and answer (saved with it, read by
    :func:`medpref.rem.scorers.finetuned_settings` in later stages)."""
    return {"task": "rem", "prompt": p.prompt, "prompt_sha": load_prompt(p.prompt).sha,
            "rule_detail": p.train.rule_detail, "answer_order": p.train.answer_order}


def training_table(result: TrainResult) -> pd.DataFrame:
    """Training loss by optimizer step (answer tokens only)."""
    table = pd.DataFrame(result.losses or [{"step": result.steps, "loss": float("nan")}])
    return table.astype({"step": int})


# -- scoring and evaluation ---------------------------------------------------------------
def make_scorer(name: str, llm: LLMSession, p: RemParams, inputs: RemInputs,
                seed: int) -> PromptedScorer:
    """The scorer ``rem.scorers[name]`` (the builder stage 04 uses too)."""
    if name not in p.scorers:
        raise KeyError(f"no REM scorer '{name}' in rem.scorers (known: {sorted(p.scorers)})")
    return scorer_from_settings(name, p.scorers[name], llm, p, inputs.flowchart, seed)


def score_annotations(scorer, annotations: Sequence[RemAnnotation],
                      flowchart: Flowchart) -> list[RuleJudgement]:
    """Each annotation's own rule judged on its history (one batched call per rule)."""
    out: list[RuleJudgement | None] = [None] * len(annotations)
    for rule_id in dict.fromkeys(a.rule for a in annotations):
        idx = [i for i, a in enumerate(annotations) if a.rule == rule_id]
        judged = scorer.score_states([annotations[i].history for i in idx], [flowchart[rule_id]])
        for i, j in zip(idx, judged):
            out[i] = j[rule_id]
    return [j for j in out if j is not None]


def prediction_records(mode: str, annotations: Sequence[RemAnnotation],
                       judgements: Sequence[RuleJudgement]) -> list[dict[str, Any]]:
    """One row per (scorer, example): gold, score, samples and the raw answers."""
    rows = []
    for a, j in zip(annotations, judgements):
        row = {"scorer": mode, "id": a.id, "rule": a.rule, "gold": a.score, "label": j.label,
               "score": j.score, "samples": j.samples, "unparsable": j.unparsable,
               "raw": j.comments}
        if hasattr(j, "probs"):
            row.update(probs=j.probs, mass=j.mass)
        rows.append(row)
    return rows


@dataclass
class ScorerRun:
    mode: str
    records: list[dict[str, Any]]
    wall_s: float
    usage: dict[str, int] = field(default_factory=dict)


def _usage(llm: LLMSession) -> dict[str, int]:
    total = llm.ledger.totals()["total"]
    return {k: total[k] for k in ("calls", "cache_hits", "failures", "tokens_in", "tokens_out")}


def run_scorer(mode: str, llm: LLMSession, p: RemParams, inputs: RemInputs,
               eval_set: Sequence[RemAnnotation], seed: int) -> ScorerRun:
    """Score the evaluation set with one scorer, timing it and counting its model calls."""
    scorer = make_scorer(mode, llm, p, inputs, seed)
    before = _usage(llm)
    t0 = time.perf_counter()
    judged = score_annotations(scorer, eval_set, inputs.flowchart)
    wall = time.perf_counter() - t0
    after = _usage(llm)
    return ScorerRun(mode, prediction_records(mode, eval_set, judged), wall,
                     {k: after[k] - before[k] for k in after})


def table5(runs: Sequence[ScorerRun], p: RemParams) -> pd.DataFrame:
    """Exact/fuzzy match of the labels per scorer on the evaluation split (PLPF Table 5).

    ``fuzzy02_%`` is the fuzzy match over the items whose gold is 0 or 2 (a gold 1 always
    counts as fuzzy-correct); ``top_label_share`` and ``near_constant`` flag a scorer
    that gives one label to more than ``rem.near_constant_share`` of the items, whose
    fuzzy match is high whatever it tells apart. ``mae``: mean absolute error of the
    continuous scores."""
    from medpref.training.sft import read_task_card

    card = read_task_card(repo_path(p.train.adapter_dir))
    rows = []
    for run in runs:
        golds, preds, labels = _columns(run)
        m = match_metrics(golds, preds, labels)
        spread = label_spread(labels, p.near_constant_share)
        rows.append({"scorer": run.mode, "method": describe_settings(p.scorers[run.mode], card),
                     "n": m["n"], "exact_%": 100 * m["exact"], "fuzzy_%": 100 * m["fuzzy"],
                     "fuzzy02_%": 100 * m["fuzzy02"], "n02": m["n02"],
                     "top_label": spread["top_label"],
                     "top_label_share": spread["top_label_share"],
                     "near_constant": spread["near_constant"],
                     "coverage_%": 100 * m["coverage"], "mae": m["mae"],
                     "wall_s": run.wall_s, "model_calls": run.usage.get("calls", 0),
                     "cache_hits": run.usage.get("cache_hits", 0)})
    return pd.DataFrame(rows)


def per_rule_table(runs: Sequence[ScorerRun]) -> pd.DataFrame:
    frames = []
    for run in runs:
        t = per_rule_metrics([r["rule"] for r in run.records], *_columns(run))
        frames.append(t.assign(scorer=run.mode))
    out = pd.concat(frames, ignore_index=True)
    out[["exact", "fuzzy", "fuzzy02", "coverage"]] *= 100
    return out.rename(columns={"exact": "exact_%", "fuzzy": "fuzzy_%", "fuzzy02": "fuzzy02_%",
                               "coverage": "coverage_%"})[
        ["scorer", "rule", "n", "exact_%", "fuzzy_%", "fuzzy02_%", "coverage_%", "mae"]]


def confusion_tables(runs: Sequence[ScorerRun]) -> dict[str, pd.DataFrame]:
    return {run.mode: confusion(*_columns(run)) for run in runs}


def _columns(run: ScorerRun) -> tuple[list[int], list[float | None], list[int | None]]:
    """Gold scores, predicted scores and predicted labels of a run's records."""
    return ([r["gold"] for r in run.records], [r["score"] for r in run.records],
            [r["label"] for r in run.records])


def baseline_majority(eval_set: Sequence[RemAnnotation],
                      train_set: Sequence[RemAnnotation]) -> dict[str, float]:
    """What always answering each rule's most frequent training score would get."""
    majority = {}
    for rule in {a.rule for a in train_set}:
        scores = [a.score for a in train_set if a.rule == rule]
        majority[rule] = max((0, 1, 2), key=lambda s: (scores.count(s), s))
    m = match_metrics([a.score for a in eval_set], [majority.get(a.rule) for a in eval_set])
    return {"exact_%": 100 * m["exact"], "fuzzy_%": 100 * m["fuzzy"],
            "fuzzy02_%": 100 * m["fuzzy02"]}


# -- compliance ---------------------------------------------------------------------------
def compliance_dialogues(p: RemParams) -> list[Dialogue]:
    """The first ``compliance_n`` dialogues of the compliance set."""
    return read_jsonl(repo_path(p.compliance_dialogues), Dialogue)[:p.compliance_n]


def compliance_tables(names: Sequence[str], llm: LLMSession, p: RemParams, inputs: RemInputs,
                      states, seed: int) -> dict[str, pd.DataFrame]:
    """Per-rule compliance of the states under each listed scorer (radar input)."""
    from medpref.rem.compliance import rule_compliance

    return {name: rule_compliance(states, make_scorer(name, llm, p, inputs, seed),
                                  inputs.flowchart.rules) for name in names}


def stage_metrics(runs: Sequence[ScorerRun], p: RemParams, train: TrainResult | None,
                  majority: dict[str, float]) -> dict[str, Any]:
    """The stage's DVC metrics (scores only): Table 5 per scorer, the baseline, and the
    training loss. Wall times and model use go to timings.json and ledger.json."""
    out: dict[str, Any] = {"eval_n": len(runs[0].records) if runs else 0,
                           "majority_baseline": majority}
    for row in table5(runs, p).to_dict("records"):
        out[row["scorer"]] = {k: row[k] for k in ("exact_%", "fuzzy_%", "fuzzy02_%",
                                                  "coverage_%", "mae", "top_label_share",
                                                  "near_constant")}
    if train is not None:
        out["training"] = {"steps": train.steps, "n_train": train.n_train,
                           "n_dropped": train.n_dropped,
                           "final_loss": train.losses[-1]["loss"] if train.losses else None}
    return out
