"""Next-turn evaluation on held-out dialogues (PLPF §4.2, Tables 4 and 6, Fig. 4).

Each held-out dialogue is cut before a doctor turn (seeded); the doctor under test writes
that turn from the history, and it is compared with the real one: BLEU-4, ROUGE-L
precision/recall/F1 and lengths through the shared language-aware text metrics
(``medpref.metrics.text``: one token per Han character), and GPT-Distance: a judge says
whether the prediction implies the reference fully (A), partially (B) or not (C);
GPD = (2·|Not| + |Partially|) / |All| over the usable verdicts.

GPD is only as good as its judge, so every run checks it first (:func:`gpd_check`): the
judge rates each item's reference turn against itself (it must be "fully" implied) and
against an unrelated turn (the reference of another dialogue's item, seeded). If the
unrelated turn does not get a worse GPD than the reference itself, with a paired
interval that excludes 0, GPD is not valid with this judge: the next-turn table says so
and no paired comparison is ranked by it (:func:`apply_gpd_check`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from medpref.contracts import Dialogue, Turn
from medpref.echo import speech_act
from medpref.llm import CallSpec, LLMClient
from medpref.metrics.intervals import shown_mde
from medpref.prompts import PromptTemplate
from medpref.sentences import split_sentences
from medpref.simulation.consult import doctor_messages, parse_doctor_answer
from medpref.simulation.grading import GPD_LABELS, GPD_OPTIONS, Judge, parse_implication


@dataclass(frozen=True)
class NextTurnItem:
    id: str
    dialogue: str
    lang: str
    history: list[Turn]
    reference: str


def cut_points(dialogue: Dialogue, n: int, rng: random.Random, before: int | None = None
               ) -> list[int]:
    """Indices of doctor turns that answer a patient turn (up to ``n``, seeded, sorted),
    only those before turn ``before`` when it is given."""
    ok = [i for i, t in enumerate(dialogue.turns)
          if t.role == "doctor" and i > 0 and dialogue.turns[i - 1].role == "patient"
          and (before is None or i < before)]
    return sorted(rng.sample(ok, min(n, len(ok))))


def next_turn_items(dialogues: Sequence[Dialogue], per_dialogue: int, seed: int,
                    max_history: int) -> list[NextTurnItem]:
    rng = random.Random(seed)
    items = []
    for d in dialogues:
        for i in cut_points(d, per_dialogue, rng):
            items.append(NextTurnItem(f"{d.id}@{i}", d.id, d.lang,
                                      list(d.turns[max(0, i - max_history):i]), d.turns[i].text))
    return items


def gpt_distance(labels: Sequence[str | None]) -> dict[str, float | int]:
    """GPD = (2·|Not| + |Partially|) / |All| over usable labels; unusable ones counted."""
    usable = [x for x in labels if x is not None]
    n_not, n_part = usable.count("not"), usable.count("partially")
    return {"gpd": (2 * n_not + n_part) / len(usable) if usable else float("nan"),
            "fully": usable.count("fully"), "partially": n_part, "not": n_not,
            "unusable": len(labels) - len(usable)}


@dataclass
class NextTurnResult:
    doctor: str
    items: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)


def text_scores(prediction: str, reference: str, lang: str) -> dict[str, float]:
    """BLEU-4, ROUGE-L P/R/F1 and lengths from the shared text-metrics module."""
    from medpref.metrics import text as tm

    rl = tm.rouge(reference, prediction, lang=lang)["rougeL"]
    return {"bleu4": tm.bleu4(reference, prediction, lang=lang),
            "rougeL_p": rl.precision, "rougeL_r": rl.recall, "rougeL_f1": rl.f1,
            "len_pred": tm.word_count(prediction), "len_ref": tm.word_count(reference)}


def evaluate_next_turn(items: Sequence[NextTurnItem], doctor: LLMClient, doctor_name: str,
                       template: PromptTemplate, judge: Judge, gpd_template: PromptTemplate,
                       call: CallSpec, n_boot: int = 2000, seed: int = 0
                       ) -> NextTurnResult:
    """Predict every item's doctor turn (asked as ``call`` says), score it, and judge its
    implication."""
    convs = [doctor_messages(template, it.history) for it in items]
    comps = doctor.chat_many(convs, call, temperature=0.0)
    preds = [None if c.error else parse_doctor_answer(c.text) for c in comps]
    ok = [i for i, p in enumerate(preds) if p is not None]
    prompts = [gpd_template.render(prediction=preds[i], reference=items[i].reference)
               for i in ok]
    verdicts = dict(zip(ok, judge.choose(prompts, GPD_OPTIONS, parse_implication)))
    result = NextTurnResult(doctor_name)
    for i, it in enumerate(items):
        row: dict[str, Any] = {"item": it.id, "doctor": doctor_name, "lang": it.lang,
                               "reference": it.reference, "prediction": preds[i],
                               "raw": comps[i].text, "error": comps[i].error}
        if preds[i] is not None:
            label, raw = verdicts[i]
            row.update(text_scores(preds[i], it.reference, it.lang))
            row["implication"] = GPD_LABELS.get(label, label) if label else None
            row["judge_raw"] = raw
        result.items.append(row)
    result.summary = summarise(doctor_name, result.items, n_boot, seed)
    return result


# one item's share of GPT-Distance: GPD is the mean of these over the usable verdicts
GPD_POINTS = {"fully": 0.0, "partially": 1.0, "not": 2.0}


def asks_question(text: str | None) -> bool | None:
    """Whether a predicted doctor turn asks the patient something (None: no prediction)."""
    if text is None:
        return None
    return any(speech_act(s) == "question" for s in split_sentences(text))


def item_values(row: dict[str, Any]) -> dict[str, float | None]:
    """One item's values of the paired metrics (None where it has none)."""
    label = row.get("implication")
    asked = asks_question(row.get("prediction"))
    return {"gpd": GPD_POINTS.get(label) if label else None,
            "rougeL_f1": None if row.get("rougeL_f1") is None else 100 * row["rougeL_f1"],
            "bleu4": None if row.get("bleu4") is None else 100 * row["bleu4"],
            "question": None if asked is None else 100.0 * asked}


def summarise(doctor: str, rows: Sequence[dict[str, Any]], n_boot: int = 2000,
              seed: int = 0) -> dict[str, Any]:
    """Means over the scored items, GPT-Distance, the share of turns that ask a question,
    and bootstrap 95 % intervals over items for GPD and ROUGE-L F1."""
    from medpref.metrics.intervals import bootstrap_ci

    scored = [r for r in rows if r.get("prediction") is not None]

    def mean(key: str) -> float:
        vals = [r[key] for r in scored if r.get(key) is not None]
        return float(np.mean(vals)) if vals else float("nan")

    def interval(key: str) -> tuple[float, float]:
        vals = [v[key] for v in map(item_values, scored) if v[key] is not None]
        iv = bootstrap_ci(vals, n_boot=n_boot, seed=seed)
        return iv.lo, iv.hi

    gpd = gpt_distance([r.get("implication") for r in scored])
    (gpd_lo, gpd_hi), (rl_lo, rl_hi) = interval("gpd"), interval("rougeL_f1")
    asked = [asks_question(r["prediction"]) for r in scored]
    return {"doctor": doctor, "items": len(rows), "failed": len(rows) - len(scored),
            "bleu4": 100 * mean("bleu4"), "rougeL_p": 100 * mean("rougeL_p"),
            "rougeL_r": 100 * mean("rougeL_r"), "rougeL_f1": 100 * mean("rougeL_f1"),
            "rougeL_f1_lo": rl_lo, "rougeL_f1_hi": rl_hi,
            "len_pred": mean("len_pred"), "len_ref": mean("len_ref"), **gpd,
            "gpd_lo": gpd_lo, "gpd_hi": gpd_hi,
            "question_share": float(np.mean(asked)) if asked else float("nan")}


def paired_table(rows: Sequence[dict[str, Any]], reference: str, n_boot: int = 2000,
                 seed: int = 0) -> pd.DataFrame:
    """Every doctor against ``reference`` on the items both answered, per metric (GPD
    points per item, ROUGE-L F1 and BLEU-4 in points, asks-a-question in %): difference,
    bootstrap 95 % interval, sign-flip p, the minimum detectable difference, verdict."""
    from medpref.metrics.intervals import paired_difference

    values = {(r["doctor"], r["item"]): item_values(r) for r in rows
              if r.get("prediction") is not None}
    doctors = list(dict.fromkeys(r["doctor"] for r in rows))
    out = []
    if reference not in doctors:
        return pd.DataFrame(columns=PAIRED_COLUMNS)
    ref_items = {i for d, i in values if d == reference}
    for doctor in doctors:
        if doctor == reference:
            continue
        for metric in ("gpd", "rougeL_f1", "bleu4", "question"):
            both = [(values[(doctor, i)][metric], values[(reference, i)][metric])
                    for i in sorted(ref_items) if (doctor, i) in values
                    and values[(doctor, i)][metric] is not None
                    and values[(reference, i)][metric] is not None]
            if not both:
                continue
            a, b = zip(*both)
            cmp = paired_difference(a, b, n_boot=n_boot, seed=seed)
            out.append({"doctor": doctor, "vs": reference, "metric": metric, "items": cmp.n,
                        "diff": cmp.diff, "ci_lo": cmp.lo, "ci_hi": cmp.hi,
                        "p_value": cmp.p_value, "mde": shown_mde(cmp), "verdict": cmp.verdict()})
    return pd.DataFrame(out, columns=PAIRED_COLUMNS)


PAIRED_COLUMNS = ["doctor", "vs", "metric", "items", "diff", "ci_lo", "ci_hi", "p_value",
                  "mde", "verdict"]


# -- is GPD valid with this judge? --------------------------------------------------------

GPD_NOT_VALID = "GPD not valid with this judge"
CHECK_COLUMNS = ["comparison", "items", "fully", "partially", "not", "unusable", "gpd",
                 "ci_lo", "ci_hi", "p_value", "verdict"]


def unrelated_references(items: Sequence[NextTurnItem], seed: int) -> list[str]:
    """For each item, the reference turn of an item of another dialogue (seeded per item);
    an error when every item is of one dialogue."""
    out = []
    for it in items:
        others = [o for o in items if o.dialogue != it.dialogue]
        if not others:
            raise ValueError("the GPD check needs next-turn items of at least two dialogues")
        out.append(random.Random(f"{seed}:gpd-unrelated:{it.id}").choice(others).reference)
    return out


@dataclass
class GpdCheck:
    """The judge's verdicts on reference-vs-itself and reference-vs-unrelated, per item,
    and whether GPD separates them (``valid``)."""

    rows: list[dict[str, Any]]
    table: pd.DataFrame
    valid: bool


def gpd_check(items: Sequence[NextTurnItem], judge: Judge, gpd_template: PromptTemplate,
              n_boot: int = 2000, seed: int = 0) -> GpdCheck:
    """GPD of each reference turn against itself and against an unrelated turn, paired by
    item (bootstrap by dialogue). Valid: the unrelated turn's GPD is higher, with an
    interval above 0 and a sign-flip p below 0.05 (the verdict "higher"). Items of fewer
    than two dialogues have no unrelated turn: nothing is asked, and GPD is not valid."""
    if len({it.dialogue for it in items}) < 2:
        print("GPD check: next-turn items of fewer than two dialogues, so no unrelated turn; "
              "GPD is not valid with this run")
        return GpdCheck([], gpd_check_table([], n_boot, seed)[0], valid=False)
    unrelated = unrelated_references(items, seed)
    prompts = [gpd_template.render(prediction=it.reference, reference=it.reference)
               for it in items]
    prompts += [gpd_template.render(prediction=u, reference=it.reference)
                for it, u in zip(items, unrelated)]
    verdicts = judge.choose(prompts, GPD_OPTIONS, parse_implication)
    n = len(items)
    rows = []
    for k, it in enumerate(items):
        (own, own_raw), (other, other_raw) = verdicts[k], verdicts[n + k]
        rows.append({"item": it.id, "dialogue": it.dialogue, "reference": it.reference,
                     "unrelated": unrelated[k],
                     "self": GPD_LABELS.get(own, own) if own else None, "self_raw": own_raw,
                     "vs_unrelated": GPD_LABELS.get(other, other) if other else None,
                     "unrelated_raw": other_raw})
    table, valid = gpd_check_table(rows, n_boot, seed)
    return GpdCheck(rows, table, valid)


def gpd_check_table(rows: Sequence[dict[str, Any]], n_boot: int, seed: int
                    ) -> tuple[pd.DataFrame, bool]:
    """Two rows of GPT-Distance (reference vs itself, vs unrelated) and their paired
    difference over the items with both verdicts usable; and whether it is valid."""
    from medpref.metrics.intervals import paired_difference

    out = []
    for name, key in (("reference vs itself", "self"), ("reference vs unrelated", "vs_unrelated")):
        g = gpt_distance([r[key] for r in rows])
        out.append({"comparison": name, "items": len(rows), **g, "ci_lo": np.nan,
                    "ci_hi": np.nan, "p_value": np.nan, "verdict": ""})
    both = [r for r in rows if r["self"] and r["vs_unrelated"]]
    cmp = paired_difference([GPD_POINTS[r["vs_unrelated"]] for r in both],
                            [GPD_POINTS[r["self"]] for r in both], n_boot=n_boot, seed=seed,
                            clusters=[r["dialogue"] for r in both])
    valid = cmp.verdict() == "higher"
    out.append({"comparison": "unrelated − itself (paired)", "items": cmp.n, "fully": np.nan,
                "partially": np.nan, "not": np.nan, "unusable": len(rows) - len(both),
                "gpd": cmp.diff, "ci_lo": cmp.lo, "ci_hi": cmp.hi, "p_value": cmp.p_value,
                "verdict": "GPD valid with this judge" if valid else GPD_NOT_VALID})
    return pd.DataFrame(out, columns=CHECK_COLUMNS), valid


def apply_gpd_check(summary: pd.DataFrame, paired: pd.DataFrame, check: GpdCheck | None
                    ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The next-turn table with a ``gpd_valid`` column (and, when the check failed, a
    ``gpd_note`` reading :data:`GPD_NOT_VALID`), and the paired table whose GPD verdicts
    read "not valid" when it failed. No check (no items): unchanged."""
    if check is None:
        return summary, paired
    summary, paired = summary.copy(), paired.copy()
    summary["gpd_valid"] = check.valid
    summary["gpd_note"] = "" if check.valid else GPD_NOT_VALID
    if not check.valid and len(paired):
        paired.loc[paired["metric"] == "gpd", "verdict"] = "not valid"
    return summary, paired


def gpd_check_metrics(check: GpdCheck | None) -> dict[str, Any]:
    """``next_turn/gpd_check``: both GPDs, their paired difference, interval and validity."""
    if check is None:
        return {}
    t = check.table.set_index("comparison")
    diff = t.loc["unrelated − itself (paired)"]

    def num(v):
        return None if pd.isna(v) else round(float(v), 3)

    return {"next_turn/gpd_check": {
        "items": int(diff["items"]), "self_gpd": num(t.loc["reference vs itself", "gpd"]),
        "unrelated_gpd": num(t.loc["reference vs unrelated", "gpd"]),
        "diff": num(diff["gpd"]), "ci_lo": num(diff["ci_lo"]), "ci_hi": num(diff["ci_hi"]),
        "p_value": num(diff["p_value"]), "valid": bool(check.valid)}}


# -- records: the items with the GPD check's verdicts, and each doctor's predictions -------

CHECK_FIELDS = ("unrelated", "self", "self_raw", "vs_unrelated", "unrelated_raw")


def item_records(items: Sequence[NextTurnItem], check: GpdCheck | None, judge_model: str
                 ) -> list[dict[str, Any]]:
    """One record per next-turn item: its dialogue, language, reference turn and history
    length, and the GPD check's verdicts on it (the unrelated turn, the judge's raw and
    parsed verdicts; None where the check asked nothing)."""
    by_item = {r["item"]: r for r in check.rows} if check is not None else {}
    return [{"item": it.id, "dialogue": it.dialogue, "lang": it.lang,
             "history_turns": len(it.history), "reference": it.reference,
             "judge_model": judge_model,
             **{k: by_item.get(it.id, {}).get(k) for k in CHECK_FIELDS}} for it in items]


def check_of(items: Sequence[dict[str, Any]], n_boot: int, seed: int) -> GpdCheck | None:
    """The GPD check from the item records (:func:`item_records`), as :func:`gpd_check`
    made it: None without items; not valid, with no verdicts, for items of fewer than two
    dialogues."""
    if not items:
        return None
    if len({r["dialogue"] for r in items}) < 2:
        return GpdCheck([], gpd_check_table([], n_boot, seed)[0], valid=False)
    rows = [{"item": r["item"], "dialogue": r["dialogue"], "reference": r["reference"],
             **{k: r[k] for k in CHECK_FIELDS}} for r in items]
    table, valid = gpd_check_table(rows, n_boot, seed)
    return GpdCheck(rows, table, valid)


#: what a prediction record keeps of an item row (the text scores are recomputed)
PREDICTION_FIELDS = ("item", "doctor", "model_id", "lang", "prediction", "raw", "error",
                     "implication", "judge_raw")


def prediction_records(rows: Sequence[dict[str, Any]], model_id: str) -> list[dict[str, Any]]:
    """A doctor's item rows (:func:`evaluate_next_turn`) as records: the prediction, the
    raw completion or the error, and the judge's parsed and raw verdict; the reference
    lives in the item record and BLEU/ROUGE are recomputed from the texts."""
    return [{k: ({**r, "model_id": model_id}).get(k) for k in PREDICTION_FIELDS} for r in rows]


def item_rows(predictions: Sequence[dict[str, Any]], items: Sequence[dict[str, Any]]
              ) -> list[dict[str, Any]]:
    """The item rows :func:`evaluate_next_turn` made, from the records: each prediction
    with its reference and, where it has a prediction, its text scores and verdict."""
    refs = {r["item"]: r["reference"] for r in items}
    out = []
    for r in predictions:
        row = {"item": r["item"], "doctor": r["doctor"], "lang": r["lang"],
               "reference": refs[r["item"]], "prediction": r["prediction"], "raw": r["raw"],
               "error": r["error"]}
        if r["prediction"] is not None:
            row.update(text_scores(r["prediction"], row["reference"], r["lang"]))
            row["implication"] = r["implication"]
            row["judge_raw"] = r["judge_raw"]
        out.append(row)
    return out
