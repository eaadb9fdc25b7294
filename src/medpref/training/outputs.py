"""Stage 05's outputs, declared once: the records of its SFT and summary parts and the
tables built from them.

The SFT part (``training_sft``, ``reports/05_training/sft/records/``):

* ``source_counts`` — each dialogue source: dialogues, doctor turns kept as targets,
  turns failing the turn-quality checks, and the dialogues in train, dev and held out;
* ``dev_curve`` — the development loss per epoch (epoch 0: the base model), the epoch's
  mean training loss and wall time, and the epoch kept;
* ``train_log`` — everything the trainer logged, one entry a row.

The summary part (``training``, ``reports/05_training/summary/records/``):

* ``run_rows`` — each DPO run's row as its run card gives it (trained, skipped or not run and
  why; pairs, steps, the evaluation split's rewards, the held-out reward, the adapter's
  hash, the run whose training it shares);
* ``margin_curves`` — every DPO run's logged training steps (loss, reward margin and
  accuracy per step);
* ``policy_roles`` — each trained policy as a backend role (``policies.json``).

The tables, figures and pages are pure functions of those records (no training), so
``medpref tables 05_training_sft 05_training`` rebuilds them. The DPO runs' own reports
(``dpo/<run>/``: log history, held-out rows) are written by each run as before.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from medpref.finetune.runs import log_history_csv
from medpref.outputs import Data, Figure, Page, Records, StageOutputs, Table
from medpref.training import heldout

Rows = Mapping[str, list[dict[str, Any]]]


def _plain(rows) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "key"} for r in rows]


def _none(value: Any) -> Any:
    """NaN as None in a record (JSON has no NaN)."""
    return None if isinstance(value, float) and math.isnan(value) else value


def frame_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """A frame's rows as records (NaN as None)."""
    return [{k: _none(v) for k, v in row.items()} for row in frame.to_dict("records")]


def json_text(data: Any) -> str:
    """As ``finetune.runs.write_json`` writes a file."""
    return json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"


# -- the SFT part ---------------------------------------------------------------------------

#: reports/05_training/sft/dev_loss.csv: epoch 0 is the base model before training
DEV_LOSS_COLUMNS = ["epoch", "dev_loss", "train_loss", "wall_s", "chosen"]


def plot_dev_loss(curve: pd.DataFrame):
    """Development and mean training loss per epoch; the kept epoch marked."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    if curve.empty:
        ax.text(0.5, 0.5, "no development dialogues: every epoch trained, the last kept",
                ha="center", transform=ax.transAxes, fontsize=8)
        return fig
    ax.plot(curve["epoch"], curve["dev_loss"], marker="o", label="development loss")
    ax.plot(curve["epoch"], curve["train_loss"], marker="s", label="training loss (epoch mean)")
    chosen = curve[curve["chosen"].astype(bool)]
    if not chosen.empty:
        ax.scatter(chosen["epoch"], chosen["dev_loss"], s=140, facecolors="none",
                   edgecolors="black", label="kept epoch", zorder=3)
    ax.set_xlabel("epoch (0: the base model)")
    ax.set_ylabel("loss on doctor turns")
    ax.set_title("SFT: development loss per epoch", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig



def sft_records(sources: list[dict[str, Any]], curve: pd.DataFrame,
                log_history: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    return {"source_counts": [dict(s) for s in sources], "dev_curve": frame_rows(curve),
            "train_log": [dict(h) for h in log_history]}


def dev_curve(records: Rows) -> pd.DataFrame:
    return pd.DataFrame(_plain(records["dev_curve"]), columns=DEV_LOSS_COLUMNS)


def sources_table(records: Rows, params) -> pd.DataFrame:
    return pd.DataFrame(_plain(records["source_counts"]))


def dev_loss_csv(records: Rows, params) -> str:
    return dev_curve(records).to_csv(index=False)


def dev_loss_figure(records: Rows, params):
    return plot_dev_loss(dev_curve(records))


def log_history_json(records: Rows, params) -> str:
    return json_text(_plain(records["train_log"]))


def log_history_steps_csv(records: Rows, params) -> str:
    """The training steps only (the plot source), as ``finetune.runs.write_run_logs``
    writes them."""
    logs = _plain(records["train_log"])
    return log_history_csv([h for h in logs if "loss" in h and "train_runtime" not in h])


SFT_OUTPUTS = StageOutputs("05_training_sft", (
    Records("source_counts", "each dialogue source: dialogues, targets kept, split sizes",
            key=("name",)),
    Records("dev_curve", "development and training loss per epoch, the epoch kept",
            key=("epoch", "dev_loss", "train_loss", "chosen")),
    Records("train_log", "everything the trainer logged, one entry a row"),
    Table("sources", sources_table),
    Page("dev_loss_csv", dev_loss_csv, suffix=".csv", file="dev_loss"),
    Figure("dev_loss", dev_loss_figure),
    Page("log_history", log_history_json, suffix=".json"),
    Page("log_history_csv", log_history_steps_csv, suffix=".csv", file="log_history"),
    Data("data/05_training/sft", doc="the SFT adapter (the DPO runs and stage 06 read it)"),
), folder="05_training/sft")


# -- the summary part -----------------------------------------------------------------------

#: ``shares_training_of``: the run whose trained adapter this run copied (same share key,
#: :mod:`medpref.training.reuse`); ``steps_warning``: fewer than warn_below_steps steps;
#: ``control``: a control's run (planted pairs), not an annotation strategy's
SUMMARY_COLUMNS = ["run", "control", "status", "reason", "pairs_file", "pairs_sha", "pairs",
                   "epochs",
                   "steps", "steps_warning", "shares_training_of", "adapter_sha", "runtime_s",
                   "eval_loss", "eval_rewards/chosen", "eval_rewards/rejected",
                   "eval_rewards/margins", "eval_rewards/accuracies", *heldout.COLUMNS,
                   "role"]
TEXT_COLUMNS = ["reason", "pairs_sha", "steps_warning", "shares_training_of", "adapter_sha",
                "role"]


def plot_margins(curves: pd.DataFrame):
    """Loss, reward margin and reward accuracy per step, one line per trained run."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.2))
    if curves.empty:
        axes[1].text(0.5, 0.5, "no DPO run trained", ha="center", transform=axes[1].transAxes)
        return fig
    for name, rows in curves.groupby("run", sort=False):
        for ax, col in zip(axes, ["loss", "rewards/margins", "rewards/accuracies"]):
            ax.plot(rows["step"], rows[col], marker="o", label=name)
    for ax, title in zip(axes, ["DPO loss", "reward margin (chosen − rejected)",
                                "reward accuracy"]):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("optimizer step")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig



def summary_records(rows: list[dict[str, Any]], curves: pd.DataFrame,
                    roles: Mapping[str, Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The summary's records: each run's row (``stage._summary_row``), the runs' logged
    steps (``stage.margin_curves``), the policies' roles (``policies.json``'s content)."""
    return {"run_rows": [{k: _none(v) for k, v in r.items()} for r in rows],
            "margin_curves": frame_rows(curves),
            "policy_roles": [{"role": role, **dict(spec)} for role, spec in roles.items()]}


def runs_table(records: Rows, params) -> pd.DataFrame:
    """One row per DPO run (``stage.SUMMARY_COLUMNS``; text columns blank when empty)."""
    table = pd.DataFrame(_plain(records["run_rows"])).reindex(columns=SUMMARY_COLUMNS)
    table[TEXT_COLUMNS] = table[TEXT_COLUMNS].astype(object).fillna("")
    return table


def curves_frame(records: Rows) -> pd.DataFrame:
    rows = _plain(records["margin_curves"])
    return pd.DataFrame(rows) if rows else pd.DataFrame()


def margins_figure(records: Rows, params):
    return plot_margins(curves_frame(records))


def policies_json(records: Rows, params) -> str:
    return json_text({r["role"]: {k: v for k, v in r.items() if k not in ("key", "role")}
                      for r in records["policy_roles"]})


SUMMARY_OUTPUTS = StageOutputs("05_training", (
    Records("run_rows", "each DPO run's row: its card, evaluation and held-out rewards",
            key=("run", "status", "pairs_sha", "adapter_sha", "share_key")),
    Records("margin_curves", "every DPO run's logged training steps",
            key=("run", "step")),
    Records("policy_roles", "each trained policy as a backend role", key=("role", "run")),
    Table("runs", runs_table),
    Figure("margins", margins_figure),
    Page("policies", policies_json, suffix=".json"),
), folder="05_training/summary")
