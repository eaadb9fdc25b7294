"""Regenerate the stage-02 dialogues behind the newer hand labels of the turn-quality checks.

``data/embedded/turn_quality_labels.jsonl`` labels every turn of stage 02's dialogues on the
embedded notes, and (issue 31, to pass 100 turns) every turn of the dialogues that stage 02's
own generation functions make, with params.yaml's ``notechat`` settings and the embedded
model, on ``data/embedded/turn_quality_notes.jsonl`` (short synthetic notes written for this).
This script makes those dialogues again: NoteChat and both single-prompt baselines, through an
LLM response cache in the output folder (never the project's ``data/cache``), and writes
``dialogues.jsonl``, ``baseline_dialogues.jsonl`` and ``timing.json`` there.

    PYTHONPATH=src python scripts/turn_quality_dialogues.py OUT_DIR --baselines-only
    PYTHONPATH=src python scripts/turn_quality_dialogues.py OUT_DIR [--index DIR]

The labelled turns of notes ``tqn-*`` are the two single-prompt baselines' dialogues
(``--baselines-only``: 20 model calls, a few minutes on the 2-core CPU). NoteChat itself
(without the flag) makes about a hundred calls on these notes, round by round; on the
shared 2-core machine it had made 36 of them after 22 minutes and was stopped, so no
NoteChat turn of these notes is labelled yet. ``--index``: the QuickUMLS index stage
``notechat_index`` built (default: params.yaml's ``notechat.index``; NoteChat only).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from medpref.contracts import write_jsonl
from medpref.llm import LLMSession
from medpref.llm.cache import ResponseCache
from medpref.notechat import stage as nc
from medpref.notechat.dialogues import (
    StageRun,
    baseline_dialogues,
    generate_all,
    notechat_dialogues,
    run_baselines,
)
from medpref.params import load_params, repo_path

NOTES = "data/embedded/turn_quality_notes.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="output folder (the LLM cache goes there too)")
    ap.add_argument("--index", default=None, help="QuickUMLS index folder")
    ap.add_argument("--baselines-only", action="store_true",
                    help="only the single-prompt baselines (no NoteChat)")
    args = ap.parse_args()
    params = load_params(repo_path("params.yaml"))
    update = {"source": "embedded", "notes": NOTES, "n_notes": 1000, "sample": "first"}
    if args.index:
        update["index"], update["umls_index"] = args.index, None
    p = params.notechat.model_copy(update=update)
    index = repo_path(p.index_dir())
    if not args.baselines_only and not Path(index).is_dir():
        raise SystemExit(f"no QuickUMLS index at {index}: run stage notechat_index, or pass "
                         "--index")
    args.out.mkdir(parents=True, exist_ok=True)
    session = LLMSession("02_notechat", params.shared,
                         cache=ResponseCache(args.out / "cache.sqlite"))
    t0 = time.perf_counter()
    clients = nc.make_clients(session, p)
    notes = nc.load_notes(p, params.shared.seed)
    if args.baselines_only:
        run = StageRun(notes)
        run_baselines(run, clients, p, params.shared.seed)
        notechat = []
    else:
        run, templates = generate_all(notes, p, clients, params.shared.seed,
                                      nc.load_extractor(p))
        notechat = notechat_dialogues(run, clients, templates)
    baselines = baseline_dialogues(run, clients)
    if not notechat and not baselines:
        raise SystemExit("no dialogue was generated")
    write_jsonl(args.out / "dialogues.jsonl", notechat)
    write_jsonl(args.out / "baseline_dialogues.jsonl", baselines)
    (args.out / "timing.json").write_text(json.dumps(
        {"notes": [n.id for n in notes], "seconds": round(time.perf_counter() - t0, 1),
         "calls": run.log.rows()}, indent=1, default=str))
    session.close()
    print(f"{len(notechat)} NoteChat and {len(baselines)} baseline dialogues in {args.out}")


if __name__ == "__main__":
    main()
