"""Stage 03's outputs, declared once: its per-item records and the tables built from them.

Every model answer and training result the stage's tables read is a record
(``reports/03_rem/records/``):

* ``predictions`` — every REM judgement of the evaluation, one per scorer × set × item
  (dev, test, independent; its state, whether it is in the set's LLM subset): the gold
  score, the label and score, the samples, the raw answers, and the score probabilities
  of the probability scorers (``expected``, ``finetuned``, the fitted ones);
* ``scorer_runs`` — one per scorer × set: Table 5's ``method`` line as it ran (a
  fine-tuned scorer's from its adapter's task card), which items, how many, wall time
  and model use, and a fitted scorer's fit (C per rule and how it was chosen);
* ``training_loss`` — the REM adapter's training loss by optimizer step, each row naming
  the adapter (its content id), so the loss curve rebuilds without training;
* ``compliance_judgements`` — every compliance judgement, one per scorer of
  ``rem.compliance_scorers`` × dialogue state × rule.

A judgement's content key hashes the scorer's settings, the model id, the exact messages
it was asked with and the row. The tables and figures below are pure functions of those
records and the params (``rem.near_constant_share``; the rules file and the embedded
annotations for the flowchart and the annotation counts, which are inputs, not model
output), so ``medpref tables`` rebuilds them with no model call and no training. The
records hold the embedded annotations' ids and the model's raw answers, never a dialogue's
text as such (a small model's answer may echo a few words of the embedded dialogue it
judged, which is ours). The adapter itself stays a data product (DVC's cache): stages 04
and 06 read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from medpref.handoffs import REM_ADAPTER, REM_SCORERS
from medpref.outputs import Data, Figure, Records, StageOutputs, Table

Rows = Mapping[str, list[dict[str, Any]]]


# -- builders -------------------------------------------------------------------------------

def flowchart_figure(records: Rows, params):
    """The rules file as a graph (no records: the rules are an input)."""
    from medpref.params import repo_path
    from medpref.rem.figures import draw_flowchart
    from medpref.rules import load_rules

    return draw_flowchart(load_rules(repo_path(params.rem.rules)))


def counts_table(records: Rows, params) -> pd.DataFrame:
    """Annotations per rule × split × score (no records: the annotations are an input)."""
    from medpref.params import repo_path
    from medpref.rem.build_rem import load_inputs, split_counts

    return split_counts(load_inputs(params.rem, repo_path(params.shared.split)))


def training_table(records: Rows, params) -> pd.DataFrame:
    from medpref.rem.build_rem import loss_table

    return loss_table(records["training_loss"])


#: the independent test's draws, one record file each (``<set>_predictions``: together
#: with the dev, test and hand-test rows they would pass the size a text file in git
#: should keep); a new draw's set needs its file declared here
INDEPENDENT_SETS = ("independent", "independent_2", "independent_3", "independent_4",
                    "independent_5")


def independent_records(eval_set: str) -> str:
    return f"{eval_set}_predictions"


def split_predictions(rows) -> dict[str, list]:
    """Every prediction record under its record file: each independent draw's in its own
    (:data:`INDEPENDENT_SETS`), the dev, test and hand-test sets' in ``predictions``."""
    from medpref.rem.independent import is_independent_set
    from medpref.rem.table5 import eval_set_of

    out: dict[str, list] = {"predictions": [], **{independent_records(s): []
                                                  for s in INDEPENDENT_SETS}}
    for r in rows:
        name = eval_set_of(r)
        if not is_independent_set(name):
            out["predictions"].append(r)
        elif name in INDEPENDENT_SETS:
            out[independent_records(name)].append(r)
        else:
            raise ValueError(f"independent draw '{name}' has no record file: add it to "
                             "INDEPENDENT_SETS in medpref/rem/outputs.py")
    return out


def predictions(records: Rows) -> list[dict[str, Any]]:
    """Every prediction record: the dev, test and hand-test rows, then each independent
    draw's."""
    return [*records["predictions"],
            *(r for s in INDEPENDENT_SETS for r in records.get(independent_records(s), []))]


def table5_table(records: Rows, params) -> pd.DataFrame:
    from medpref.rem.build_rem import table5_from_records

    return table5_from_records(records["scorer_runs"], predictions(records),
                               params.rem.near_constant_share)


def scorer_cost_table(records: Rows, params) -> pd.DataFrame:
    from medpref.rem.table5 import cost_rows

    return cost_rows(records["scorer_runs"])


def table5_sets_table(records: Rows, params) -> pd.DataFrame:
    from medpref.rem.table5 import table5_sets

    return table5_sets(records["scorer_runs"], predictions(records),
                       params.rem.near_constant_share)


def selection(records: Rows, params) -> pd.DataFrame:
    """The default REM chosen on the development split (never on the test split)."""
    from medpref.rem.table5 import selection_table

    return selection_table(records["scorer_runs"], predictions(records),
                           params.rem.select_on)


def paired(records: Rows, params) -> pd.DataFrame:
    """The development split's winner against ``rem.paired_against``, with intervals."""
    from medpref.params import repo_path
    from medpref.rem.table5 import chosen_scorer, paired_sets, paired_table
    from medpref.rules import load_rules

    winner = chosen_scorer(selection(records, params))
    rule_ids = load_rules(repo_path(params.rem.rules)).ids
    preds = predictions(records)
    return paired_table(preds, winner, params.rem.paired_against, rule_ids,
                        params.rem.bootstrap_rounds, params.shared.seed,
                        sets=paired_sets(preds))


def independent_kappa(records: Rows, params) -> pd.DataFrame:
    """κ(l1, l2) per rule on the independent test's doubly labelled rows (no records:
    the labels are an input); no rows when ``rem.independent`` is unset."""
    from medpref.params import repo_path
    from medpref.rem.independent import kappa_rows, load_independent
    from medpref.rules import load_rules

    columns = ["eval_set", "rule", "n", "rows", "agreement", "kappa", "lo", "hi"]
    if not params.rem.independent:
        return pd.DataFrame(columns=columns)
    ids = load_rules(repo_path(params.rem.rules)).ids
    rows = load_independent(repo_path(params.rem.independent), ids)
    return pd.DataFrame(kappa_rows(rows, ids, params.rem.bootstrap_rounds,
                                   params.shared.seed), columns=columns)


def thresholds_table(records: Rows, params) -> pd.DataFrame:
    """Eq. 4's "met" cut per scorer and rule, calibrated on the development split's
    predictions (:mod:`medpref.scoring.thresholds`; stage 04 reads it with
    ``annotation.scoring.met: rem_dev``)."""
    from medpref.scoring.thresholds import COLUMNS, threshold_rows

    dev = pd.DataFrame([{"scorer": r["scorer"], "rule": r["rule"], "value": r["score"],
                         "gold": r["gold"]} for r in predictions(records)
                        if r.get("eval_set") == params.rem.select_on
                        and r.get("score") is not None])
    rows = [] if dev.empty else [row for scorer, part in dev.groupby("scorer", sort=False)
                                 for row in threshold_rows(str(scorer), part)]
    return pd.DataFrame(rows, columns=COLUMNS)


def per_rule_table(records: Rows, params) -> pd.DataFrame:
    from medpref.rem.build_rem import per_rule_table as per_rule

    return per_rule(predictions(records))


def confusion_figure(records: Rows, params):
    from medpref.rem.build_rem import confusion_tables
    from medpref.rem.figures import plot_confusions

    return plot_confusions(confusion_tables(predictions(records)))


def compliance_table(records: Rows, params) -> pd.DataFrame:
    from medpref.rem.build_rem import compliance_table as compliance

    return compliance(records["compliance_judgements"])


def radar_figure(records: Rows, params):
    """Fig. 3: one polygon per compliance scorer over the embedded dialogues."""
    from medpref.rem.build_rem import by_scorer, compliance_table
    from medpref.remscore.compliance import radar_plot

    rows = records["compliance_judgements"]
    tables = {f"embedded dialogues ({name})": compliance_table(judged)
              for name, judged in by_scorer(rows).items()}
    n_states = len({r["dialogue"] for r in rows})
    return radar_plot(tables, title=f"Rule compliance, {n_states} embedded dialogues")


OUTPUTS = StageOutputs("03_rem", (
    Records("predictions", "every REM judgement of Table 5's evaluation on the dev, test "
            "and hand-test sets (scorer × item): gold, label, score, score-token "
            "probabilities; an LLM scorer's also its samples and raw answers; key: settings, "
            "model, messages and the row"),
    *(Records(independent_records(s), f"the same for the independent test's set {s}")
      for s in INDEPENDENT_SETS),
    Records("scorer_runs", "each scorer's evaluation run on one set: Table 5's method "
            "line, items, wall time and model use, a fitted scorer's fit",
            key=("scorer", "eval_set", "method", "model_id", "n")),
    Records("training_loss", "the REM adapter's training loss by optimizer step",
            key=("adapter", "step")),
    Records("compliance_judgements", "every compliance judgement (scorer × dialogue state "
            "× rule); key: settings, model, messages and the row"),
    Figure("flowchart", flowchart_figure),
    Table("annotation_counts", counts_table),
    Table("training", training_table),
    Table("table5", table5_table),
    Table("table5_sets", table5_sets_table),
    Table("scorer_cost", scorer_cost_table),
    Table("rem_selection", selection),
    Table("table5_paired", paired),
    Table("independent_kappa", independent_kappa),
    Table("thresholds", thresholds_table),
    Table("per_rule", per_rule_table),
    Figure("confusion", confusion_figure),
    Table("compliance", compliance_table),
    Figure("compliance_radar", radar_figure),
    Data(REM_ADAPTER, doc="the trained REM adapter and its task card (stages 04 "
         "and 06 read it)"),
    Data(REM_SCORERS, doc="the fitted scorers (encoder REM, baselines), one "
         "JSON per rem.scorers name (rem.fitted.model_dir; stages 04 and 06 read it)"),
))
