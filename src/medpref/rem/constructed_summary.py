"""``data/embedded/rem/CONSTRUCTED.md``: what the constructed REM rows hold.

Label counts per split and rule, rows per construction, and the correlation of the doctor
turn's word count with the label (Pearson, i.e. point-biserial on the 0/1/2 scale) per
split, pooled and per rule, beside the same for the hand rows; and the hand training rows
held out because they share text with an evaluation-split dialogue.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import pandas as pd
from scipy.stats import pearsonr

from medpref.contracts import Dialogue, RemAnnotation
from medpref.data.split import DialogueSplit
from medpref.rem.config import RemParams
from medpref.rem.overlap import eval_overlaps, history_text, word_runs

SPLITS = ("train", "dev", "test")
RULES = ("A", "B", "C", "D", "E", "F")


def turn_words(row: dict[str, Any]) -> int:
    """Words of the row's last (doctor) turn."""
    return len(row["history"][-1]["text"].split())


def length_r(rows: Sequence[dict[str, Any]], feature=turn_words) -> float | None:
    """Pearson r of a surface feature of the row (default: the doctor turn's word count)
    with the score; None when undefined."""
    values = [feature(r) for r in rows]
    if len(rows) < 3 or len({r["score"] for r in rows}) < 2 or len(set(values)) < 2:
        return None
    return float(pearsonr(values, [r["score"] for r in rows])[0])


def history_turns(row: dict[str, Any]) -> int:
    return len(row["history"])


def asks(row: dict[str, Any]) -> int:
    return int("?" in row["history"][-1]["text"])


def _fmt(r: float | None) -> str:
    return "—" if r is None else f"{r:+.2f}"


def label_table(rows: Sequence[dict[str, Any]]) -> str:
    """Rows per split × rule × score, with the length correlation of each split and rule."""
    lines = ["| split | rule | score 0 | score 1 | score 2 | rows | r(words, score) | "
             "r(turns, score) | r(asks, score) |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for split in SPLITS:
        part = [r for r in rows if r["split"] == split]
        for rule in (*RULES, "all"):
            sub = part if rule == "all" else [r for r in part if r["rule"] == rule]
            c = Counter(r["score"] for r in sub)
            lines.append(f"| {split} | {rule} | {c[0]} | {c[1]} | {c[2]} | {len(sub)} | "
                         f"{_fmt(length_r(sub))} | {_fmt(length_r(sub, history_turns))} | "
                         f"{_fmt(length_r(sub, asks))} |")
    return "\n".join(lines)


def construction_table(rows: Sequence[dict[str, Any]], about: dict[str, str]) -> str:
    """Rows per construction and split, in the constructions file's order."""
    frame = pd.DataFrame([{"construction": r["construction"], "split": r["split"]}
                          for r in rows])
    table = frame.value_counts().unstack("split", fill_value=0).reindex(
        index=list(about), columns=list(SPLITS), fill_value=0)
    lines = ["| construction | what the doctor turn is | train | dev | test |",
             "|---|---|---:|---:|---:|"]
    lines += [f"| {name} | {about[name]} | "
              + " | ".join(str(int(v)) for v in table.loc[name]) + " |" for name in about]
    return "\n".join(lines)


SURFACE = {"words": lambda r: [turn_words(r)],
           "words + asks + turns": lambda r: [turn_words(r), asks(r), history_turns(r)]}


def surface_accuracy(rows: Sequence[dict[str, Any]], fit_split: str, on_split: str
                     ) -> list[tuple[str, str, float, float]]:
    """Per rule and surface feature set: the exact accuracy on ``on_split`` of a
    multinomial logistic fit on ``fit_split`` (features standardised), beside always
    answering the rule's most frequent ``fit_split`` score. How far surface cues alone
    get on the constructed rows."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    out = []
    for rule in RULES:
        fit = [r for r in rows if r["split"] == fit_split and r["rule"] == rule]
        on = [r for r in rows if r["split"] == on_split and r["rule"] == rule]
        majority = Counter(r["score"] for r in fit).most_common(1)[0][0]
        base = sum(r["score"] == majority for r in on) / len(on)
        for name, feats in SURFACE.items():
            model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
            model.fit([feats(r) for r in fit], [r["score"] for r in fit])
            acc = float(model.score([feats(r) for r in on], [r["score"] for r in on]))
            out.append((rule, name, acc, base))
    return out


def surface_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = ["| rule | features | accuracy on test | majority on test |", "|---|---|---:|---:|"]
    lines += [f"| {rule} | {name} | {acc:.2f} | {base:.2f} |"
              for rule, name, acc, base in surface_accuracy(rows, "train", "test")]
    return "\n".join(lines)


def hand_dicts(hand: Sequence[RemAnnotation]) -> list[dict[str, Any]]:
    return [{"id": a.id, "rule": a.rule, "score": a.score, "split": getattr(a, "split", "?"),
             "history": [{"role": t.role, "text": t.text} for t in a.history]} for a in hand]


def hand_table(hand: list[dict[str, Any]]) -> str:
    lines = ["| hand split | rows | r(words, score) | per rule | r(turns, score) | "
             "r(asks, score) |", "|---|---:|---:|---|---:|---:|"]
    for split in sorted({r["split"] for r in hand}):
        part = [r for r in hand if r["split"] == split]
        per_rule = ", ".join(f"{rule} {_fmt(length_r([r for r in part if r['rule'] == rule]))}"
                             for rule in RULES)
        lines.append(f"| {split} | {len(part)} | {_fmt(length_r(part))} | {per_rule} | "
                     f"{_fmt(length_r(part, history_turns))} | {_fmt(length_r(part, asks))} |")
    return "\n".join(lines)


def overlap_lines(hand: list[dict[str, Any]], rows: Sequence[dict[str, Any]],
                  dialogues: Sequence[Dialogue], split: DialogueSplit, n: int) -> str:
    train_hand = [r for r in hand if r["split"] == "train"]
    held = eval_overlaps(train_hand, dialogues, split, n)
    built = eval_overlaps([r for r in rows if r["split"] == "train"], dialogues, split, n)
    lines = [f"Hand training rows sharing a run of {n} words "
             "(`rem.construction.overlap_words`) with an evaluation-split dialogue, one that "
             "no training or development dialogue also has: "
             f"**{len(held)}** of "
             f"{len(train_hand)}; `medpref.rem.overlap.hand_training_rows` leaves them out "
             "of the REM's training rows.", ""]
    lines += [f"- `{rid}` shares text with {', '.join(ds)}" for rid, ds in sorted(held.items())]
    test_hand = [r for r in hand if r["split"] == "test"]
    seen = set().union(*(word_runs(history_text(r["history"]), n) for r in rows
                         if r["split"] == "train"))
    reused = [r["id"] for r in test_hand if word_runs(history_text(r["history"]), n) & seen]
    lines += ["", f"Constructed training rows sharing such a run: **{len(built)}**. Hand "
              f"test rows sharing a run of {n} words with a constructed training row: "
              f"**{len(reused)}** of {len(test_hand)}" + (f" ({', '.join(reused)})."
                                                          if reused else ".")]
    return "\n".join(lines)


def summary_markdown(rows: Sequence[dict[str, Any]], hand: Sequence[RemAnnotation],
                     dialogues: Sequence[Dialogue], split: DialogueSplit,
                     p: RemParams, about: dict[str, str]) -> str:
    """The whole summary page (generated; never edited by hand)."""
    cp, hd = p.construction, hand_dicts(hand)
    n_dialogues = {s: len({r["dialogue"] for r in rows if r["split"] == s}) for s in SPLITS}
    return "\n".join([
        "# The REM's constructed rows",
        "",
        "<!-- generated by `python -m medpref.rem.constructions` from "
        f"`{cp.config}` and params `rem.construction`; do not edit -->",
        "",
        f"`{p.constructed}`: {len(rows)} rows (one per state and rule) built by the written "
        f"constructions of `{cp.config}` over the training-split dialogues only, split by "
        "dialogue into the REM's own parts: "
        + ", ".join(f"{s} {sum(r['split'] == s for r in rows)} rows from {n_dialogues[s]} "
                    "dialogues" for s in SPLITS) + ". See docs/rem.md, \"The REM's data\".",
        "",
        "## Labels and turn length per split and rule",
        "",
        "`r(words, score)`: Pearson correlation of the doctor turn's word count with the "
        "score (0/1/2); the target is |r| ≤ 0.2 in every split. Two more surface cues, "
        "reported, not targeted: `r(turns, score)`, the history's number of turns (the "
        "first doctor turn is where the rubric settles rule A at 0 for most constructions), "
        "and `r(asks, score)`, whether the doctor turn has a question mark.",
        "",
        label_table(rows),
        "",
        "## Surface cues alone",
        "",
        "A logistic fit per rule on the train rows' surface features only (the doctor turn's "
        "word count; with whether it asks a question and the history's number of turns), "
        "scored on the test rows, beside always answering the rule's most frequent train "
        "score. A REM that reads the rule must beat these.",
        "",
        surface_table(rows),
        "",
        "## The hand rows, for comparison",
        "",
        f"`{p.annotations}`, the same correlation:",
        "",
        hand_table(hd),
        "",
        "## Rows per construction",
        "",
        construction_table(rows, about),
        "",
        "## Text shared with evaluation-split dialogues",
        "",
        overlap_lines(hd, rows, dialogues, split, cp.overlap_words),
        ""])
