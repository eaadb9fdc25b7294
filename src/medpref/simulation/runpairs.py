"""Blinded (sentence, item) pairs from a stage-06 run, for hand-grading the SP grader.

The hand-graded items measure the grader only where they hold the sentences the run's
doctors say. This module draws those sentences from a run's records (issue 41, item 1):

- every credit a *model* doctor earns (``grades.jsonl`` ``passed: true``): the sentence the
  configured grader credited, re-derived by regrading the committed consultations (the
  echo_aware grader needs only MiniLM; a credit or evidence sentence that differs from the
  record is an error, not a silent substitute);
- the *uncredited* items (or a seeded sample of them) of the same doctors for which some
  doctor sentence shares a content unit with the item (or one of its parts) or comes within
  ``synonym_cosine`` of it by MiniLM: the sentence closest to the item stands for it (one
  pair per consultation × item, so each pair is one item of Eq. 6 and the sample's
  inclusion share is known). Items with no such sentence are left out and counted: a
  reader is taken to judge them not earned.

Each pair belongs to a half fixed by its case (:func:`medpref.simulation.validation.
case_split`). The labeller's file carries no verdict and no doctor; a second file (the
"secret") carries both, with the pool counts the corrected scores need.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from medpref.contracts import ContractError, SPCase, SPGradedItem, Turn
from medpref.echo import DoctorSentence, content_units, doctor_sentences, item_parts
from medpref.prompts import load_prompt
from medpref.simulation.consult import Consultation
from medpref.simulation.graders import GraderContext, build_grader
from medpref.simulation.grading import CATEGORIES, GradingSetup, ItemGrade
from medpref.simulation.validation import case_split

#: the doctors whose credits are validated: every doctor of kind "model" (the controls
#: are scripted and measured by the gate)
MODEL_KIND = "model"


@dataclass(frozen=True)
class Pair:
    """One (doctor sentence, checklist item) of a run, with what the secret file needs."""

    case: str
    doctor: str
    lang: str
    category: str
    item: str
    turn: int                 # transcript index of the doctor turn holding the sentence
    sentence: str
    credited: bool
    echo: bool                # the grader reads the sentence as an echo of the patient
    act: str                  # its speech act as the grader reads it
    shared_units: int         # content units it shares with the item (best part)
    cosine: float | None      # best MiniLM cosine with the item or a part


def regrade(grader_params, consults: Sequence[Consultation], cases: dict[str, SPCase],
            encode) -> list[ItemGrade]:
    """The consultations graded again by the configured grader (``grader.mode``; one that
    needs a judge role cannot be rebuilt here and is refused)."""
    g = grader_params
    setup = GradingSetup(judge=None, templates=[load_prompt(n) for n in g.prompts],
                         count_template=load_prompt(g.count_prompt), encode=encode,
                         pass_threshold=g.pass_threshold, max_candidates=g.max_candidates,
                         embedding_threshold=g.embedding_threshold)
    return build_grader(g.mode, GraderContext(g, setup)).grade(consults, cases)


def check_regrade(recorded: Sequence[dict], regraded: Sequence[ItemGrade]) -> list[str]:
    """Where a regrade of the committed consultations differs from the recorded grades:
    verdict or evidence sentence, one line per difference (empty: identical)."""
    fresh = {(g.case, g.doctor, g.category, g.item): g for g in regraded}
    out = []
    for r in recorded:
        g = fresh.get((r["case"], r["doctor"], r["category"], r["item"]))
        if g is None:
            out.append(f"{r['case']}/{r['doctor']}/{r['item']}: not regraded")
        elif bool(g.passed) != bool(r["passed"]) or (r["passed"]
                                                    and g.evidence != r.get("evidence")):
            out.append(f"{r['case']}/{r['doctor']}/{r['item']}: recorded {r['passed']} "
                       f"{r.get('evidence')!r}, regraded {g.passed} {g.evidence!r}")
    return out


def _shared(item: str, sentence: str) -> int:
    have = content_units(sentence)
    return max((len(content_units(p) & have) for p in item_parts(item)), default=0)


def _cosines(encode, sents: Sequence[str], item: str) -> np.ndarray | None:
    if encode is None or not sents:
        return None
    vecs = encode([*item_parts(item), *sents])
    k = len(item_parts(item))
    return (vecs[k:] @ vecs[:k].T).max(axis=1)


def _pair(c: Consultation, s: DoctorSentence, cat: str, item: str, credited: bool,
          cos: float | None) -> Pair:
    return Pair(c.case_id, c.doctor, c.lang, cat, item, s.turn, s.text, credited, s.echo,
                s.act, _shared(item, s.text), None if cos is None else round(float(cos), 4))


def credited_pairs(consults: Sequence[Consultation], grades: Sequence[ItemGrade],
                   echo: tuple[float, int], encode=None) -> list[Pair]:
    """One pair per credit of a model doctor: the sentence the grader credited."""
    by = {(c.case_id, c.doctor): c for c in consults if c.kind == MODEL_KIND}
    out = []
    for g in grades:
        c = by.get((g.case, g.doctor))
        if c is None or not g.passed:
            continue
        sents = doctor_sentences(c.turns, *echo)
        s = next(x for x in sents if x.turn == g.evidence_turn and x.text == g.evidence)
        cos = _cosines(encode, [s.text], g.item)
        out.append(_pair(c, s, g.category, g.item, True, None if cos is None else cos[0]))
    return out


def uncredited_candidates(consults: Sequence[Consultation], grades: Sequence[ItemGrade],
                          cases: dict[str, SPCase], echo: tuple[float, int], encode=None,
                          synonym_cosine: float = 0.45) -> tuple[list[Pair], list[tuple[str, str]]]:
    """Per uncredited item of a model doctor: its closest doctor sentence when one shares
    a content unit with the item or reaches ``synonym_cosine``; and the (doctor, category)
    of each uncredited item that had no such sentence."""
    passed = {(g.case, g.doctor, g.category, g.item) for g in grades if g.passed}
    out: list[Pair] = []
    without: list[tuple[str, str]] = []
    for c in (c for c in consults if c.kind == MODEL_KIND):
        sents = doctor_sentences(c.turns, *echo)
        for cat in CATEGORIES:
            for item in getattr(cases[c.case_id].checklist, cat):
                if (c.case_id, c.doctor, cat, item) in passed:
                    continue
                best = _closest(sents, item, encode, synonym_cosine)
                if best is None:
                    without.append((c.doctor, cat))
                else:
                    out.append(_pair(c, best[0], cat, item, False, best[1]))
    return out, without


def _closest(sents: Sequence[DoctorSentence], item: str, encode, synonym_cosine: float
             ) -> tuple[DoctorSentence, float | None] | None:
    """The candidate sentence closest to the item (most shared units, then cosine)."""
    cos = _cosines(encode, [s.text for s in sents], item)
    cands = [(k, _shared(item, s.text), None if cos is None else float(cos[k]))
             for k, s in enumerate(sents)]
    cands = [x for x in cands if x[1] > 0 or (x[2] is not None and x[2] >= synonym_cosine)]
    if not cands:
        return None
    k, _, c = max(cands, key=lambda x: (x[1], x[2] if x[2] is not None else -1.0))
    return sents[k], c


def sample_pairs(credited: Sequence[Pair], pool: Sequence[Pair], total: int | None,
                 seed: int, minimum: int = 400) -> list[Pair]:
    """All credited pairs and the uncredited pool, or a seeded sample of it that reaches
    ``total`` pairs; either way at least as many uncredited as credited and ``minimum``
    pairs in all, or an error."""
    want = len(pool) if total is None else total - len(credited)
    if want > len(pool) or want < len(credited) or len(credited) + want < minimum:
        raise ValueError(f"{len(credited)} credited and {len(pool)} uncredited candidates: "
                         f"cannot draw {want} uncredited (at least {len(credited)}, "
                         f"{minimum} pairs in all)")
    rng = random.Random(seed)
    return [*credited, *(pool if want == len(pool) else rng.sample(list(pool), want))]


def patient_before(turns: Sequence[Turn], index: int) -> str:
    """The patient turn just before transcript index ``index`` ('' if none)."""
    return next((t.text for t in reversed(turns[:index]) if t.role == "patient"), "")


def blind_rows(pairs: Sequence[Pair], consults: Sequence[Consultation],
               cases: dict[str, SPCase], seed: int, split_seed: int
               ) -> tuple[list[dict], list[dict]]:
    """(labeller rows, secret rows), shuffled (seeded) and numbered ``gp-0001``…"""
    by = {(c.case_id, c.doctor): c for c in consults}
    split = case_split(list(cases.values()), split_seed)
    order = list(pairs)
    random.Random(seed).shuffle(order)
    blind, secret = [], []
    for n, p in enumerate(order, 1):
        turns = by[(p.case, p.doctor)].turns
        pid = f"gp-{n:04d}"
        blind.append({"id": pid, "case": p.case, "lang": p.lang, "category": p.category,
                      "item": p.item, "chief_complaint": cases[p.case].chief_complaint,
                      "patient_before": patient_before(turns, p.turn),
                      "doctor_turn": turns[p.turn].text, "sentence": p.sentence})
        secret.append({"id": pid, "split": split[p.case], **asdict(p)})
    return blind, secret


def pool_counts(credited: Sequence[Pair], pool: Sequence[Pair], sampled: Sequence[Pair],
                without: Sequence[tuple[str, str]]) -> list[dict]:
    """Per doctor and category: credits, uncredited items with a candidate sentence
    (``pool``), how many of those were sampled, and uncredited items without one."""
    rows: dict[tuple[str, str], dict] = {}

    def row(key: tuple[str, str]) -> dict:
        return rows.setdefault(key, {"doctor": key[0], "category": key[1], "credited": 0,
                                     "pool": 0, "sampled": 0, "without_candidate": 0})
    for name, group in (("credited", credited), ("pool", pool), ("sampled", sampled)):
        for p in group:
            row((p.doctor, p.category))[name] += 1
    for key in without:
        row(key)["without_candidate"] += 1
    return sorted(rows.values(), key=lambda r: (r["doctor"], CATEGORIES.index(r["category"])))


def labelled_items(blind: Sequence[dict], secret: Sequence[dict], labels: Sequence[dict],
                   batch: str, first_id: int, source: str = "labels") -> list[SPGradedItem]:
    """The labelled pairs as hand-graded items of one batch, numbered ``g-<first_id>``…
    in the labeller's order: the excerpt is the opening complaint, the patient turn
    before the doctor turn (when it is not the complaint) and the doctor turn; the split
    is the pair's (its case's); the tag says whether the run credited it; ``pair``,
    ``doctor`` and ``turns`` say where it came from. A label missing, repeated or not a
    boolean is an error naming the line."""
    gold = _labels_by_id(labels, {b["id"] for b in blind}, source)
    by_id = {s["id"]: s for s in secret}
    out = []
    for k, b in enumerate(blind):
        turns = [Turn(role="patient", text=b["chief_complaint"])]
        if b["patient_before"] and b["patient_before"] != b["chief_complaint"]:
            turns.append(Turn(role="patient", text=b["patient_before"]))
        turns.append(Turn(role="doctor", text=b["doctor_turn"]))
        s = by_id[b["id"]]
        out.append(SPGradedItem(
            id=f"g-{first_id + k:04d}", case=b["case"], category=b["category"],
            item=b["item"], transcript=turns, passed=gold[b["id"]][0], why=gold[b["id"]][1],
            lang=b["lang"], tag="run_credited" if s["credited"] else "run_uncredited",
            batch=batch, split=s["split"], source="run", pair=b["id"], doctor=s["doctor"],
            turns=[s["turn"]]))
    return out


def _labels_by_id(labels: Sequence[dict], ids: set[str], source: str
                  ) -> dict[str, tuple[bool, str]]:
    out: dict[str, tuple[bool, str]] = {}
    for n, row in enumerate(labels, 1):
        pid = row.get("id")
        if pid not in ids or pid in out or not isinstance(row.get("gold"), bool):
            raise ContractError(source, n, "id/gold", f"{pid!r} is unknown, repeated or has "
                                f"no boolean gold ({row.get('gold')!r})")
        out[pid] = (row["gold"], str(row.get("why", "")))
    missing = sorted(ids - set(out))
    if missing:
        raise ContractError(source, None, "id", f"no label for {len(missing)} pairs "
                                                f"({missing[:5]}…)")
    return out
