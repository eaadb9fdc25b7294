"""What every training run shares: resume from the last checkpoint, and its outputs.

A run trains with a trl trainer whose ``output_dir`` is the run's checkpoint folder. The
folder carries a key (a hash of everything that decides the result: recipe, hardware, data, base,
starting adapter); a rerun with the same key resumes from the newest ``checkpoint-N``
(a killed run continues, it does not start over), a rerun with another key starts fresh.
The outputs of a run are a metrics JSON, the trainer's log history as JSON and CSV (the
``dvc plots`` source), and either the adapter or a ``skipped.json`` that says why not.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medpref.contracts import atomic_write_text

KEY_FILE = "run_key.json"
SKIPPED = "skipped.json"
RUN_CARD = "run.json"
#: a trained DPO run's log history, last logged values and evaluation (``reuse``: what a
#: run that shares its adapter reports)
FIT_RECORD = "fit.json"
#: columns of the log-history CSV (dvc plots); DPO fills all, SFT the first ones
PLOT_COLUMNS = ["step", "epoch", "loss", "learning_rate", "grad_norm", "rewards/chosen",
                "rewards/rejected", "rewards/margins", "rewards/accuracies", "logps/chosen",
                "logps/rejected", "num_tokens"]


def run_key(**parts: Any) -> str:
    """A short hash of what decides a run's result (JSON of ``parts``)."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def prepare_checkpoints(ckpt_dir: str | Path, key: str) -> str | None:
    """Make ``ckpt_dir`` ready for a run with ``key``; the checkpoint to resume from, if
    one of the same run exists (else ``None``, and stale checkpoints are removed)."""
    from transformers.trainer_utils import get_last_checkpoint

    ckpt_dir = Path(ckpt_dir)
    key_file = ckpt_dir / KEY_FILE
    if ckpt_dir.exists():
        same = key_file.exists() and json.loads(key_file.read_text())["key"] == key
        if same:
            return get_last_checkpoint(str(ckpt_dir))
        shutil.rmtree(ckpt_dir)
    ckpt_dir.mkdir(parents=True)
    key_file.write_text(json.dumps({"key": key}) + "\n", encoding="utf-8")
    return None


@dataclass
class FitResult:
    """How a trainer's run went: steps, where it resumed, wall time, its log history."""

    steps: int
    resumed_from: int | None
    runtime_s: float
    log_history: list[dict[str, Any]] = field(default_factory=list)

    def train_logs(self) -> list[dict[str, Any]]:
        """Training-step logs (not the final summary line, not evaluation logs)."""
        return [h for h in self.log_history if "loss" in h and "train_runtime" not in h]


def fit(trainer, ckpt_dir: str | Path, key: str) -> FitResult:
    """Train, resuming from the newest checkpoint of the same run when there is one.
    Under a distributed launch the main process prepares the folder first."""
    with trainer.accelerator.main_process_first():
        resume = prepare_checkpoints(ckpt_dir, key)
    t0 = time.perf_counter()
    trainer.train(resume_from_checkpoint=resume)
    resumed = int(Path(resume).name.split("-")[-1]) if resume else None
    return FitResult(trainer.state.global_step, resumed, time.perf_counter() - t0,
                     list(trainer.state.log_history))


def save_trained_adapter(trainer, model, out_dir: str | Path, card: dict[str, Any]) -> None:
    """Save the trained ``default`` adapter (and its task card) to ``out_dir``, once.

    Single process and DDP: the main process saves with ``sft.save_adapter`` (atomic swap).
    DeepSpeed / FSDP shard the weights, so every process takes part in the trainer's
    ``save_model`` (which gathers them) into a staging folder that the main process then
    swaps in; trl's frozen ``ref`` adapter copy is left out.
    """
    from medpref.finetune.sft import TASK_CARD, save_adapter, write_canonical_config

    if not (trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled):
        if trainer.is_world_process_zero():
            save_adapter(model, out_dir, card)
        return
    out_dir = Path(out_dir)
    staging = out_dir.with_name(f".{out_dir.name}-staging")
    trainer.save_model(str(staging))
    if trainer.is_world_process_zero():
        shutil.rmtree(staging / "ref", ignore_errors=True)
        write_canonical_config(staging)
        (staging / TASK_CARD).write_text(json.dumps(card, indent=2, sort_keys=True) + "\n",
                                         encoding="utf-8")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        staging.rename(out_dir)


def finish_checkpoints(ckpt_dir: str | Path, keep: bool) -> None:
    if not keep:
        shutil.rmtree(ckpt_dir, ignore_errors=True)


def log_history_csv(logs: list[dict[str, Any]]) -> str:
    """The training logs as CSV with :data:`PLOT_COLUMNS` (blank where not logged)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=PLOT_COLUMNS, extrasaction="ignore",
                            lineterminator="\n")
    writer.writeheader()
    for row in logs:
        writer.writerow({k: row.get(k, "") for k in PLOT_COLUMNS})
    return buf.getvalue()


def write_json(path: str | Path, data: Any) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    return path


def write_run_logs(report_dir: str | Path, logs: list[dict[str, Any]]) -> None:
    """``log_history.json`` (everything the trainer logged) and ``log_history.csv`` (the
    training steps only: the plot source)."""
    report_dir = Path(report_dir)
    write_json(report_dir / "log_history.json", logs)
    steps = [h for h in logs if "loss" in h and "train_runtime" not in h]
    atomic_write_text(report_dir / "log_history.csv", log_history_csv(steps))


def write_skipped(out_dir: str | Path, report_dir: str | Path, run: str, reason: str,
                  **facts: Any) -> dict[str, Any]:
    """A skipped run still writes its outputs (DVC wants them): the reason, an empty log."""
    card = {"run": run, "status": "skipped", "reason": reason, **facts}
    out_dir = Path(out_dir)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    write_json(out_dir / SKIPPED, card)
    write_run_logs(report_dir, [])
    return card


def read_run_card(out_dir: str | Path) -> dict[str, Any] | None:
    """``run.json`` of a trained run, ``skipped.json`` of a skipped one, else ``None``."""
    for name in (RUN_CARD, SKIPPED):
        path = Path(out_dir) / name
        if path.exists():
            return json.loads(path.read_text(encoding="utf-8"))
    return None


def last_logged(logs: list[dict[str, Any]], keys: list[str]) -> dict[str, float]:
    """The most recent logged value of each key (absent keys left out)."""
    out: dict[str, float] = {}
    for row in logs:
        for k in keys:
            if k in row:
                out[k] = row[k]
    return out
