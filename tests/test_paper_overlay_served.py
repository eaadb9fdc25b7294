"""The ``paper`` overlay, stage 01 to stage 09 in dvc.yaml's order, every chat role served.

One slow test chains the stages as ``dvc repro`` would (01 sampling, 02 notechat with its
QuickUMLS index, 03 rem, 04 annotation, 05 training: SFT, ONE DPO run (``cai_dep``; the
tiny model's gibberish makes no preference pair, so it is skipped with its reason, and the
SP test has the base and SFT policies) and the summary, 06 simulation, 07 imapScore (its
guard stops it on gibberish: asserted, and stage 09 lists its artefacts "not made"), 08
MedicineQA, 09 paper tables), each stage reading what the stage before it wrote in this
test, all under ``tmp_path`` (DVC itself is not run: each stage's ``run(stage)`` +
``stage.finish(...)``, as the notebooks call them).

The params are ``params.yaml`` + ``configs/overlays/paper.yaml`` (what ``medpref run
--overlay paper`` gives), then only :data:`SIZE_AND_HARDWARE` (items, cases, notes,
pairs, steps, token budgets, CPU), :data:`SERVER_LIMITS` (what ``transformers serve``
cannot do: it returns no log-probs, answers 422 to loop controls) and the wiring (output
folders under ``tmp_path``; the server; the user-supplied model folders). Every role the
overlay puts on ``openai`` (annotator, judge, patient, planner, ranker, rethinker,
doctor) is served by ``transformers serve`` on 127.0.0.1; the roles it keeps local stay
``hf``: ``policy`` (the overlay's user-supplied ``models/policy-base``) and ``rem``
(fine-tuned in stage 03, read by stages 04 and 06, as the overlay does).

The served model, the policy and the REM are one TINY llama (2 layers, hidden 32, random
weights, the embedded tokenizer), built here: the served 135M writes 1-2 tokens/s on 2
cores, and the local 135M REM with the overlay's 5 in-context examples took minutes for
stage 03's six evaluation items alone, far more than CI has. The REM's model is thus the
one non-size change to a local role; the 135M REM is proven by the stage tests.

What this proves: every prompt of every served role renders and reaches the server;
every answer comes back and is counted on the role's ledger with no failure; every
parser takes the tiny model's gibberish without crashing and records it (unparsable,
dropped, abstained, fallback query); every stage's outputs are there and are read by the
next; provenance names the served model. What it does not prove: that a parser reads a
well-formed answer on the served path (gibberish is never well-formed; the per-stage
tests of ``test_transformers_serve.py`` prove that with the embedded 135M), nor anything
about the numbers, which are noise.

The test prints, and collects in one dict (``CHAIN``), the calls per role per stage and
the wall time per stage.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import yaml

from conftest import serving
from medpref import REPO_ROOT
from medpref.registry import PIECES
from medpref.simulation import heldout_stage, nextturn_stage
from medpref.stagekit import Stage

pytestmark = pytest.mark.slow
pytest.importorskip("fastapi", reason="transformers serve needs fastapi (requirements.lock)")
pytest.importorskip("uvicorn", reason="transformers serve needs uvicorn (requirements.lock)")

URL_ENV, KEY_ENV = "MEDPREF_PAPER_SERVE_URL", "MEDPREF_PAPER_SERVE_KEY"

#: the paper overlay's sizes cut to a handful, on CPU (dotted keys, as `dvc exp run -S`)
SIZE_AND_HARDWARE: dict[str, object] = {
    # 01: 3 items (paper: 2,000), the paper's 3-round futures, short turns
    "sampling.n_items": 3, "sampling.calls.continuation.max_new_tokens": 24,
    "sampling.calls.patient_turn.max_new_tokens": 12,
    "sampling.calls.doctor_turn.max_new_tokens": 12,
    # 02: one note (paper: 87), two rounds, short turns
    "notechat.n_notes": 1, "notechat.max_rounds": 2, "notechat.calls.planning.max_new_tokens": 24,
    "notechat.calls.doctor_turn.max_new_tokens": 16,
    "notechat.calls.patient_turn.max_new_tokens": 16,
    "notechat.calls.polish.max_new_tokens": 24, "notechat.calls.baseline.max_new_tokens": 24,
    # 03: the REM on CPU (paper: gpu), one step, a balanced item per rule, short answers
    "rem.train.hardware": "cpu", "rem.train.recipe.max_steps": 1, "rem.eval_per_rule": 1,
    "rem.compliance_n": 1, "rem.scorers.sampled.k": 1,
    "rem.calls.score.max_new_tokens": 16,
    # 04: the paper's trajectory of 3 states, short judge and agent answers
    "annotation.calls.judge.max_new_tokens": 8, "annotation.calls.long_plan.max_new_tokens": 16,
    "annotation.calls.short_plan.max_new_tokens": 16,
    "annotation.calls.rank.max_new_tokens": 8, "annotation.calls.need.max_new_tokens": 4,
    "annotation.calls.rethink.max_new_tokens": 16,
    # 05: the paper's LoRA on CPU: one optimizer step each, short sequences
    # (the paper recipe on cpu hardware: batch 1 x 1, no checkpointing, 2 threads)
    "training.hardware": "cpu",
    "training.recipes.paper.sft.max_steps": 1, "training.recipes.paper.dpo.max_steps": 1,
    "training.recipes.paper.sft.max_length": 256, "training.recipes.paper.dpo.max_length": 256,
    "training.recipes.paper.history_max_turns": 2,
    "training.sft.max_examples": 4,
    "training.dpo.heldout_folds": 0,
    # 06: one SP case (paper: all), two rounds, one next-turn dialogue, two held-out states
    "simulation.n_cases": 1, "simulation.rounds": 2, "simulation.grid_cases": 1,
    "simulation.calls.consult.max_new_tokens": 12, "simulation.calls.grader.max_new_tokens": 4,
    "simulation.grader.bootstrap_rounds": 100, "simulation.next_turn.n_dialogues": 1,
    "simulation.calls.next_turn.max_new_tokens": 12, "simulation.heldout.n_states": 2,
    "simulation.heldout.states_per_dialogue": 2, "simulation.calls.heldout_turn.max_new_tokens": 12,
    "simulation.torch_threads": 2,
    # no control doctors: on the tiny model's gibberish the judge's verdicts on them are
    # noise and their gate would stop the chain (the controls: test_sp_controls.py)
    "simulation.controls": [],
    # 07: short imaps (the item subset: `data`, written by the test)
    "imapscore.calls.question.max_new_tokens": 16, "imapscore.calls.answer.max_new_tokens": 16,
    "imapscore.calls.relation.max_new_tokens": 4,
    # 08: 3 distilled, 2 read items (paper: 300), short answers, fewer resamples
    "medqa.n_distill_items": 3, "medqa.n_read_items": 2, "medqa.calls.distill.max_new_tokens": 16,
    "medqa.calls.distill_tools.max_new_tokens": 16, "medqa.calls.read.max_new_tokens": 16,
    "medqa.calls.read_closed_book.max_new_tokens": 16, "medqa.calls.judge.max_new_tokens": 4,
    "medqa.elo_shuffles": 50, "medqa.bootstrap": 50,
}

#: what `transformers serve` cannot do, and the stage knob that says so
SERVER_LIMITS: dict[str, object] = {
    # it returns no log-probs: the judge grades by generated answers (the paper overlay's
    # `options` grader stops the stage naming this knob; the same stop for the REM is
    # test_transformers_serve.py's probability-REM test)
    "simulation.grader.mode": "generate",
    "imapscore.relation_mode": "generate",
    # the grader's validation on the 229 hand-graded items is a long run of its own
    "simulation.grader.compare": [], "simulation.grader.graded_items": None,
}

#: every chat role the paper overlay serves
SERVED = ("annotator", "judge", "patient", "planner", "ranker", "rethinker", "doctor")

#: which served roles each stage must have asked (the stages that call none: 03, 05, 09)
EXPECTED_SERVED = {
    "01_sampling": {"annotator", "patient", "doctor"},
    "02_notechat": {"planner", "doctor", "patient", "rethinker"},
    # the Rethinker speaks on the Ranker's ties (gibberish makes none): asked in stage 02
    "04_annotation": {"judge", "planner", "ranker"},
    "06_next_turn": {"judge"},    # the GPD judge
    "06_sp_grading": {"judge"},   # the overlay's grader (simulation.grader.mode: options)
    "07_imapscore": {"judge"},
    "08_medqa": {"judge"},
}

#: stages whose guard stops them on gibberish (asserted there): a ledger, no provenance
STOPPED = {"07_imapscore"}

CHAIN: dict[str, dict] = {}   # stage → {"wall_s": ..., "roles": {role: calls + cache hits}}



@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, embedded_llm_path):
    """The tiny llama (the served model and the policy base), saved to a folder."""
    from transformers import AutoTokenizer

    from conftest import make_tiny_llama

    tok = AutoTokenizer.from_pretrained(embedded_llm_path)
    return make_tiny_llama(tmp_path_factory.mktemp("tiny") / "policy-base", tok,
                           max_positions=4096)


@pytest.fixture(scope="module")
def tiny_served(tmp_path_factory, tiny_model):
    """(base URL, model id) of ``transformers serve`` serving the tiny llama."""
    with serving(tiny_model, tmp_path_factory) as served_tiny:
        yield served_tiny


def _under(root: Path, tree):
    """Every pipeline-written path of the params (``data/0*``, ``data/cache``,
    ``reports/``) moved under ``root``; inputs (``data/embedded``, ``configs``) stay."""
    if isinstance(tree, dict):
        return {k: _under(root, v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_under(root, v) for v in tree]
    if isinstance(tree, str) and tree.startswith(("data/0", "data/cache", "reports/")):
        return str(root / tree)
    return tree


def paper_params(root: Path, served: tuple[str, str], policy_base: Path, qa_subset: Path):
    """params.yaml + the paper overlay + sizes/hardware + server limits + the wiring."""
    from medpref.overlays import apply, flatten, load_overlay
    from medpref.params import parse_params

    base = yaml.safe_load((REPO_ROOT / "params.yaml").read_text(encoding="utf-8"))
    merged = apply(base, flatten(load_overlay("paper")))
    merged = apply(merged, {**SIZE_AND_HARDWARE, **SERVER_LIMITS})
    merged = _under(root, merged)
    _, model = served
    llm = merged["shared"]["llm"]
    # the overlay's `openai` server is this one, one request at a time (the README's
    # recipe); its roles' model is the served one
    llm["servers"]["openai"] = {"base_url_env": URL_ENV, "api_key_env": KEY_ENV,
                                "max_concurrency": 1, "timeout_s": 600.0, "max_retries": 1,
                                "loop_controls": False}
    for role in llm["roles"].values():
        if role["backend"] == "openai":
            role["model"] = model
    assert set(SERVED) <= {r for r, c in llm["roles"].items() if c["backend"] == "openai"}
    # the overlay's user-supplied base policy (models/policy-base)
    llm["roles"]["policy"]["model"] = str(policy_base)
    merged["imapscore"]["data"] = str(qa_subset)
    # the REM stays local (hf) as the overlay keeps it, on the tiny llama too: the 135M REM
    # with the overlay's 5 in-context examples took minutes for stage 03's six items alone
    llm["roles"]["rem"]["model"] = str(policy_base)
    return parse_params(merged, "params.yaml + configs/overlays/paper.yaml + test overrides")


def _ledger(stage_reports: Path) -> dict:
    path = stage_reports / "ledger.json"
    return json.loads(path.read_text())["roles"] if path.exists() else {}


def _record(name: str, reports: Path, wall_s: float) -> dict:
    roles = _ledger(reports)
    CHAIN[name] = {"wall_s": round(wall_s, 1),
                   "roles": {r: t["calls"] + t["cache_hits"] for r, t in roles.items()}}
    print(f"\n[paper chain] {name}: {wall_s:.1f} s, calls per role {CHAIN[name]['roles']}",
          flush=True)
    return roles


def _check_served(name: str, reports: Path, roles: dict, model: str) -> None:
    """Each served role this stage needs was asked, with no failure, and provenance names
    the served model; every local role is hf."""
    for role in EXPECTED_SERVED.get(name, ()):
        assert roles.get(role, {}).get("calls", 0) >= 1, (name, role, roles)  # a fresh cache
    for role, tally in roles.items():
        assert tally["failures"] == 0, (name, role, tally)
    if name in STOPPED:
        return
    prov = json.loads((reports / "provenance.json").read_text())["roles"]
    for role, idents in prov.items():
        for ident in idents if isinstance(idents, list) else [idents]:
            if role in SERVED:
                assert ident == f"openai:{model}", (name, role, ident)
            else:
                assert ident.startswith("hf:"), (name, role, ident)


# -- the stages, in dvc.yaml's order: (name, its reports folder, run + finish + checks) -----

def _s01(params, root):
    from medpref.sampling import stage as s

    stage = Stage(name="01_sampling", params=params)
    out = s.run(stage)
    stage.finish(out.metrics)
    unlabeled = root / "data" / "01_sampling" / "unlabeled.jsonl"
    assert len(unlabeled.read_text().splitlines()) == out.metrics["items_written"] >= 1


def _s02(params, root):
    from medpref.notechat import stage as s
    from medpref.notechat.lexicon_index import build_index

    # its QuickUMLS index first: dvc's notechat_index stage
    build_index(REPO_ROOT / "data" / "embedded" / "lexicon", Path(params.notechat.index))
    stage = Stage(name="02_notechat", params=params)
    out = s.run(stage)
    stage.finish(out.metrics, quickumls_index=out.p.index_dir())
    assert (root / "data" / "02_notechat" / "dialogues.jsonl").exists()


def _s03(params, root):
    from medpref.rem import stage as s

    stage = Stage(name="03_rem", params=params)
    out = s.run(stage)
    stage.finish(out.metrics, rules=str(stage.p.rules), hardware=stage.p.train.hardware)
    assert (root / "data" / "03_rem" / "rem_lora" / "adapter_config.json").exists()
    assert (root / "reports" / "03_rem" / "table5.csv").exists()


def _s04(params, root):
    """Stage 01's items, stage 03's fine-tuned REM (the overlay's `finetuned` scorer)."""
    from medpref.annotation import stage as s

    stage = Stage(name="04_annotation", params=params)
    out = s.run(stage)
    stage.finish(out.metrics, sections=("rem",),
                 rem_scorer=stage.p.rem_scorer)
    for name in params.annotation.strategies:
        assert (root / "data" / "04_annotation" / "pairs" / f"{name}.jsonl").exists(), name


def _s05(part: str, run: str = ""):
    def step(params, root):
        from medpref.training import stage as s

        stage = s.open_part(Stage(name="05_training", params=params), part, run)
        out = s.run(stage)
        stage.finish(out.metrics, sections=("shared",))
        data = root / "data" / "05_training"
        if part == "sft":       # trained on stage 02's dialogues (and the embedded ones)
            assert json.loads((data / "sft" / "run.json").read_text())["status"] == "trained"
            assert (data / "sft" / "adapter" / "adapter_config.json").exists()
        elif part == "dpo":     # stage 04's pairs file read: gibberish judges, rankers and a
            # random REM give (almost) no pair, so the run is skipped, said so
            card = json.loads((data / "dpo" / run / "skipped.json").read_text())
            assert card["status"] == "skipped" and re.match(r"\d+ pairs < min_pairs",
                                                            card["reason"]), card
    return step


def _s06(params, root):
    """The base, SFT and DPO policies (hf, local) in the SP test; the judge grades."""
    from medpref.simulation import stage as s

    stage = Stage(name="06_simulation", params=params)
    out = s.run(stage)
    stage.finish(out.metrics)
    assert {"base", "sft"} <= set(out.model_ids), out.model_ids   # the DPO run: skipped
    assert (root / "reports" / "06_simulation" / "split_overlap.csv").exists()


def _s06_later(module, table):
    """One of stage 06's later stages (next turn, held-out compliance), opened as its
    notebook opens it."""
    def step(params, root):
        stage = PIECES[module.NAME](Stage(name=module.NAME, params=params))
        out = module.run(stage)
        stage.finish(out.metrics)
        assert (root / "reports" / module.NAME / f"{table}.csv").exists()

    return step


def _s06_grading(params, root):
    """The judge grades the consultations stage 06's doctors recorded (no doctor model)."""
    from medpref.simulation import grading_stage

    stage = grading_stage.open_grading(Stage(name=grading_stage.NAME, params=params))
    out = grading_stage.run(stage)
    stage.finish(out.metrics)
    assert (root / "reports" / "06_sp_grading" / "table2.csv").exists()


def _s07(params, root):
    """imapScore with its judge served: the gibberish gives no readable imap, so the
    stage's guard (the overlay's min_yield 0.5) stops it, loudly and before it writes (the
    served 135M's imaps are read in test_transformers_serve.py). Its ledger is kept for
    the calls it made."""
    from medpref.imap import stage as s
    from medpref.stagekit import StageFailed

    stage = Stage(name="07_imapscore", params=params)
    with pytest.raises(StageFailed, match=r"stage imapscore failed: 0 of \d+ readable imaps "
                                          r"produced \(min_yield 0\.5\)"):
        s.run(stage)
    stage.llm.write_ledger(stage.report("ledger.json"))
    stage.close()
    assert not (root / "reports" / "07_imapscore" / "scores.csv").exists()


def _s08(params, root):
    from medpref.medqa import stage as s

    stage = Stage(name="08_medqa", params=params)
    out = s.run(stage)
    stage.finish(out.metrics)
    assert (root / "reports" / "08_medqa" / "table2_models.csv").exists()


def _s09(params, root):
    """The paper tables, from the files the stages above wrote under ``root``."""
    from medpref.papertables import stage as s

    stage = Stage(name="09_tables", params=params)
    out = s.run(stage)
    stage.finish(out.metrics, sections=())
    made = out.status[out.status["status"] == "made"]
    assert {"notechat", "rem", "annotation", "simulation", "medqa"} <= set(made["stage"]), \
        out.status[["artefact", "status", "files"]]
    assert "imapscore" not in set(made["stage"])      # stage 07 stopped: listed "not made"
    assert (root / "reports" / "index.md").exists()


DPO_RUN = "cai_dep"    # one DPO run of the four strategies' (and no grid cell): enough here

STEPS = [("01_sampling", "01_sampling", _s01), ("02_notechat", "02_notechat", _s02),
         ("03_rem", "03_rem", _s03), ("04_annotation", "04_annotation", _s04),
         ("05_training/sft", "05_training/sft", _s05("sft")),
         (f"05_training/dpo/{DPO_RUN}", f"05_training/dpo/{DPO_RUN}", _s05("dpo", DPO_RUN)),
         ("05_training/summary", "05_training/summary", _s05("summary")),
         ("06_simulation", "06_simulation", _s06),
         ("06_next_turn", "06_next_turn", _s06_later(nextturn_stage, "next_turn")),
         ("06_heldout", "06_heldout", _s06_later(heldout_stage, "question_share")),
         ("06_sp_grading", "06_sp_grading", _s06_grading), ("07_imapscore", "07_imapscore", _s07),
         ("08_medqa", "08_medqa", _s08), ("09_tables", "09_tables", _s09)]


def redirect(monkeypatch, root: Path) -> None:
    """Every stage's own data/ and reports/ folders under ``root``, and the hand-off files
    between stages with them (``medpref.handoffs``: stage 06 reads the policies stage 05
    trained here, not the committed ones)."""
    from medpref import handoffs

    monkeypatch.setattr(Stage, "data_dir", property(lambda self: root / "data" / self.name))
    monkeypatch.setattr(Stage, "reports_dir",
                        property(lambda self: root / "reports" / self.name))
    monkeypatch.setattr(handoffs, "POLICY_ROLES", str(root / handoffs.POLICY_ROLES))


def run_chain(params, root: Path, model: str, start: int = 0) -> dict:
    t_chain = time.perf_counter()
    for name, folder, step in STEPS[start:]:
        t0 = time.perf_counter()
        step(params, root)
        reports = root / "reports" / folder
        roles = _record(name, reports, time.perf_counter() - t0)
        _check_served(name, reports, roles, model)
    CHAIN["total_wall_s"] = round(time.perf_counter() - t_chain, 1)
    print("\n[paper chain] " + json.dumps(CHAIN, indent=1), flush=True)
    return CHAIN


def test_paper_overlay_chain_on_served_roles(tmp_path, monkeypatch, tiny_model, tiny_served):
    url, model = tiny_served
    monkeypatch.setenv(URL_ENV, url)
    monkeypatch.delenv(KEY_ENV, raising=False)
    root = tmp_path / "repo"
    redirect(monkeypatch, root)
    qa = tmp_path / "qa_subset.jsonl"     # 07: one question, its three systems' answers
    rows = (REPO_ROOT / "data/embedded/qa_human_scores.jsonl").read_text().splitlines()
    qa.write_text("\n".join(rows[:3]) + "\n")
    chain = run_chain(paper_params(root, tiny_served, Path(tiny_model), qa), root, model)
    # every served role was asked somewhere in the chain
    asked = {r for stage in chain.values() if isinstance(stage, dict) for r in stage["roles"]}
    assert set(SERVED) <= asked, sorted(set(SERVED) - asked)
