"""Next-turn evaluation on held-out dialogues (PLPF §4.2, Tables 4 and 6, Fig. 4).

Each held-out dialogue is cut before a doctor turn (seeded); the doctor under test writes
that turn from the history, and it is compared with the real one: BLEU-4, ROUGE-L
precision/recall/F1 and lengths through the shared language-aware text metrics
(``medpref.metrics.text``: one token per Han character), and GPT-Distance: a judge says
whether the prediction implies the reference fully (A), partially (B) or not (C);
GPD = (2·|Not| + |Partially|) / |All| over the usable verdicts.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from medpref.contracts import Dialogue, Turn
from medpref.llm import CallSpec, LLMClient
from medpref.prompts import PromptTemplate
from medpref.simulation.consult import doctor_messages, parse_doctor_answer
from medpref.simulation.echo import speech_act
from medpref.simulation.grading import GPD_LABELS, GPD_OPTIONS, Judge, parse_implication
from medpref.simulation.knowledge import split_sentences
from medpref.simulation.tables import shown_mde


@dataclass(frozen=True)
class NextTurnItem:
    id: str
    dialogue: str
    lang: str
    history: list[Turn]
    reference: str


def cut_points(dialogue: Dialogue, n: int, rng: random.Random) -> list[int]:
    """Indices of doctor turns that answer a patient turn (up to ``n``, seeded, sorted)."""
    ok = [i for i, t in enumerate(dialogue.turns)
          if t.role == "doctor" and i > 0 and dialogue.turns[i - 1].role == "patient"]
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
