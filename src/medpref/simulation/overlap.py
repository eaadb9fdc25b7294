"""Does a training dialogue teach an SP case? The written split's overlap check (issue 31).

The SP test must not grade what the policies trained on. For every pair of an SP case and
a dialogue of the split's corpus, two signals:

* the MiniLM cosine of the case's chief complaint and checklist diseases against the
  dialogue's ``meta.chief_complaint`` and ``meta.diagnosis`` (the presentation and the
  disease together);
* the content words (Porter stems, :func:`medpref.echo.content_units`) that the
  case's disease names and the dialogue's diagnosis share, less words that name no
  particular disease (``GENERIC``: "acute", "disease", "syndrome", ...).

A pair is *flagged* (the same disease and presentation) when the cosine reaches
``flag_cosine`` or the disease names share ``flag_shared_words`` specific words, and
*near* (listed for a reader, allowed anywhere) when it reaches ``near_cosine`` or shares
one. The stage fails when a flagged pair's dialogue is in the split's ``train`` part and a
trained policy is evaluated; with only untrained doctors and controls it reports the pairs
and goes on (:func:`check_split`).
Cases in another language than English are compared through an English gloss of their
chief complaint and diseases (``gloss``, written by hand); a case with neither is listed
as not checked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from medpref.contracts import ContractError, Dialogue, SPCase, iter_jsonl
from medpref.data.split import DialogueSplit
from medpref.echo import content_units

#: Stems of words that name no particular disease: sharing one is no evidence of a match.
GENERIC = frozenset(content_units(
    "acute chronic disease diseases syndrome disorder episode type suspected severe moderate "
    "mild poorly controlled left right with from infection condition primary secondary "
    "childhood allergic major minor recurrent"))
COLUMNS = ["case", "dialogue", "part", "status", "cosine", "shared_words", "case_text",
           "dialogue_text"]


@dataclass(frozen=True)
class CaseText:
    """What an SP case is about, in English: its chief complaint and checklist diseases."""

    case: str
    complaint: str
    diseases: tuple[str, ...]

    @property
    def text(self) -> str:
        return f"{self.complaint}; {', '.join(self.diseases)}"


@dataclass(frozen=True)
class DialogueText:
    dialogue: str
    complaint: str
    diagnosis: str

    @property
    def text(self) -> str:
        return f"{self.complaint}; {self.diagnosis}"


def load_gloss(path: str | Path | None) -> dict[str, CaseText]:
    """English glosses of non-English cases: ``<case id>: {chief_complaint, diseases}``;
    a gloss without both is an error naming the file, the line and the case."""
    if path is None:
        return {}
    with open(path, encoding="utf-8") as fh:
        root = yaml.compose(fh)
    out = {}
    for key, value in (root.value if root is not None else []):
        data = yaml.safe_load(yaml.serialize(value)) if value is not None else None
        if (not isinstance(data, dict) or not isinstance(data.get("chief_complaint"), str)
                or not isinstance(data.get("diseases"), list) or set(data) - {
                    "chief_complaint", "diseases"}):
            raise ContractError(path, key.start_mark.line + 1, key.value,
                                "a gloss is {chief_complaint: text, diseases: [text, ...]}")
        out[key.value] = CaseText(key.value, data["chief_complaint"], tuple(data["diseases"]))
    return out


def case_texts(cases: Sequence[SPCase], gloss: dict[str, CaseText]
               ) -> tuple[list[CaseText], list[str]]:
    """Each case's English text (its gloss when it has one); and the ids of cases in
    another language without a gloss, which cannot be checked."""
    texts, unchecked = [], []
    for c in cases:
        if c.id in gloss:
            texts.append(gloss[c.id])
        elif (c.lang or "en") == "en":
            texts.append(CaseText(c.id, c.chief_complaint, tuple(c.checklist.diseases)))
        else:
            unchecked.append(c.id)
    return texts, unchecked


def dialogue_texts(path: str | Path) -> list[DialogueText]:
    """Each dialogue's chief complaint and diagnosis (``meta``); a dialogue without them
    is an error naming the file, the line and the field."""
    out = []
    for line, d in enumerate(iter_jsonl(path, Dialogue), start=1):
        meta = d.meta or {}
        for key in ("chief_complaint", "diagnosis"):
            if not isinstance(meta.get(key), str) or not meta[key].strip():
                raise ContractError(path, line, f"meta.{key}", "the SP overlap check needs it")
        out.append(DialogueText(d.id, meta["chief_complaint"], meta["diagnosis"]))
    return out


def disease_words(names: Sequence[str]) -> frozenset[str]:
    """The specific content words of disease names (stems, less ``GENERIC``)."""
    return frozenset().union(*(content_units(n) for n in names)) - GENERIC


@dataclass(frozen=True)
class OverlapSettings:
    flag_cosine: float
    flag_shared_words: int
    near_cosine: float


def overlap_pairs(cases: Sequence[CaseText], dialogues: Sequence[DialogueText],
                  split: DialogueSplit, encode: Callable, s: OverlapSettings) -> pd.DataFrame:
    """The flagged and near pairs (one row each, highest cosine first within a status),
    with the dialogue's part of the split."""
    if not cases or not dialogues:
        return pd.DataFrame(columns=COLUMNS)
    sims = np.asarray(encode([c.text for c in cases])) @ np.asarray(
        encode([d.text for d in dialogues])).T
    rows = []
    for i, c in enumerate(cases):
        words = disease_words(c.diseases)
        for j, d in enumerate(dialogues):
            shared = sorted(words & disease_words([d.diagnosis]))
            cos = float(sims[i, j])
            if cos >= s.flag_cosine or len(shared) >= s.flag_shared_words:
                status = "flagged"
            elif cos >= s.near_cosine or shared:
                status = "near"
            else:
                continue
            rows.append({"case": c.case, "dialogue": d.dialogue, "part": split.part(d.dialogue),
                         "status": status, "cosine": cos, "shared_words": " ".join(shared),
                         "case_text": c.text, "dialogue_text": d.text})
    return sorted_pairs(pd.DataFrame(rows, columns=COLUMNS))


def sorted_pairs(df: pd.DataFrame) -> pd.DataFrame:
    """Flagged pairs before near ones, highest cosine first within each (stable)."""
    rank = df["status"].map({"flagged": 0, "near": 1})
    return df.assign(_rank=rank, _neg=-df["cosine"]).sort_values(
        ["_rank", "_neg"], kind="stable").drop(columns=["_rank", "_neg"]).reset_index(drop=True)


UNCHECKED = "not checked: no English gloss"


def with_unchecked(pairs: pd.DataFrame, unchecked: Sequence[str]) -> pd.DataFrame:
    """The report: the pairs, then a line per case that could not be checked."""
    rows = [{"case": c, "dialogue": "", "part": "", "status": UNCHECKED,
             "cosine": np.nan, "shared_words": "", "case_text": "", "dialogue_text": ""}
            for c in unchecked]
    return pd.concat([pairs, pd.DataFrame(rows, columns=COLUMNS)], ignore_index=True) \
        if rows else pairs


def overlap_records(table: pd.DataFrame) -> list[dict[str, Any]]:
    """The check's rows as records: every listed pair (its cosine, the disease words it
    shares, both texts, the dialogue's part and the status), then each unchecked case."""
    return [{k: None if isinstance(v, float) and np.isnan(v) else v for k, v in row.items()}
            for row in table.to_dict("records")]


def table_of(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """``split_overlap`` from its records (:func:`overlap_records`), as the check made it."""
    pairs = [r for r in rows if r["status"] != UNCHECKED]
    unchecked = [r["case"] for r in rows if r["status"] == UNCHECKED]
    return with_unchecked(sorted_pairs(pd.DataFrame(pairs, columns=COLUMNS)), unchecked)


def flagged_in_train(table: pd.DataFrame) -> pd.DataFrame:
    return table[(table["status"] == "flagged") & (table["part"] == "train")]


def metrics_of(table: pd.DataFrame) -> dict[str, Any]:
    status = table["status"]
    return {"split_overlap": {"flagged": int((status == "flagged").sum()),
                              "flagged_in_train": len(flagged_in_train(table)),
                              "near": int((status == "near").sum()),
                              "unchecked_cases": int(status.str.startswith("not checked").sum())}}


def check_split(stage, p, cases: Sequence[SPCase], encode: Callable,
                trained: Sequence[str] = ()) -> pd.DataFrame:
    """Stage 06's overlap check of ``cases`` against the split's corpus
    (``simulation.split_overlap``): the ``split_overlap`` table. A flagged dialogue in
    ``train`` stops the stage (naming the pairs, writing nothing) only when ``trained``
    names a trained policy under test (a doctor with an adapter): only a policy trained
    on that dialogue could have learnt the case. With the base doctor and the controls
    alone nothing under test saw the training part, so the pairs are reported (printed,
    and kept in the table and ``metrics.json``) and the run goes on."""
    from medpref.data.split import load_split
    from medpref.params import repo_path

    o = p.split_overlap
    split = load_split(repo_path(stage.params.shared.split))
    texts, unchecked = case_texts(cases, load_gloss(repo_path(o.gloss) if o.gloss else None))
    settings = OverlapSettings(o.flag_cosine, o.flag_shared_words, o.near_cosine)
    pairs = overlap_pairs(texts, dialogue_texts(repo_path(o.dialogues)), split, encode, settings)
    table = with_unchecked(pairs, unchecked)
    if unchecked:
        print(f"split overlap: {len(unchecked)} SP cases not checked (not English, no gloss in "
              f"{o.gloss}): {', '.join(unchecked)}")
    stop_on_flagged_train(stage, table, split.path, trained)
    return table


def stop_on_flagged_train(stage, table: pd.DataFrame, split_path, trained: Sequence[str]
                          ) -> None:
    """Fail the stage when a flagged pair's dialogue is in ``train`` and a trained policy
    (``trained``: their names) is evaluated; without one, print the pairs and go on."""
    from medpref.stagekit import StageFailed

    bad = flagged_in_train(table)
    if not len(bad):
        return
    listed = "; ".join(f"{r.case} ~ {r.dialogue} (cosine {r.cosine:.2f}, shared "
                       f"'{r.shared_words}')" for r in bad.itertuples())
    found = f"{len(bad)} training dialogues of {split_path} match an SP case ({listed})"
    if trained:
        raise StageFailed(f"stage {stage.key} failed: {found}; trained policies under test: "
                          f"{', '.join(trained)}; move them out of train")
    print(f"split overlap: {found}; reported only: no trained policy is evaluated "
          "(the base doctor and controls never saw the training part)")
