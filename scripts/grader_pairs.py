"""Blinded (doctor sentence, checklist item) pairs from stage 06's committed records (the
doctors' consultations and the grading stage's grades).

The pairs are the run's credits and near misses as ``grades.jsonl`` records them. The
committed consultations of the model doctors are also regraded with the configured grader
(echo_aware: MiniLM only, no model call) and every grade that differs from the record is
printed (``--strict`` stops there: batch run-06c7d04 was drawn at f6e5d5a, when the
regrade and the record agreed on every verdict and evidence sentence). It writes
(``medpref.simulation.runpairs``):

- ``OUT/grader_pairs.jsonl``: one row per pair for a blind labeller (no verdict, no doctor);
- ``OUT/grader_pairs_SECRET.jsonl``: the same ids with doctor, split, credited-or-not and
  what the grader read of the sentence (echo, act, shared units, cosine);
- ``OUT/grader_pairs_SECRET_pool.csv``: per doctor and category, credits, uncredited items with
  a candidate sentence, how many were sampled, and those without a candidate.

    python scripts/grader_pairs.py --out /work/labels            # ~2 min on 2 cores

When a blind labeller has written ``OUT/grader_pairs_labels.jsonl`` (``{"id", "gold",
"why"}`` by docs/sp_grading_rubric.md), ``--fold`` appends the labelled pairs to
``simulation.grader.graded_items`` as one batch (``runpairs.labelled_items``):

    python scripts/grader_pairs.py --out /work/labels --fold --batch run-06c7d04

The split is by case, with the seed of the 2026-11-27 batch (``--split-seed 31``), so a
case sits in the same half in every batch.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from medpref.contracts import SPCase, SPGradedItem, read_jsonl
from medpref.embedding import load_encoder, memoized
from medpref.params import load_params, repo_path
from medpref.simulation import runpairs
from medpref.simulation.consult import Consultation
from medpref.simulation.grading import ItemGrade
from medpref.simulation.outputs import GRADE_FIELDS

RECORDS = "reports/06_simulation/records"           # the doctors' consultations
GRADES = "reports/06_sp_grading/records/grades.jsonl"  # the grading stage's grades




def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def fold(folder: Path, graded: Path, batch: str) -> None:
    """Append the labelled pairs to the hand-graded items as ``batch`` (once)."""
    have = read_jsonl(graded, SPGradedItem)
    if any(g.batch == batch for g in have):
        raise SystemExit(f"{graded}: batch '{batch}' is there already")
    labels = folder / "grader_pairs_labels.jsonl"
    items = runpairs.labelled_items(read(folder / "grader_pairs.jsonl"),
                                    read(folder / "grader_pairs_SECRET.jsonl"), read(labels),
                                    batch, len(have) + 1, str(labels))
    with graded.open("a", encoding="utf-8") as f:
        for g in items:
            f.write(json.dumps(g.model_dump(mode="json", exclude_none=True),
                               ensure_ascii=False) + "\n")
    print(f"{len(items)} items of batch '{batch}' appended to {graded}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="folder for the three files")
    ap.add_argument("--records", default=RECORDS)
    ap.add_argument("--grades", default=GRADES)
    ap.add_argument("--total", type=int, default=None,
                    help="pairs in all (default: every uncredited candidate; >= 400)")
    ap.add_argument("--seed", type=int, default=41)
    ap.add_argument("--split-seed", type=int, default=31)
    ap.add_argument("--synonym-cosine", type=float, default=0.45)
    ap.add_argument("--strict", action="store_true",
                    help="stop when a regrade differs from the recorded grades")
    ap.add_argument("--fold", action="store_true", help="append OUT's labelled pairs")
    ap.add_argument("--batch", default="run-06c7d04", help="the batch name for --fold")
    args = ap.parse_args()
    p = load_params().simulation
    if args.fold:
        fold(Path(args.out), repo_path(p.grader.graded_items), args.batch)
        return
    rec = repo_path(args.records)
    cases = {c.id: c for c in read_jsonl(repo_path(p.cases), SPCase)}
    consults = [c for c in map(Consultation.from_record, read(rec / "consultations.jsonl"))
                if c.kind == runpairs.MODEL_KIND]
    doctors = {c.doctor for c in consults}
    recorded = [g for g in read(repo_path(args.grades)) if g["doctor"] in doctors]
    encode = memoized(load_encoder(repo_path(p.embedding_model)))
    diffs = runpairs.check_regrade(recorded, runpairs.regrade(p.grader, consults, cases,
                                                              encode))
    print(f"the grader as it stands differs from the run's record on {len(diffs)} grades"
          + "".join(f"\n  {d}" for d in diffs))
    if diffs and args.strict:
        raise SystemExit("--strict: the pairs are the run's credits as recorded")
    grades = [ItemGrade(**{k: r[k] for k in GRADE_FIELDS if k in r}) for r in recorded]
    echo = (p.grader.echo_overlap, p.grader.echo_min_new)
    credited = runpairs.credited_pairs(consults, grades, echo, encode)
    pool, without = runpairs.uncredited_candidates(consults, grades, cases, echo, encode,
                                                   args.synonym_cosine)
    pairs = runpairs.sample_pairs(credited, pool, args.total, args.seed)
    blind, secret = runpairs.blind_rows(pairs, consults, cases, args.seed, args.split_seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("grader_pairs.jsonl", blind), ("grader_pairs_SECRET.jsonl", secret)):
        (out / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                                encoding="utf-8")
    counts = runpairs.pool_counts(credited, pool, pairs[len(credited):], without)
    with (out / "grader_pairs_SECRET_pool.csv").open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(counts[0]))
        w.writeheader()
        w.writerows(counts)
    splits = {s["split"] for s in secret}
    print(f"{len(credited)} credited, {len(pool)} uncredited candidates "
          f"({len(without)} uncredited items without one); {len(pairs)} pairs written; "
          + ", ".join(f"{s} {sum(r['split'] == s for r in secret)}" for s in sorted(splits)))


if __name__ == "__main__":
    main()
