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

from medpref.outputs import Figure, Page, Records, StageOutputs, Table
from medpref.training.runs import log_history_csv

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
    """As ``training.runs.write_json`` writes a file."""
    return json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"


# -- the SFT part ---------------------------------------------------------------------------

def sft_records(sources: list[dict[str, Any]], curve: pd.DataFrame,
                log_history: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    return {"source_counts": [dict(s) for s in sources], "dev_curve": frame_rows(curve),
            "train_log": [dict(h) for h in log_history]}


def dev_curve(records: Rows) -> pd.DataFrame:
    from medpref.training.stage import DEV_LOSS_COLUMNS

    return pd.DataFrame(_plain(records["dev_curve"]), columns=DEV_LOSS_COLUMNS)


def sources_table(records: Rows, params) -> pd.DataFrame:
    return pd.DataFrame(_plain(records["source_counts"]))


def dev_loss_csv(records: Rows, params) -> str:
    return dev_curve(records).to_csv(index=False)


def dev_loss_figure(records: Rows, params):
    from medpref.training.stage import plot_dev_loss

    return plot_dev_loss(dev_curve(records))


def log_history_json(records: Rows, params) -> str:
    return json_text(_plain(records["train_log"]))


def log_history_steps_csv(records: Rows, params) -> str:
    """The training steps only (the plot source), as ``runs.write_run_logs`` writes them."""
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
), folder="05_training/sft")


# -- the summary part -----------------------------------------------------------------------

def summary_records(rows: list[dict[str, Any]], curves: pd.DataFrame,
                    roles: Mapping[str, Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The summary's records: each run's row (``stage._summary_row``), the runs' logged
    steps (``stage.margin_curves``), the policies' roles (``policies.json``'s content)."""
    return {"run_rows": [{k: _none(v) for k, v in r.items()} for r in rows],
            "margin_curves": frame_rows(curves),
            "policy_roles": [{"role": role, **dict(spec)} for role, spec in roles.items()]}


def runs_table(records: Rows, params) -> pd.DataFrame:
    """One row per DPO run (``stage.SUMMARY_COLUMNS``; text columns blank when empty)."""
    from medpref.training.stage import SUMMARY_COLUMNS, TEXT_COLUMNS

    table = pd.DataFrame(_plain(records["run_rows"])).reindex(columns=SUMMARY_COLUMNS)
    table[TEXT_COLUMNS] = table[TEXT_COLUMNS].astype(object).fillna("")
    return table


def curves_frame(records: Rows) -> pd.DataFrame:
    rows = _plain(records["margin_curves"])
    return pd.DataFrame(rows) if rows else pd.DataFrame()


def margins_figure(records: Rows, params):
    from medpref.training.stage import plot_margins

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
