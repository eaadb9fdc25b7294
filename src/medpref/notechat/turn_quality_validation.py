"""The turn-quality checks measured like a grader: recall and precision against hand labels.

A reader labelled generated turns by hand (``notechat.turn_quality_labels``, one
:class:`LabelledTurn` a line, every turn of each dialogue in order): does the speaker speak
as their role (``role_ok``), does prompt or format text leak in (``leak``), does the turn
repeat itself or an earlier turn (``repetition``), and would a reader accept it in a
training dialogue (``usable``). Each check of :mod:`medpref.notechat.turn_quality` is
then a classifier of "bad" turns: ``role`` against ``not role_ok``, ``leak`` against
``leak``, ``repeat`` against ``repetition``, ``empty`` (a turn that says nothing; no label
of its own) and the overall decision (any flag) against ``not usable``. Recall and
precision come with their counts and Wilson intervals, per half of the labels (``split``:
``dev`` turns may shape the rules, ``test`` turns only measure them) and for all of them.
Turns of one dialogue are not independent, so the intervals are somewhat narrower than
they should be; the counts are there to read.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from medpref.contracts import ClinicalNote, ContractError, Role, Turn, read_jsonl
from medpref.metrics.intervals import proportion_ci
from medpref.turns.turn_quality import CHECKS, check_dialogue

#: what each check is compared with: (label, the label value that means "bad")
GOLD = {"role": ("role_ok", False), "leak": ("leak", True), "repeat": ("repetition", True),
        "empty": ("usable", False), "any": ("usable", False)}
SPLITS = ("dev", "test", "all")
#: The notes the labelled turns were made from (``note_id``): the checks read them to see a
#: note read aloud.
LABEL_NOTES = ("data/embedded/notes.jsonl", "data/embedded/turn_quality_notes.jsonl")


class LabelledTurn(BaseModel):
    """One generated turn as a reader labelled it (unknown keys are errors)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    dialogue: str = Field(min_length=1)
    index: int = Field(ge=0)
    role: Role
    text: str
    role_ok: bool
    leak: bool
    repetition: bool
    usable: bool
    why: str = ""
    #: dev: may shape the rules; test: only measures them (assigned by dialogue)
    split: Literal["dev", "test"]
    note_id: str | None = None
    system: str | None = None
    #: the dialogue's turns as the generator saw them before this one, not labelled here:
    #: a raw answer that a stage dropped or repaired is labelled as a dialogue of one turn
    #: after them (``docs/turn_quality_rubric.md``); the checks read them as earlier turns
    context: list[Turn] = Field(default_factory=list)


def load_labels(path: str | os.PathLike) -> list[LabelledTurn]:
    """The labelled turns; every dialogue's turns must be there, in order, from index 0
    (the repetition check reads the earlier turns), and a dialogue lies in one split."""
    path = Path(path)
    turns = read_jsonl(path, LabelledTurn)
    seen: dict[str, list[LabelledTurn]] = {}
    for line, t in enumerate(turns, start=1):
        earlier = seen.setdefault(t.dialogue, [])
        if t.index != len(earlier):
            raise ContractError(path, line, "index", f"dialogue {t.dialogue!r}: expected turn "
                                f"{len(earlier)} next, got {t.index}")
        if t.context and t.index:
            raise ContractError(path, line, "context", f"dialogue {t.dialogue!r}: only its "
                                "first turn (index 0) may carry a context")
        if earlier and t.split != earlier[0].split:
            raise ContractError(path, line, "split", f"dialogue {t.dialogue!r} is in "
                                f"{earlier[0].split!r}; a dialogue lies in one split")
        earlier.append(t)
    if len({t.id for t in turns}) != len(turns):
        raise ContractError(path, None, "id", "ids must be distinct")
    return turns


def flag_labelled(turns: Sequence[LabelledTurn],
                  notes: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per turn: the checks' flags (``role``, ``leak``, ``repeat``, ``any``) next
    to the labels turned into "bad" (``gold_role``, ...), with ``split`` and the text;
    ``notes`` (note id -> text) are the source notes the checks may read."""
    by_dialogue: dict[str, list[LabelledTurn]] = {}
    for t in turns:
        by_dialogue.setdefault(t.dialogue, []).append(t)
    rows = []
    for dialogue, items in by_dialogue.items():
        context = [{"role": c.role, "text": c.text} for c in items[0].context]
        flags = check_dialogue(context + [{"role": t.role, "text": t.text} for t in items],
                               note=(notes or {}).get(items[0].note_id or ""))
        flags = flags[len(context):]
        for t, f in zip(items, flags, strict=True):
            row = {"id": t.id, "dialogue": dialogue, "index": t.index, "split": t.split,
                   "role_of_speaker": t.role, "text": t.text, "why": t.why,
                   **{c: bool(getattr(f, c)) for c in CHECKS}, "any": not f.passes}
            for check, (label, bad) in GOLD.items():
                row[f"gold_{check}"] = getattr(t, label) is bad
            rows.append(row)
    return pd.DataFrame(rows)


def check_scores(flagged: pd.Series, gold: pd.Series) -> dict[str, float | int]:
    """Counts and recall / precision of "flagged as bad" against "labelled bad", with
    Wilson 95 % intervals (NaN where nothing was labelled or flagged bad)."""
    tp = int((flagged & gold).sum())
    fp = int((flagged & ~gold).sum())
    fn = int((~flagged & gold).sum())
    recall, precision = proportion_ci(tp, tp + fn), proportion_ci(tp, tp + fp)
    return {"turns": len(gold), "labelled_bad": tp + fn, "flagged": tp + fp,
            "tp": tp, "fp": fp, "fn": fn, "tn": len(gold) - tp - fp - fn,
            "recall": recall.estimate, "recall_lo": recall.lo, "recall_hi": recall.hi,
            "precision": precision.estimate, "precision_lo": precision.lo,
            "precision_hi": precision.hi}


def validation_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per split (dev, test, all) and check (role, leak, repeat, empty, any): the scores of
    :func:`check_scores`."""
    rows = []
    for split in SPLITS:
        part = frame if split == "all" else frame[frame["split"] == split]
        for check in GOLD:
            rows.append({"split": split, "check": check,
                         **check_scores(part[check].astype(bool), part[f"gold_{check}"])})
    return pd.DataFrame(rows)


def label_counts(turns: Sequence[LabelledTurn]) -> pd.DataFrame:
    """How many turns each label marks bad, per split and in all."""
    frame = pd.DataFrame([t.model_dump() for t in turns])
    rows = []
    for split in SPLITS:
        part = frame if split == "all" else frame[frame["split"] == split]
        rows.append({"split": split, "dialogues": part["dialogue"].nunique(), "turns": len(part),
                     "role slips": int((~part["role_ok"]).sum()), "leaks": int(part["leak"].sum()),
                     "repetitions": int(part["repetition"].sum()),
                     "unusable": int((~part["usable"]).sum())})
    return pd.DataFrame(rows)


def disagreements(frame: pd.DataFrame, check: str = "any") -> pd.DataFrame:
    """The turns where a check and the labels disagree: ``missed`` (labelled bad, not
    flagged) and ``false alarm`` (flagged, labelled fine)."""
    gold, flag = frame[f"gold_{check}"], frame[check].astype(bool)
    out = frame[gold != flag].assign(kind=lambda f: f[check].map(
        {True: "false alarm", False: "missed"}))
    return out[["id", "split", "kind", "role_of_speaker", "text", "why"]]


VALIDATION_NOTE = (
    "Recall: of the turns a reader labelled bad, the share the check flags; precision: of "
    "the turns it flags, the share labelled bad (Wilson 95 % intervals; turns of one "
    "dialogue are not independent, so the intervals are somewhat too narrow). `any` is the "
    "checks' overall decision (a turn fails when any check flags it) against `usable`, "
    "which also counts faults no check looks for. `dev` turns may shape the rules; `test` "
    "turns only measure them.")


def _shown(scores: pd.DataFrame) -> pd.DataFrame:
    """Scores with each rate and its interval in one cell ("0.62 [0.45, 0.77]")."""
    out = scores[["split", "check", "turns", "labelled_bad", "flagged", "tp", "fp", "fn"]].copy()
    for rate in ("recall", "precision"):
        out[rate] = [("—" if pd.isna(v) else f"{v:.2f} [{lo:.2f}, {hi:.2f}]")
                     for v, lo, hi in zip(scores[rate], scores[f"{rate}_lo"],
                                          scores[f"{rate}_hi"], strict=True)]
    return out


def validation_markdown(scores: pd.DataFrame, counts: pd.DataFrame, source: str) -> str:
    """The report page: labels per split, then each check's scores, then the note."""
    return (f"Hand-labelled turns ({source}): turns each label marks bad\n\n"
            f"{counts.to_markdown(index=False)}\n\n"
            f"Checks against the labels\n\n{_shown(scores).to_markdown(index=False)}\n\n"
            f"- {VALIDATION_NOTE}\n")


def label_notes(paths: Sequence[str | os.PathLike] = LABEL_NOTES) -> dict[str, str]:
    """Note id -> note text of the notes files (relative paths from the repository)."""
    from medpref.params import repo_path

    return {n.id: n.note for p in paths for n in read_jsonl(repo_path(p), ClinicalNote)}


def validation_report(path: str | os.PathLike, notes: dict[str, str] | None = None
                      ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(scores, label counts)`` of the checks on a labels file; ``notes`` default to
    :data:`LABEL_NOTES`, and every labelled turn's note must be there."""
    turns = load_labels(path)
    notes = label_notes() if notes is None else notes
    for line, t in enumerate(turns, start=1):
        if t.note_id and t.note_id not in notes:
            raise ContractError(Path(path), line, "note_id", f"no note {t.note_id!r} in "
                                f"{', '.join(LABEL_NOTES)}")
    return validation_table(flag_labelled(turns, notes)), label_counts(turns)
