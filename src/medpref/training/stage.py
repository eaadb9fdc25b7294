"""Stage 05's run: SFT of the policy on dialogues, then one DPO run per pairs file.

The stage has three parts, each its own DVC stage over the same notebook (a papermill
parameter picks the part), so one DPO run per annotation strategy / grid cell is one
``foreach`` entry and reruns alone when its pairs change:

- ``sft``: :func:`run_sft` — dialogues → doctor-turn examples → LoRA SFT adapter;
- ``dpo`` + ``run``: :func:`run_dpo` — that run's pairs → DPO from the SFT adapter, or a
  ``skipped.json`` when there are fewer than ``min_pairs`` (never a crash), or a copy of
  another run's adapter when that run's training is this one's (:mod:`.reuse`);
- ``summary``: :func:`run_summary` — every run's row (trained or skipped, and why), the
  reward-margin curves, and the trained policies as backend roles (``policies.json``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from medpref.contracts import atomic_write_text
from medpref.data.split import load_split
from medpref.finetune import policies
from medpref.finetune.hardware import resolve_bf16
from medpref.finetune.runs import (
    FIT_RECORD,
    RUN_CARD,
    read_run_card,
    write_json,
    write_run_logs,
    write_skipped,
)
from medpref.identity import content_id
from medpref.params import repo_path
from medpref.prompts import load_prompt
from medpref.registry import register_piece
from medpref.stagekit import Stage
from medpref.training import heldout, outputs, reuse
from medpref.training.config import TrainingParams
from medpref.training.dialogue_sft import (
    count_targets,
    load_dialogues,
    sft_examples,
    split_corpus,
    train_dialogue_sft,
)
from medpref.training.dpo import (
    load_pairs,
    pair_to_conversation,
    skip_reason,
    train_dpo,
)
from medpref.training.outputs import DEV_LOSS_COLUMNS, plot_dev_loss

PARTS = ("sft", "dpo", "summary")


@dataclass
class RunStage(Stage):
    """A stage whose reports go to ``<training.reports>/<part>`` (DVC needs each part's
    metrics, timings and provenance in its own files)."""

    part_dir: str = "sft"

    @property
    def reports_dir(self) -> Path:
        return repo_path(self.params.training.reports) / self.part_dir


@register_piece("05_training")
def open_part(stage: Stage, part: str, run: str = "") -> RunStage:
    """The stage opened for one part: ``sft``, ``dpo`` (with ``run``) or ``summary``
    (``open_stage("05_training", ..., part=, run=)``)."""
    p: TrainingParams = stage.p
    if part not in PARTS:
        raise ValueError(f"part must be one of {PARTS}, got {part!r}")
    runs = policies.dpo_runs(stage.params)
    if part == "dpo" and run not in runs:
        raise ValueError(f"no DPO run {run!r} in annotation.strategies or training.dpo.runs "
                         f"(known: {sorted(runs)})")
    p.active_recipe()    # an unknown recipe fails here, before any work,
    p.active_hardware()  # as does a missing or invalid hardware file
    policies.heldout_runs(stage.params)  # and a misnamed held-out run
    return RunStage(name=stage.name, params=stage.params, started=stage.started,
                    part_dir=f"dpo/{run}" if part == "dpo" else part)


@dataclass
class TrainingOutputs:
    table: pd.DataFrame                       # a row per run of this part (or per source)
    metrics: dict[str, Any]
    models: dict[str, str] = field(default_factory=dict)
    prompts: dict[str, str] = field(default_factory=dict)   # name → sha (provenance)
    figure: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


def run(stage: RunStage) -> TrainingOutputs:
    if stage.part_dir == "sft":
        out = run_sft(stage)
    elif stage.part_dir == "summary":
        out = run_summary(stage)
    else:
        out = run_dpo(stage, stage.part_dir.split("/", 1)[1])
    stage.note_provenance(models=out.models, prompts=out.prompts)
    return out


def is_main_process() -> bool:
    """Under a distributed launch only the main process writes cards and reports."""
    from accelerate import PartialState

    return PartialState().is_main_process


def _base_model(stage: Stage) -> str:
    return stage.params.shared.llm.roles[stage.p.base_role].model


def _hardware(stage: Stage) -> dict[str, Any]:
    import torch

    p: TrainingParams = stage.p
    hardware = p.active_hardware()
    return {"recipe": p.recipe, "hardware": p.hardware,
            "cuda_devices": torch.cuda.device_count(), "bf16": resolve_bf16(hardware),
            "gradient_checkpointing": hardware.policy.gradient_checkpointing}


# -- SFT ------------------------------------------------------------------------------------

def run_sft(stage: RunStage) -> TrainingOutputs:
    p: TrainingParams = stage.p
    prompt = load_prompt(p.sft.system_prompt)
    recipe = p.active_recipe()
    with stage.step("load"):
        dialogues, sources = load_dialogues(p.sft)
        corpus = split_corpus(dialogues, sources, load_split(repo_path(stage.params.shared.split)))
        examples = sft_examples(corpus.train, prompt.system.strip(), p.sft.max_examples,
                                stage.seed, recipe.history_max_turns, p.sft.turn_quality)
        dev_examples = sft_examples(corpus.dev, prompt.system.strip(), None, stage.seed,
                                    recipe.history_max_turns, p.sft.turn_quality)
        count_targets(corpus.train, sources, p.sft.turn_quality)
    out_dir = repo_path(p.sft.output_dir)
    with stage.step("train"):
        result = train_dialogue_sft(
            repo_path(_base_model(stage)), examples, out_dir / "adapter",
            repo_path(p.checkpoints_dir) / "sft", recipe.sft, p.active_hardware(),
            stage.seed, p.keep_checkpoints, task_card=_task_card(prompt),
            check_yield=lambda kept, asked: stage.check_yield(kept, asked, what="SFT examples"),
            warn_below_steps=p.warn_below_steps, dev_examples=dev_examples,
            patience=p.sft.patience)
    logs = result.fit.train_logs()
    curve = result.curve
    card = {"run": "sft", "status": "trained", "examples": result.n_examples,
            "turn_quality": p.sft.turn_quality,
            "dropped_too_long": result.n_dropped, "epochs": result.card["chosen_epoch"],
            **{k: result.card[k] for k in ("max_epochs", "epochs_run", "chosen_epoch",
                                           "dev_examples", "dev_loss")},
            "dev_loss_base": curve.dev_loss[0] if curve else None,
            "train_dialogues": len(corpus.train), "dev_dialogues": len(corpus.dev),
            "steps": result.fit.steps, "steps_warning": result.warning,
            "resumed_from": result.fit.resumed_from, "runtime_s": round(result.fit.runtime_s, 1),
            "adapter": policies.portable_path(out_dir / "adapter"), **_hardware(stage)}
    table = pd.DataFrame([vars(s) for s in sources])
    curve_table = pd.DataFrame(curve.rows() if curve else [], columns=DEV_LOSS_COLUMNS)
    figure = plot_dev_loss(curve_table)
    if is_main_process():
        write_json(out_dir / RUN_CARD, card)
        write_part(stage, outputs.SFT_OUTPUTS, outputs.sft_records(
            [vars(s) for s in sources], curve_table, result.fit.log_history))
    metrics = {"examples": result.n_examples, "dropped_too_long": result.n_dropped,
               "dev_examples": card["dev_examples"], "max_epochs": card["max_epochs"],
               "epochs_run": card["epochs_run"], "chosen_epoch": card["chosen_epoch"],
               "dev_loss": card["dev_loss"], "dev_loss_base": card["dev_loss_base"],
               "steps": result.fit.steps, "dialogues": len(dialogues),
               "train_dialogues": card["train_dialogues"],
               "dev_dialogues": card["dev_dialogues"],
               "turn_quality": p.sft.turn_quality,
               "failing_turn_quality": sum(s.failing_turn_quality for s in sources),
               "loss_first": logs[0]["loss"] if logs else None,
               "loss_last": logs[-1]["loss"] if logs else None}
    return TrainingOutputs(table, metrics, {"base": _base_model(stage)},
                           {prompt.name: prompt.sha}, figure=figure,
                           extra={"card": card, "dev_loss": curve_table})


def _task_card(prompt) -> dict[str, Any]:
    """How the policy's inputs are formatted, saved beside the adapter."""
    return {"system_prompt": prompt.name, "system_prompt_sha": prompt.sha,
            "chat": "system prompt, then patient turns as user and doctor turns as assistant"}


# -- DPO ------------------------------------------------------------------------------------

def run_dpo(stage: RunStage, name: str) -> TrainingOutputs:
    """One DPO run: skipped (too few pairs, no file), a copy of an earlier run with the
    same share key (:mod:`medpref.training.reuse`), or trained from the SFT adapter."""
    p: TrainingParams = stage.p
    runs = policies.dpo_runs(stage.params)
    pairs_path = repo_path(runs[name])
    out_dir = policies.run_dir(stage.params, name)
    with stage.step("load"):
        pairs = load_pairs(pairs_path, p.dpo.max_pairs, stage.seed) if pairs_path.exists() \
            else None
    reason = skip_reason(Path(runs[name]), None if pairs is None else len(pairs),
                         p.dpo.min_pairs)
    if reason is not None:
        return _skipped_run(stage, name, reason, pairs,
                            reuse.pairs_sha(pairs_path) if pairs_path.exists() else None)
    sft_adapter = policies.adapter_dir(stage.params, policies.SFT_RUN)
    if not sft_adapter.exists():
        raise FileNotFoundError(f"{sft_adapter}: no SFT adapter; run stage training_sft first")
    prompt = load_prompt(p.sft.system_prompt)
    examples = [pair_to_conversation(pair, prompt.system.strip(),
                                     p.active_recipe().history_max_turns) for pair in pairs]
    key = _share_key(stage, examples, sft_adapter)
    task_card = {**_task_card(prompt), "run": name, "pairs_file": runs[name]}
    others = {run: policies.run_dir(stage.params, run) for run in runs if run != name}
    source = reuse.find_same_training(others, key)
    if source is None:
        with stage.step("train"):
            card, fit_record = _train_run(stage, name, examples, sft_adapter, task_card)
    else:
        with stage.step("reuse"):
            card, fit_record = _reuse_run(stage, name, source, others[source], task_card,
                                          len(pairs))
    card.update({"run": name, "control": policies.is_control(name), "status": "trained",
                 "pairs_file": runs[name],
                 "pairs_sha": reuse.pairs_sha(pairs_path), "share_key": key,
                 "strategies": sorted({pair.strategy for pair in pairs}),
                 "adapter": policies.portable_path(out_dir / "adapter"),
                 "role": policies.role_name(stage.params, name), **_hardware(stage)})
    with stage.step("held-out reward"):
        card["heldout"] = _heldout(stage, name, pairs, examples, sft_adapter,
                                   None if source is None else others[source])
    if is_main_process():  # (the main process saved or copied the adapter)
        card["adapter_sha"] = reuse.adapter_sha(out_dir / "adapter")
        write_json(out_dir / RUN_CARD, card)
        write_json(out_dir / FIT_RECORD, fit_record)
        write_run_logs(stage.reports_dir, fit_record["log_history"])
    final, evaluation = fit_record["final"], fit_record["evaluation"]
    metrics = {"trained": 1, "shared": int(source is not None), "pairs": card["pairs"],
               "epochs": card["epochs"], "steps": card["steps"],
               "train": _slashless(final), "eval": _slashless(evaluation),
               "heldout": card["heldout"] or {}}
    row = {**card, **{f"eval_{k}": v for k, v in evaluation.items()}}
    return TrainingOutputs(pd.DataFrame([row]), metrics,
                           {"base": _base_model(stage),
                            "sft_adapter": policies.portable_path(sft_adapter)},
                           {prompt.name: prompt.sha}, extra={"card": card})


def _heldout(stage: RunStage, name: str, pairs, examples: list[dict[str, Any]],
             sft_adapter: Path, source_dir: Path | None) -> dict[str, Any] | None:
    """The run's cross-fitted held-out reward (``medpref.training.heldout``): computed,
    or copied from the run whose training this one shares; its per-pair rows go to
    ``heldout.jsonl`` beside the adapter and ``heldout.csv`` in the run's reports (empty
    when the run is not cross-fitted). None when off for this run."""
    p: TrainingParams = stage.p
    k, wanted = p.dpo.heldout_folds, policies.heldout_runs(stage.params)
    rows: list[dict[str, Any]] | None = None
    if k >= 2 and name in wanted and len(pairs) >= k:
        copied = source_dir / heldout.HELDOUT_ROWS if source_dir is not None else None
        if copied is not None and copied.exists():
            rows = [json.loads(line) for line in copied.read_text(encoding="utf-8")
                    .splitlines() if line.strip()]
        else:
            rows = heldout.crossfit(
                repo_path(_base_model(stage)), sft_adapter, examples,
                [pair.chosen_source for pair in pairs],
                repo_path(p.checkpoints_dir) / "heldout" / name, p.active_recipe().dpo,
                p.active_hardware(), folds=k, seed=stage.seed)
    _write_heldout(stage, name, rows)
    return heldout.summarise(rows, seed=stage.seed) if rows else None


def _write_heldout(stage: RunStage, name: str, rows: list[dict[str, Any]] | None) -> None:
    if not is_main_process():
        return
    if rows is not None:
        atomic_write_text(policies.run_dir(stage.params, name) / heldout.HELDOUT_ROWS,
                          "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    table = pd.DataFrame(rows or [], columns=heldout.ROW_COLUMNS)
    atomic_write_text(stage.report("heldout.csv"), table.to_csv(index=False))


def _skipped_run(stage: RunStage, name: str, reason: str, pairs,
                 sha: str | None) -> TrainingOutputs:
    card = {"run": name, "status": "skipped", "reason": reason}
    n_pairs = 0 if pairs is None else len(pairs)
    if is_main_process():
        card = write_skipped(policies.run_dir(stage.params, name), stage.reports_dir, name,
                             reason, pairs=n_pairs,
                             pairs_file=policies.dpo_runs(stage.params)[name], pairs_sha=sha)
        _write_heldout(stage, name, None)
    return TrainingOutputs(pd.DataFrame([card]), {"trained": 0, "pairs": n_pairs},
                           extra={"card": card})


def _share_key(stage: RunStage, examples: list[dict[str, Any]], sft_adapter: Path) -> str:
    """What decides a DPO run's adapter (and its reported numbers), hashed."""
    p: TrainingParams = stage.p
    return reuse.share_key(kind="dpo", recipe=p.active_recipe().model_dump(),
                           hardware=p.active_hardware().model_dump(exclude={"rem"}),
                           seed=stage.seed, eval_pairs=p.dpo.eval_pairs,
                           warn_below_steps=p.warn_below_steps, examples=examples,
                           base=content_id(repo_path(_base_model(stage))),
                           sft=content_id(sft_adapter))


def _train_run(stage: RunStage, name: str, examples: list[dict[str, Any]], sft_adapter: Path,
               task_card: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Train the run; (its card, its fit record)."""
    p: TrainingParams = stage.p
    result = train_dpo(
        repo_path(_base_model(stage)), sft_adapter, examples,
        policies.run_dir(stage.params, name) / "adapter",
        repo_path(p.checkpoints_dir) / "dpo" / name, p.active_recipe().dpo,
        p.active_hardware(), seed=stage.seed,
        eval_pairs=p.dpo.eval_pairs, keep_checkpoints=p.keep_checkpoints, task_card=task_card,
        check_yield=lambda kept, asked: stage.check_yield(kept, asked, what="pairs"),
        warn_below_steps=p.warn_below_steps)
    card = {"pairs": result.n_pairs, "dropped_too_long": result.n_dropped,
            "epochs": p.active_recipe().dpo.num_train_epochs, "steps": result.fit.steps,
            "steps_warning": result.warning, "resumed_from": result.fit.resumed_from,
            "runtime_s": round(result.fit.runtime_s, 1), "reused_from": None}
    fit_record = {"log_history": result.fit.log_history, "final": result.final,
                  "evaluation": result.evaluation}
    return card, fit_record


def _reuse_run(stage: RunStage, name: str, source: str, source_dir: Path,
               task_card: dict[str, Any], asked: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Copy the adapter of ``source``, whose training is this run's; (card, fit record)."""
    t0 = time.perf_counter()
    src_card = read_run_card(source_dir)
    stage.check_yield(src_card["pairs"], asked, what="pairs")  # this run's guard
    if is_main_process():
        src_card, fit_record = reuse.copy_training(
            source_dir, policies.run_dir(stage.params, name), task_card)
    else:
        fit_record = json.loads((source_dir / FIT_RECORD).read_text(encoding="utf-8"))
    keep = ("pairs", "dropped_too_long", "epochs", "steps", "steps_warning")
    card = {**{k: src_card.get(k) for k in keep}, "resumed_from": None,
            "runtime_s": round(time.perf_counter() - t0, 1), "reused_from": source}
    return card, fit_record


def _slashless(values: dict[str, float]) -> dict[str, float]:
    """``rewards/margins`` → ``rewards_margins`` (dvc metrics keys read better flat)."""
    return {k.replace("/", "_"): round(float(v), 6) for k, v in values.items()}


# -- summary --------------------------------------------------------------------------------

def dvc_stage(stage: Stage, run: str) -> str:
    """The dvc.yaml stage that trains a DPO run: ``training_dpo@<strategy>`` for an
    annotation strategy's run, ``training_dpo_grid@<run>`` for the others."""
    grid = run not in stage.params.annotation.strategies
    return f"training_dpo{'_grid' if grid else ''}@{run}"


def _summary_row(stage: Stage, name: str) -> dict[str, Any]:
    p: TrainingParams = stage.p
    card = read_run_card(policies.run_dir(stage.params, name))
    control = policies.is_control(name)
    if card is None:
        return {"run": name, "control": control, "status": "not run",
                "reason": f"stage {dvc_stage(stage, name)} has not run",
                "pairs_file": policies.dpo_runs(stage.params)[name]}
    row = {**card, **(card.get("heldout") or {}), "shares_training_of": card.get("reused_from"),
           "control": control}
    metrics = repo_path(p.reports) / "dpo" / name / "metrics.json"
    if card["status"] == "trained" and metrics.exists():
        evals = json.loads(metrics.read_text(encoding="utf-8")).get("eval", {})
        row.update({f"eval_{k.replace('_', '/', 1)}": v for k, v in evals.items()})
    return row


def margin_curves(stage: Stage) -> pd.DataFrame:
    """Long table of the logged DPO reward margins and accuracies per run and step."""
    frames = []
    for name in policies.dpo_runs(stage.params):
        path = repo_path(stage.p.reports) / "dpo" / name / "log_history.csv"
        if path.exists():
            logs = pd.read_csv(path)
            if not logs.empty:
                frames.append(logs.assign(run=name))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def write_part(stage: RunStage, declared, records: dict[str, list[dict[str, Any]]]
               ) -> dict[str, Any]:
    """A part's records (``<part reports>/records``), then its tables, figures and pages
    built from the records as written (the path ``medpref tables`` takes)."""
    declared.write_records(stage.reports_dir, records)
    built = declared.build(declared.load_records(stage.reports_dir), stage.params)
    declared.write_built(stage.reports_dir, built)
    return built


def run_summary(stage: RunStage) -> TrainingOutputs:
    """Every DPO run's row, the margin curves and the trained policies' roles, written as
    records and built from them (:data:`medpref.training.outputs.SUMMARY_OUTPUTS`)."""
    rows = [_summary_row(stage, name) for name in policies.dpo_runs(stage.params)]
    trained = policies.trained_policies(stage.params)
    roles = {pol.role: {"run": pol.run, **policies.policy_role(stage.params, pol)
                        .model_dump(include={"backend", "model", "adapter"}),
                        **policies.policy_cell(stage.params, pol)}
             for pol in trained}
    curves = margin_curves(stage)
    built = write_part(stage, outputs.SUMMARY_OUTPUTS,
                       outputs.summary_records(rows, curves, roles))
    table = built["runs"]
    trained_runs = table["status"] == "trained"
    metrics = {"runs": len(rows), "trained": int(trained_runs.sum()),
               "trainings": int((trained_runs & (table["shares_training_of"] == "")).sum()),
               "skipped": int((table["status"] == "skipped").sum()),
               "controls": int(table["control"].astype(bool).sum()),
               "few_steps": int((table["steps_warning"] != "").sum()),
               "policies": len(trained)}
    return TrainingOutputs(table, metrics, extra={"policies": trained, "curves": curves})


def main(argv: list[str] | None = None) -> int:
    """Run one part without papermill, for launchers (one process per device)::

        accelerate launch --config_file configs/hardware/accelerate/multi_gpu_ddp.yaml \\
            -m medpref.training.stage --part dpo --dpo-run cai_dep
    """
    import argparse

    from medpref.stagekit import open_stage

    ap = argparse.ArgumentParser(description="stage 05 (training): one part")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--part", choices=PARTS, required=True)
    ap.add_argument("--dpo-run", default="", help="the DPO run (policies.dpo_runs)")
    args = ap.parse_args(argv)
    stage = open_stage("05_training", args.params, part=args.part, run=args.dpo_run)
    out = run(stage)
    if is_main_process():
        print(stage.finish(out.metrics, sections=("shared",)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
