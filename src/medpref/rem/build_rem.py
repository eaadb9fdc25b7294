"""Stage 03_rem: train the LoRA REM, fit the encoder REM and the baselines, evaluate every
scorer (Table 5) on the development, test and independent sets, rule compliance.

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
from medpref.finetune.hardware import Hardware, load_hardware
from medpref.finetune.recipe import trainer_arguments
from medpref.finetune.runs import (
    FIT_RECORD,
    finish_checkpoints,
    fit,
    run_key,
    save_trained_adapter,
    write_json,
)
from medpref.finetune.sft import (
    TrainResult,
    build_sft_trainer,
    drop_too_long,
    load_base,
    portable_path,
    with_lora,
)
from medpref.identity import content_id
from medpref.llm import LLMSession
from medpref.outputs import content_key
from medpref.params import repo_path
from medpref.prompts import load_prompt
from medpref.rem.config import TURNS_DEV, RemParams, RemTrainParams
from medpref.rem.eval_sets import EvalItem, items_of, stratified_subset
from medpref.rem.evaluation import (
    confusion,
    match_metrics,
    per_rule_metrics,
)
from medpref.rem.independent import (
    IndependentRow,
    draws,
    independent_items,
    independent_set_name,
    load_independent,
)
from medpref.rem.turns import turn_annotations
from medpref.remscore.base import RuleJudgement
from medpref.remscore.features import StateFeatures
from medpref.remscore.fitted import FittedModel, FittedScorer, Item, fit_model, save_model
from medpref.remscore.scorers import (
    REM_SCORERS,
    describe_settings,
    scorer_from_settings,
)
from medpref.remscore.task import build_messages, format_answer, select_examples
from medpref.rules import Flowchart, load_rules


@dataclass
class RemInputs:
    flowchart: Flowchart
    annotations: list[RemAnnotation]        # hand rows and constructed rows, by split
    icl_examples: list[RemAnnotation]
    independent: list[IndependentRow] = field(default_factory=list)
    hand_ids: frozenset[str] = frozenset()  # the rows of rem.annotations (written by hand)
    # the independent rows that rem.turns made REM rows of (they are no test items)
    trained_ids: frozenset[str] = frozenset()
    # labelled-turn rows left out for sharing text with an eval-split dialogue → those
    turns_left_out: dict[str, list[str]] = field(default_factory=dict)

    def split(self, name: str, per_rule: int | None = None,
              hand: bool | None = None) -> list[RemAnnotation]:
        """The annotations of a split (``hand``: only the hand rows, or only the others);
        with ``per_rule``, that many per rule, covering every score before repeating one
        (a small balanced evaluation set)."""
        rows = [a for a in self.annotations if getattr(a, "split", None) == name
                and (hand is None or (a.id in self.hand_ids) == hand)]
        if per_rule is None:
            return rows
        return [a for rule in self.flowchart.ids for a in select_examples(rows, rule, per_rule)]


def load_inputs(p: RemParams, split_path: str | Path | None = None) -> RemInputs:
    """Rules, annotations (the hand rows, then the constructed rows of ``rem.constructed``;
    a row repeated with the same id and content is kept once), in-context examples and
    the independent test, validated; an annotation whose rule is not in the flowchart, or
    an id given twice with different content, is an error naming it. With the dialogue
    split file, hand training rows that share text with an evaluation-split dialogue are
    left out (:func:`medpref.rem.overlap.hand_training_rows`)."""
    flowchart = load_rules(repo_path(p.rules))
    anns = read_jsonl(repo_path(p.annotations), RemAnnotation)
    hand_ids = frozenset(a.id for a in anns)
    if split_path is not None:
        anns = clean_hand_rows(anns, p, split_path)
    if p.constructed:
        anns = merge_annotations(anns, read_jsonl(repo_path(p.constructed), RemAnnotation),
                                 p.constructed)
    icl = read_jsonl(repo_path(p.icl_examples), RemAnnotation)
    for source, rows in ((p.annotations, anns), (p.icl_examples, icl)):
        for a in rows:
            if a.rule not in flowchart.by_id:
                raise ValueError(f"{source}: record '{a.id}': unknown rule '{a.rule}'")
    independent = (load_independent(repo_path(p.independent), flowchart.ids)
                   if p.independent else [])
    trained: frozenset[str] = frozenset()
    left_out: dict[str, list[str]] = {}
    if p.turns is not None:
        turn_rows, trained = turn_annotations(p.turns, independent, flowchart.ids,
                                              repo_path("."))
        if split_path is not None:
            left_out = eval_text_rows(turn_rows, p, split_path)
            turn_rows = [a for a in turn_rows if a.id not in left_out]
        anns = merge_annotations(anns, turn_rows, "rem.turns")
    return RemInputs(flowchart, anns, icl, independent, hand_ids, trained, left_out)


def eval_text_rows(rows: Sequence[RemAnnotation], p: RemParams, split_path: str | Path
                   ) -> dict[str, list[str]]:
    """The labelled-turn rows that carry an evaluation-split dialogue's own text
    (:func:`medpref.rem.overlap.eval_overlaps`), each with those dialogues: the REM does
    not learn from them, as from such hand rows (:func:`clean_hand_rows`)."""
    from medpref.data.split import load_split
    from medpref.rem.overlap import eval_overlaps

    dialogues = read_jsonl(repo_path(p.construction.dialogues), Dialogue)
    return eval_overlaps(rows, dialogues, load_split(split_path),
                         p.construction.overlap_words)


def clean_hand_rows(hand: Sequence[RemAnnotation], p: RemParams, split_path: str | Path
                    ) -> list[RemAnnotation]:
    """The hand rows less the training rows that share text with an evaluation-split
    dialogue (the REM never trains on text of a dialogue the policies are tested on)."""
    from medpref.data.split import load_split
    from medpref.rem.overlap import hand_training_rows

    dialogues = read_jsonl(repo_path(p.construction.dialogues), Dialogue)
    keep = {a.id for a in hand_training_rows(hand, dialogues, load_split(split_path),
                                             p.construction.overlap_words)}
    return [a for a in hand if getattr(a, "split", None) != "train" or a.id in keep]


def merge_annotations(hand: Sequence[RemAnnotation], constructed: Sequence[RemAnnotation],
                      source: str) -> list[RemAnnotation]:
    """The hand rows and the constructed rows; an id in both must hold the same row."""
    by_id = {a.id: a for a in hand}
    out = list(hand)
    for a in constructed:
        held = by_id.get(a.id)
        if held is None:
            by_id[a.id] = a
            out.append(a)
        elif (held.rule, held.history, held.score) != (a.rule, a.history, a.score):
            raise ValueError(f"{source}: record '{a.id}': the id of a different row")
    return out


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
    """Optimizer steps of the REM's run: an explicit ``rem.train.recipe.max_steps`` wins;
    otherwise ``num_train_epochs`` over ``n_train`` examples, capped by the hardware's
    ``rem.max_steps_cap``."""
    if t.recipe.max_steps is not None:
        return t.recipe.max_steps
    rem = hardware.rem
    per_epoch = math.ceil(n_train / (rem.per_device_train_batch_size
                                     * rem.gradient_accumulation_steps))
    steps = max(1, math.ceil(t.recipe.num_train_epochs * per_epoch))
    return min(steps, rem.max_steps_cap) if rem.max_steps_cap is not None else steps


def rem_sft_config(t: RemTrainParams, hardware: Hardware, ckpt_dir: str | Path, seed: int,
                   steps: int):
    """The REM's ``SFTConfig``: the ``rem.train.recipe`` with the hardware's ``rem``
    section laid over it, run for ``steps`` (:func:`rem_steps`); the loss on the answer
    (the completion) only."""
    from trl import SFTConfig

    return SFTConfig(**trainer_arguments(t.recipe, hardware.rem, hardware, ckpt_dir, seed,
                                         SFTConfig) | {"max_steps": steps},
                     packing=False, completion_only_loss=True)


def train_rem(p: RemParams, inputs: RemInputs, base_model: str, seed: int) -> TrainResult:
    """LoRA-train the REM on the train split with ``SFTTrainer`` (the answer-only loss);
    the adapter, its task card and ``fit.json`` go to ``train.adapter_dir``. A killed run
    resumes from its last checkpoint in ``train.checkpoints_dir``."""
    from transformers import set_seed

    t, hardware, base_path = p.train, load_hardware(p.train.hardware), repo_path(base_model)
    rows = stratified_subset(inputs.split("train"), t.max_rows, seed)
    examples = sft_examples(rows, inputs.flowchart, p.prompt, t.rule_detail, t.answer_order)
    set_seed(seed)
    tok, base = load_base(base_path, hardware, device="cpu")
    data, dropped = drop_too_long(tok, examples, t.recipe.max_length, ("completion",))
    if not data:
        raise ValueError("no REM training example fits rem.train.recipe.max_length="
                         f"{t.recipe.max_length}")
    model = with_lora(base, t.recipe.lora(base.config.model_type))
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
    # no timings in the adapter's folder: it is a data product stages 04 and 06 read, and a
    # run time would make them stale after every retraining (stage 03's records keep it)
    write_json(out_dir / FIT_RECORD, {
        "n_train": len(data), "n_dropped": dropped, "steps": result.steps,
        "resumed_from": result.resumed_from,
        "log_history": [untimed(h) for h in result.log_history]})
    finish_checkpoints(ckpt_dir, keep=False)
    return TrainResult(out_dir, len(data), dropped, result.steps, result.runtime_s,
                       [{"step": h["step"], "loss": h["loss"]} for h in result.train_logs()])


#: the trainer's log fields that measure time, not training
TIMING_KEYS = ("train_runtime", "train_samples_per_second", "train_steps_per_second")


def untimed(entry: dict[str, Any]) -> dict[str, Any]:
    """A trainer log entry without its time measurements."""
    return {k: v for k, v in entry.items() if k not in TIMING_KEYS}


def rem_task_card(p: RemParams) -> dict[str, Any]:
    """How the REM adapter was trained to read and answer (saved with it, read by
    :func:`medpref.remscore.scorers.finetuned_settings` in later stages)."""
    return {"task": "rem", "prompt": p.prompt, "prompt_sha": load_prompt(p.prompt).sha,
            "rule_detail": p.train.rule_detail, "answer_order": p.train.answer_order}


def loss_rows(result: TrainResult) -> list[dict[str, Any]]:
    """The training loss by optimizer step as logged (answer tokens only); a run that
    logged none gives one row at its last step with no loss."""
    return [{"step": int(r["step"]), "loss": r["loss"]}
            for r in result.losses or [{"step": result.steps, "loss": None}]]


def training_records(result: TrainResult) -> list[dict[str, Any]]:
    """:func:`loss_rows`, each naming the adapter it trained (its content id)."""
    adapter = content_id(result.adapter_dir)
    return [{"adapter": adapter, **row} for row in loss_rows(result)]


def loss_table(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Training loss by optimizer step (the ``training`` table), from loss rows."""
    table = pd.DataFrame([{"step": r["step"], "loss": r["loss"]} for r in rows],
                         columns=["step", "loss"])
    return table.astype({"step": int, "loss": float})


def training_table(result: TrainResult) -> pd.DataFrame:
    """Training loss by optimizer step (answer tokens only)."""
    return loss_table(loss_rows(result))


# -- scoring and evaluation ---------------------------------------------------------------
def make_scorer(name: str, llm: LLMSession, p: RemParams, inputs: RemInputs,
                seed: int, features: StateFeatures | None = None):
    """The scorer ``rem.scorers[name]`` (the builder stage 04 uses too)."""
    if name not in p.scorers:
        raise KeyError(f"no REM scorer '{name}' in rem.scorers (known: {sorted(p.scorers)})")
    return scorer_from_settings(name, p.scorers[name], llm, p, inputs.flowchart, seed,
                                features)


# -- the fitted scorers and the evaluation sets ----------------------------------------------
def fit_items(annotations: Sequence[RemAnnotation]) -> list[Item]:
    return [Item(a.rule, list(a.history), int(a.score)) for a in annotations]


def fit_scorers(p: RemParams, inputs: RemInputs, features: StateFeatures,
                seed: int) -> dict[str, FittedModel]:
    """Fit every fitted scorer of ``rem.scorers`` on the train split (C on the dev split)
    and save each to ``rem.fitted.model_dir/<name>.json``."""
    train, dev = fit_items(inputs.split("train")), fit_items(inputs.split(p.select_split))
    if not train:
        raise ValueError(f"{p.annotations}: no train rows to fit the REM scorers on")
    fits = {}
    for name, settings in p.scorers.items():
        if settings.fitted:
            spec = REM_SCORERS.get(settings.mode).build(settings)
            fits[name] = fit_model(name, settings.mode, spec, train, dev, features,
                                   p.fitted.c_grid, seed)
            save_model(fits[name], repo_path(p.fitted.model_dir))
    return fits


def eval_sets(p: RemParams, inputs: RemInputs) -> dict[str, list[EvalItem]]:
    """The evaluation sets that have items: ``dev`` (where the default REM is chosen),
    ``test`` (Table 5's split of the constructed rows, ``eval_per_rule`` applied),
    ``hand_test`` (the hand rows of that split: text no construction made) and the
    independent test, one set per draw (``independent``, ``independent_2`` …)."""
    sets = {"dev": items_of(inputs.split(p.dev_split)),
            TURNS_DEV: items_of(inputs.split(TURNS_DEV)),
            "test": items_of(inputs.split(p.eval_split, p.eval_per_rule, hand=False)),
            "hand_test": items_of(inputs.split(p.eval_split, hand=True))}
    for number in draws(inputs.independent):
        sets[independent_set_name(number)] = [
            it for it in independent_items(inputs.independent, inputs.flowchart.ids, number)
            if it.state not in inputs.trained_ids]
    return {name: items for name, items in sets.items() if items}


def subset_pool(inputs: RemInputs, set_name: str, items: Sequence[EvalItem]
                ) -> list[EvalItem]:
    """The items an LLM scorer's fixed subset is drawn from: a draw's every item (also
    those ``rem.turns`` took for training, so the subset stays the one drawn before),
    else the set's items."""
    for number in draws(inputs.independent):
        if set_name == independent_set_name(number):
            return independent_items(inputs.independent, inputs.flowchart.ids, number)
    return list(items)


def scorer_items(settings, set_name: str, items: Sequence[EvalItem], subset: set[str],
                 p: RemParams) -> list[EvalItem] | None:
    """What one scorer scores of a set: a fitted scorer every item, an LLM scorer the
    set's fixed subset (or nothing when ``rem.llm_eval_sets`` leaves the set out)."""
    if settings.fitted:
        return list(items)
    if set_name not in p.llm_eval_sets:
        return None
    return [it for it in items if it.id in subset]


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


#: decimals a fitted scorer's recorded label probabilities keep (its score keeps all)
PROB_DECIMALS = 4


def judgement_fields(j: RuleJudgement, fitted: bool = False) -> dict[str, Any]:
    """A judgement as record fields: the label, the score (None: unusable), the samples,
    how many answers were unusable, the raw answers and, for the probability scorers, the
    score-token probabilities and the mass they had before renormalising. A fitted
    scorer's (``fitted``): the label, the score and its label probabilities (rounded to
    ``PROB_DECIMALS``) only: it has one sample, no raw answer and a mass of 1."""
    if fitted:
        return {"label": j.label, "score": _number(j.score),
                "probs": {k: round(float(v), PROB_DECIMALS) for k, v in j.probs.items()}}
    row = {"label": j.label, "score": _number(j.score),
           "samples": [_number(x) for x in j.samples], "unparsable": j.unparsable,
           "raw": list(j.comments)}
    if hasattr(j, "probs"):
        row.update(probs={k: float(v) for k, v in j.probs.items()}, mass=_number(j.mass))
    return row


def _number(x) -> float | None:
    return None if x is None else float(x)


def judgement_key(settings, scorer, state, rule, row: dict[str, Any]) -> str:
    """A judgement's content key: the scorer's settings, the model, the exact messages it
    was asked with (prompt, rule text, examples, state) and the row itself. The settings
    carry the call's budget, as they did before it moved to ``rem.calls`` (same keys).
    A fitted scorer's: its settings, its fitted model, the state, the rule and the row."""
    if isinstance(scorer, FittedScorer):
        return content_key(settings.model_dump(mode="json"), scorer.model_id,
                           [[t.role, t.text] for t in state], rule.id, row)
    keyed = {**settings.model_dump(mode="json"), "max_new_tokens": scorer.call.max_new_tokens}
    return content_key(keyed, scorer.client.model_id,
                       scorer.messages_for(state, rule), row)


def prediction_records(mode: str, annotations: Sequence[EvalItem],
                       judgements: Sequence[RuleJudgement], model_id: str = "",
                       eval_set: str = "test", subset: set[str] | None = None,
                       fitted: bool = False) -> list[dict[str, Any]]:
    """One row per (scorer, item): the set, the item's state, whether it is in the set's
    LLM subset, gold, label, score, samples and the raw answers (a ``fitted`` scorer's
    rows: :func:`judgement_fields`'s short form, its model id in ``scorer_runs``)."""
    head = {"scorer": mode} if fitted else {"scorer": mode, "model_id": model_id}
    return [{**head, "eval_set": eval_set, "id": a.id,
             "state": a.state, "llm_subset": subset is None or a.id in subset,
             "rule": a.rule, "gold": a.score, **judgement_fields(j, fitted)}
            for a, j in zip(annotations, judgements)]


@dataclass
class ScorerRun:
    mode: str
    records: list[dict[str, Any]]
    wall_s: float
    usage: dict[str, int] = field(default_factory=dict)
    model_id: str = ""
    eval_set: str = "test"
    items: str = "all"                      # all | llm_subset


#: the ledger counts a scorer run records (its model use)
USAGE = ("calls", "cache_hits", "failures", "tokens_in", "tokens_out")


def _usage(llm: LLMSession | None) -> dict[str, int]:
    if llm is None:   # fitted scorers only: no model calls to count
        return dict.fromkeys(USAGE, 0)
    total = llm.ledger.totals()["total"]
    return {k: total[k] for k in USAGE}


def run_scorer(mode: str, llm: LLMSession, p: RemParams, inputs: RemInputs,
               eval_set: Sequence[EvalItem], seed: int, set_name: str = "test",
               subset: set[str] | None = None,
               features: StateFeatures | None = None) -> ScorerRun:
    """Score evaluation items with one scorer, timing it and counting its model calls;
    each record carries its content key (:func:`judgement_key`). ``subset``: the ids of
    the set's LLM subset (recorded per item, so every row is shown on it too)."""
    scorer = make_scorer(mode, llm, p, inputs, seed, features)
    before = _usage(llm)
    t0 = time.perf_counter()
    judged = score_annotations(scorer, eval_set, inputs.flowchart)
    wall = time.perf_counter() - t0
    after = _usage(llm)
    rows = prediction_records(mode, eval_set, judged, scorer.model_id, set_name, subset,
                              fitted=p.scorers[mode].fitted)
    keyed = [{"key": judgement_key(p.scorers[mode], scorer, a.history,
                                   inputs.flowchart[a.rule], row), **row}
             for a, row in zip(eval_set, rows)]
    items = "all" if p.scorers[mode].fitted else "llm_subset"
    return ScorerRun(mode, keyed, wall, {k: after[k] - before[k] for k in after},
                     scorer.model_id, set_name, items)


def scorer_run_records(runs: Sequence[ScorerRun], p: RemParams,
                       fits: dict[str, FittedModel] | None = None) -> list[dict[str, Any]]:
    """One row per scorer run: the set and which of its items, Table 5's ``method`` line
    (a fine-tuned scorer's as its adapter's task card says it was trained), how many
    items, wall time and model use; a fitted scorer's fit (C per rule, how it was
    chosen, fit seconds)."""
    from medpref.finetune.sft import read_task_card

    card = read_task_card(repo_path(p.train.adapter_dir))
    fits = fits or {}
    return [{"scorer": run.mode, "eval_set": run.eval_set, "items": run.items,
             "method": describe_settings(p.scorers[run.mode], card),
             "model_id": run.model_id, "n": len(run.records), "wall_s": run.wall_s,
             **{k: run.usage.get(k, 0) for k in USAGE},
             **({"fit_s": fits[run.mode].fit_s, "fit": fits[run.mode].summary()}
                if run.mode in fits else {})} for run in runs]


def by_scorer(rows: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Records grouped by their ``scorer``, in first-seen order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        out.setdefault(row["scorer"], []).append(row)
    return out


def table5_from_records(scorer_runs: Sequence[dict[str, Any]],
                        predictions: Sequence[dict[str, Any]],
                        near_constant_share: float, eval_set: str = "test") -> pd.DataFrame:
    """Exact/fuzzy match of the labels per scorer on the evaluation split (PLPF Table 5),
    each scorer on the items it scored (``items``: all, or the LLM subset).

    ``fuzzy02_%`` is the fuzzy match over the items whose gold is 0 or 2 (a gold 1 always
    counts as fuzzy-correct); ``never_predicted`` the scores no label took;
    ``top_label_share`` and ``near_constant`` flag a scorer that gives one label to more
    than ``rem.near_constant_share`` of the items, whose fuzzy match is high whatever it
    tells apart; ``order_right_%`` the share of the ``order_pairs`` (two rules of one
    state whose gold differs) the scores order right. ``mae``: mean absolute error of the
    continuous scores. One row per scorer run, in run order
    (:func:`medpref.rem.table5.table5_rows`)."""
    from medpref.rem.table5 import table5_rows

    return table5_rows(scorer_runs, predictions, near_constant_share, eval_set)


def table5(runs: Sequence[ScorerRun], p: RemParams) -> pd.DataFrame:
    """:func:`table5_from_records` of scorer runs in memory."""
    return table5_from_records(scorer_run_records(runs, p),
                               [r for run in runs for r in run.records], p.near_constant_share)


def test_predictions(predictions: Sequence[dict[str, Any]], eval_set: str = "test"
                     ) -> list[dict[str, Any]]:
    """The prediction records of one set (records without a set are the test set's)."""
    return [r for r in predictions if r.get("eval_set", "test") == eval_set]


def per_rule_table(predictions: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Table 5's match per scorer and rule (test set)."""
    frames = []
    for mode, rows in by_scorer(test_predictions(predictions)).items():
        t = per_rule_metrics([r["rule"] for r in rows], *_columns(rows))
        frames.append(t.assign(scorer=mode))
    out = pd.concat(frames, ignore_index=True)
    out[["exact", "fuzzy", "fuzzy02", "coverage"]] *= 100
    return out.rename(columns={"exact": "exact_%", "fuzzy": "fuzzy_%", "fuzzy02": "fuzzy02_%",
                               "coverage": "coverage_%"})[
        ["scorer", "rule", "n", "exact_%", "fuzzy_%", "fuzzy02_%", "coverage_%", "mae"]]


def confusion_tables(predictions: Sequence[dict[str, Any]]) -> dict[str, pd.DataFrame]:
    """Gold × predicted counts per scorer on the test set."""
    return {mode: confusion(*_columns(rows))
            for mode, rows in by_scorer(test_predictions(predictions)).items()}


def _columns(rows: Sequence[dict[str, Any]]
             ) -> tuple[list[int], list[float | None], list[int | None]]:
    """Gold scores, predicted scores and predicted labels of prediction records."""
    return ([r["gold"] for r in rows], [r["score"] for r in rows], [r["label"] for r in rows])


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


def compliance_records(names: Sequence[str], llm: LLMSession, p: RemParams,
                       inputs: RemInputs, dialogues: Sequence[Dialogue],
                       seed: int, features: StateFeatures | None = None
                       ) -> list[dict[str, Any]]:
    """Every compliance judgement (radar input): per listed scorer × dialogue (cut at its
    final doctor turn) × rule, the rule's name and kind and the judgement's fields, each
    row with its content key (:func:`judgement_key`)."""
    from medpref.remscore.compliance import dialogue_states

    states, rules = dialogue_states(dialogues), inputs.flowchart.rules
    rows = []
    for name in names:
        scorer = make_scorer(name, llm, p, inputs, seed, features)
        judged = scorer.score_states(states, rules)
        for d, state, by_rule in zip(dialogues, states, judged):
            for rule in rules:
                row = {"scorer": name, "model_id": scorer.model_id, "dialogue": d.id,
                       "state_turns": len(state), "rule": rule.id, "name": rule.name,
                       "kind": rule.kind, **judgement_fields(by_rule[rule.id])}
                rows.append({"key": judgement_key(p.scorers[name], scorer, state, rule, row),
                             **row})
    return rows


def compliance_table(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Per scorer and rule, the mean score over the states and how many were unusable
    (:func:`medpref.remscore.compliance.compliance_summary`), scorers in first-seen order."""
    from medpref.remscore.compliance import compliance_summary

    frames = []
    for name, judged in by_scorer(rows).items():
        rules = list(dict.fromkeys((r["rule"], r["name"], r["kind"]) for r in judged))
        scores = {rule: [r["score"] for r in judged if r["rule"] == rule] for rule, _, _ in rules}
        frames.append(compliance_summary(rules, scores).assign(scorer=name))
    return pd.concat(frames, ignore_index=True)


def stage_metrics(table5: pd.DataFrame, eval_n: int, train: TrainResult | None,
                  majority: dict[str, float], chosen: str | None = None) -> dict[str, Any]:
    """The stage's DVC metrics (scores only): Table 5 per scorer, the baseline, the
    scorer the development split chose, and the training loss. Wall times and model use
    go to timings.json and ledger.json."""
    out: dict[str, Any] = {"eval_n": eval_n, "majority_baseline": majority,
                           "dev_chosen": chosen}
    for row in table5.to_dict("records"):
        out[row["scorer"]] = {k: row[k] for k in ("n", "exact_%", "fuzzy_%", "fuzzy02_%",
                                                  "coverage_%", "mae", "top_label_share",
                                                  "near_constant", "order_right_%")}
    if train is not None:
        out["training"] = {"steps": train.steps, "n_train": train.n_train,
                           "n_dropped": train.n_dropped,
                           "final_loss": train.losses[-1]["loss"] if train.losses else None}
    return out
