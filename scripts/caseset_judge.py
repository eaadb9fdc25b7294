#!/usr/bin/env python
"""The control doctors on one case set, graded by a judge model instead of the rules.

``python -m medpref.simulation.casesets`` grades the controls with the configured,
model-free grader. Where that grader cannot read a case set (CSPT: Chinese checklist
sentences that a character-share match does not tie to the script's questions), the
documented path is a judge that reads meaning: the ``options`` or ``generate`` grader
(``simulation.grader.mode``) through the ``judge`` role, a served model under the paper
overlay. This plays the same controls against the same patient and grades them with that
judge, so the judge's own range shows in its control rows before it scores a doctor:
``control_script`` should reach what a reader finds the script covers, the reciter, the
lecture, the echo and the test list should stay near 0.

    # the embedded model as judge (reads English poorly and Chinese not at all)
    python scripts/caseset_judge.py --source cspt --path DIR --limit 15 --out FILE.md
    # a served model (any OpenAI-compatible server; the URL and key from the environment)
    OPENAI_BASE_URL=http://localhost:8000/v1 OPENAI_API_KEY=none \\
      python scripts/caseset_judge.py --source cspt --path DIR --limit 15 \\
        --backend openai --model MODEL --free --mode generate

``--mode options`` reads the answer's probabilities (a local model, or a server that
returns log-probabilities); ``generate`` takes the answer text (``simulation.grader.k``
votes). Answers are cached in ``--cache`` (default ``data/caseset_judge.sqlite``, ignored
by git), so a rerun costs nothing.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from medpref.embedding import load_encoder
from medpref.llm.cache import ResponseCache
from medpref.llm.session import LLMSession
from medpref.params import load_params, repo_path
from medpref.prompts import load_prompt
from medpref.simulation import casesets, controls, grading, tables
from medpref.simulation.graders import GraderContext, build_grader


def judge_grader(params, session: LLMSession, mode: str):
    """Stage 06's judge grader (``mode``) with the ``judge`` call of ``simulation``."""
    p = params.simulation
    g = p.grader.model_copy(update={"mode": mode})
    call = p.call("grader")
    setup = grading.GradingSetup(
        judge=None, templates=[load_prompt(n) for n in g.prompts],
        count_template=load_prompt(g.count_prompt), encode=None,
        pass_threshold=g.pass_threshold, max_candidates=g.max_candidates,
        embedding_threshold=g.embedding_threshold)

    def make_judge():
        return grading.Judge(session.role(call.role), call, mode=mode, k=g.k,
                             temperature=g.temperature, min_mass=g.min_mass,
                             seed=params.shared.seed)

    return build_grader(mode, GraderContext(g, setup, make_judge))


def run(args) -> str:
    params = load_params()
    p = params.simulation
    role = p.call("grader").role
    update = {k: v for k, v in (("backend", args.backend), ("model", args.model)) if v}
    if args.free:
        update["free"] = True
    if update:
        roles = params.shared.llm.roles
        roles[role] = roles[role].model_copy(update=update)
    cache = Path(args.cache)
    cache.parent.mkdir(parents=True, exist_ok=True)
    session = LLMSession("06_caseset_judge", params.shared, cache=ResponseCache(cache))
    cases = casesets.load_case_set(args.source, args.path, args.limit, args.start)
    hand = casesets.hand_coverage(casesets.coverage_files(p), cases)
    expected = controls.expected_coverage(cases, hand)
    t0 = time.perf_counter()
    inst = casesets.build_instrument(p, cases, load_encoder(repo_path(p.embedding_model)))
    inst.grader = judge_grader(params, session, args.mode)
    names = args.controls or list(controls.CONTROLS)
    per_case, _, grades = casesets.play_controls(cases, inst, names)
    table = casesets.control_table(per_case, expected)
    g = p.controls_gate
    polarity = {n: controls.CONTROLS[n].polarity for n in per_case["doctor"].unique()}
    table.attrs.update(case_set=args.source, n_cases=len(cases),
                       unmeasurable=casesets.unmeasurable(cases),
                       gate=tables.controls_gate(per_case, polarity, expected,
                                                 g.max_negative_pass, g.script_fraction),
                       seconds=time.perf_counter() - t0)
    cfg = params.shared.llm.roles[role]
    abstained = sum(x.passed is None for x in grades)
    spread = p_yes_spread(grades)
    head = (f"Judge grader `{args.mode}`, role `{role}` = {cfg.backend} `{cfg.model}`: "
            f"{len(grades)} items graded, {abstained} without a usable answer; model use "
            f"{session.ledger.totals()['total']}\n\n" + spread)
    return head + casesets.render(table)


def p_yes_spread(grades) -> str:
    """Per control and category, the judge's p(yes) over the items (min, median, max)
    against the pass threshold: whether it separates, or says the same to every item."""
    import numpy as np

    lines = []
    for doctor in dict.fromkeys(g.doctor for g in grades):
        for cat in grading.CATEGORIES:
            ps = [g.p_yes for g in grades if g.doctor == doctor and g.category == cat
                  and g.p_yes is not None]
            if ps:
                lines.append(f"- {doctor} {cat}: p(yes) min {min(ps):.3f}, median "
                             f"{float(np.median(ps)):.3f}, max {max(ps):.3f} ({len(ps)} items)")
    return ("\n".join(lines) + "\n\n") if lines else ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", required=True, choices=sorted(casesets.CASE_SETS))
    ap.add_argument("--path", default=None, help="as for medpref.simulation.casesets")
    ap.add_argument("--limit", type=int, default=15)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--controls", nargs="+", default=None, choices=sorted(controls.CONTROLS))
    ap.add_argument("--mode", default="options", choices=["options", "generate"])
    ap.add_argument("--backend", default=None, help="the judge role's backend (hf, openai)")
    ap.add_argument("--model", default=None, help="the judge role's model")
    ap.add_argument("--free", action="store_true", help="a served model that costs nothing")
    ap.add_argument("--cache", default=str(repo_path("data/caseset_judge.sqlite")))
    ap.add_argument("--out", type=Path, default=None, help="also write the table here")
    args = ap.parse_args(argv)
    text = run(args)
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
