"""Stage 06's next turn (dvc stage ``next_turn``): each model doctor's next turn on
held-out dialogues (PLPF Tables 4 and 6, Fig. 4), scored by BLEU-4, ROUGE-L and the GPD
judge, and the GPD judge's own check.

:func:`run` cuts the held-out dialogues into items (``simulation.next_turn``: the written
split's eval part of the embedded dialogues, or a real set), asks every model doctor (the
configured roles and stage 05's trained policies, as the SP test has them) for its next
turn on each, and has the GPD judge (``simulation.calls.gpd``, decoding as
``simulation.grader`` says) rate each prediction against the reference. The GPD check
(:func:`medpref.simulation.nextturn.gpd_check`) rates each reference against itself and
against an unrelated turn: where the judge does not rate the unrelated turn worse, GPD
ranks nothing.

Records (``reports/06_next_turn/records``), one row per item with its content ``key``:

* ``next_turn_items`` — each item: its reference turn, and the GPD check's verdicts on it;
* ``next_turn_predictions`` — each doctor's prediction per item: the raw completion or
  error, the GPD judge's parsed and raw verdict (BLEU and ROUGE are recomputed from the
  texts).

The tables are pure functions of the records and the params, so ``medpref tables
06_next_turn`` rebuilds them with no model call. The grading stage's Table 6 reads these
records too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from medpref.outputs import BuildRecords, Records, StageOutputs, Table, content_key, shared
from medpref.prompts import load_prompt
from medpref.registry import register_piece
from medpref.simulation import nextturn
from medpref.simulation.common import (
    as_json,
    doctor_client,
    held_out_dialogues,
    make_judge,
    model_doctors,
    open_section_stage,
    set_threads,
    turns_of,
)
from medpref.simulation.config import SimulationParams
from medpref.simulation.outputs import Rows, _boot
from medpref.stagekit import Stage

NAME = "06_next_turn"


@register_piece(NAME)
def open_next_turn(stage: Stage):
    """``open_stage("06_next_turn", params_path)``: writes ``reports/06_next_turn``, reads
    the params section ``simulation``."""
    return open_section_stage(stage, NAME)


# -- records → tables -------------------------------------------------------------------------

def next_turn_rows(records: Rows) -> list[dict]:
    """Every doctor's next-turn item rows, with the text scores recomputed."""
    known = {r["item"] for r in records["next_turn_items"]}
    for r in records["next_turn_predictions"]:
        if r["item"] not in known:
            raise ValueError(f"records/next_turn_predictions.jsonl: item '{r['item']}' of doctor "
                             f"'{r['doctor']}' is not in records/next_turn_items.jsonl")
    return nextturn.item_rows(records["next_turn_predictions"], records["next_turn_items"])


def next_turn_summary(records: Rows, params) -> pd.DataFrame:
    """One row per doctor with next-turn items (:func:`nextturn.summarise`), in order."""
    rows, n_boot, seed = next_turn_rows(records), _boot(params), params.shared.seed
    doctors = list(dict.fromkeys(r["doctor"] for r in rows))
    return pd.DataFrame([nextturn.summarise(d, [r for r in rows if r["doctor"] == d],
                                            n_boot, seed) for d in doctors])


def gpd_check_of(records: Rows, params):
    """The GPD check (None: no next-turn items), computed once per build."""
    return shared(records, "gpd_check", lambda: nextturn.check_of(
        records["next_turn_items"], _boot(params), params.shared.seed))


def next_turn_table(records: Rows, params) -> pd.DataFrame:
    checked, _ = nextturn.apply_gpd_check(next_turn_summary(records, params), pd.DataFrame(),
                                          gpd_check_of(records, params))
    return checked


def next_turn_paired_table(records: Rows, params) -> pd.DataFrame:
    paired = nextturn.paired_table(next_turn_rows(records), "sft", _boot(params),
                                   params.shared.seed)
    _, checked = nextturn.apply_gpd_check(pd.DataFrame(), paired, gpd_check_of(records, params))
    return checked


def next_turn_check_table(records: Rows, params) -> pd.DataFrame:
    check = gpd_check_of(records, params)
    return check.table if check is not None else pd.DataFrame(columns=nextturn.CHECK_COLUMNS)


OUTPUTS = StageOutputs(NAME, (
    Records("next_turn_items", "each held-out next-turn item: reference turn, and the GPD "
            "check's verdicts (reference vs itself, vs an unrelated turn; raw and parsed)"),
    Records("next_turn_predictions", "each doctor's next-turn prediction per item: raw "
            "completion or error, the GPD judge's parsed and raw verdict"),
    Table("next_turn", next_turn_table, floatfmt=".2f"),
    Table("next_turn_paired", next_turn_paired_table, floatfmt=".3f"),
    Table("next_turn_gpd_check", next_turn_check_table, floatfmt=".3f"),
))


# -- the run ----------------------------------------------------------------------------------

@dataclass
class NextTurnOutputs:
    """What the stage shows: its tables as written (built from its records) and the
    run's records."""

    built: dict[str, Any]
    records: dict[str, list[dict]]
    model_ids: dict[str, str] = field(default_factory=dict)
    prompts: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)

    @property
    def next_turn(self) -> pd.DataFrame:
        return self.built["next_turn"]

    @property
    def next_turn_paired(self) -> pd.DataFrame:
        return self.built["next_turn_paired"]

    @property
    def gpd_check(self):
        return self.built["gpd_check"]


def settings_of(stage, p: SimulationParams, templates: dict, judge) -> dict[str, Any]:
    """What besides the doctor and the item determines a record (hashed into its key)."""
    return {"prompt": templates[p.doctor_prompt].sha,
            "max_new_tokens": p.call("next_turn").max_new_tokens,
            "gpd_prompt": templates[p.call("gpd").prompt].sha,
            "judge": judge.client.identity, "seed": stage.seed}


def run(stage, reports_dir: Path | None = None) -> NextTurnOutputs:
    """Every model doctor's next turn on every item, the GPD judge's verdicts and its
    check: the records, then the tables from the records as written (none without items:
    ``simulation.next_turn.enabled`` false). ``reports_dir``: where to write (default: the
    stage's)."""
    p: SimulationParams = stage.p
    reports_dir = reports_dir or stage.reports_dir
    set_threads(p)
    templates = {n: load_prompt(n) for n in [p.doctor_prompt, p.call("gpd").prompt]}
    judge = make_judge(stage, p, p.call("gpd"))
    items = (nextturn.next_turn_items(held_out_dialogues(p, stage.params),
                                      p.next_turn.cuts_per_dialogue, stage.seed,
                                      p.next_turn.history_max_turns)
             if p.next_turn.enabled else [])
    settings = settings_of(stage, p, templates, judge)
    by_id = {it.id: it for it in items}
    predictions, model_ids = [], {}
    for d in model_doctors(stage, p) if items else []:
        with stage.step(f"doctor {d.name}"):
            client = doctor_client(stage, d)
            model_ids[d.name] = client.model_id
            rows = nextturn.evaluate_next_turn(
                items, client, d.name, templates[p.doctor_prompt], judge,
                templates[p.call("gpd").prompt], p.next_turn_call(d),
                p.grader.bootstrap_rounds, stage.seed).items
            predictions += [
                {"key": content_key("next turn", client.identity, d.name,
                                    turns_of(by_id[row["item"]].history),
                                    by_id[row["item"]].reference, settings), **row}
                for row in nextturn.prediction_records(rows, client.model_id)]
    with stage.step("gpd check"):
        item_rows = []
        if items:
            check = nextturn.gpd_check(items, judge, templates[p.call("gpd").prompt],
                                       p.grader.bootstrap_rounds, stage.seed)
            item_rows = [{"key": content_key("next-turn item", turns_of(it.history), row,
                                             settings), **row}
                         for it, row in zip(items, nextturn.item_records(
                             items, check, judge.client.model_id))]
    records = as_json({"next_turn_items": item_rows, "next_turn_predictions": predictions})
    if items:
        stage.check_yield(sum(r.get("error") is None for r in predictions),
                          len(items) * len(model_ids), what="next-turn predictions")
    with stage.step("tables"):
        OUTPUTS.write_records(reports_dir, records)
        written = BuildRecords(OUTPUTS.load_records(reports_dir))
        built = OUTPUTS.build(written, stage.params)
        OUTPUTS.write_built(reports_dir, built)
    built["gpd_check"] = gpd_check_of(written, stage.params)     # the build's own
    out = NextTurnOutputs(built, written, model_ids,
                          {n: t.sha for n, t in templates.items()})
    out.metrics = metrics_of(out)
    stage.note_provenance(models=out.model_ids, prompts=out.prompts)
    return out


def metrics_of(out: NextTurnOutputs) -> dict[str, Any]:
    m: dict[str, Any] = {"items": len(out.records["next_turn_items"]),
                         "doctors": len(out.model_ids)}
    for _, row in out.next_turn.iterrows():
        m[f"next_turn/{row['doctor']}"] = {k: (None if pd.isna(row[k]) else round(float(row[k]), 3))
                                          for k in ("bleu4", "rougeL_f1", "rougeL_r", "gpd")}
    return {**m, **nextturn.gpd_check_metrics(out.gpd_check)}
