"""Stages 03 and 04 end to end (``run(stage)`` + ``finish``) on a scripted backend.

Every role's model is a scripted backend (no model is loaded, no training step is run:
stage 03's LoRA training is replaced by a fake that writes an adapter folder with its
task card). The outputs go to temporary folders. What is checked: the stage shape (what
is written, metrics hold scores only, the guard stops a run that produced nothing), and
the wiring of the defaults (stage 04 scores with stage 03's scorer by name, every item).
"""

from __future__ import annotations

import copy
import json
import re

import pandas as pd
import pytest
import yaml

from medpref import REPO_ROOT
from medpref.contracts import UnlabeledItem, write_jsonl
from medpref.llm import session as llm_session
from medpref.llm.scripted import ScriptedBackend
from medpref.params import load_params, parse_params
from medpref.stagekit import Stage, StageFailed


def _doctor_line(messages) -> str:
    """The last doctor turn of the consultation a prompt shows."""
    lines = re.findall(r"^Doctor: (.*)$", messages[-1]["content"], re.MULTILINE)
    return lines[-1] if lines else ""


def rem_options(messages, options, prefix):
    """A REM that likes doctors who ask about fever and dislikes 'rest'."""
    line = _doctor_line(messages).lower()
    if "fever" in line:
        return {"0": 0.05, "1": 0.15, "2": 0.8}
    if "rest" in line:
        return {"0": 0.8, "1": 0.15, "2": 0.05}
    return {"0": 0.2, "1": 0.6, "2": 0.2}


def responder(req) -> str:
    system = " ".join(req.messages[0]["content"].split())
    user = req.messages[-1]["content"]
    if "follows one rule" in system:                       # REM, sampled
        return " The doctor asks.\nScore: 2" if "fever" in _doctor_line(req.messages) \
            else " It does not.\nScore: 0"
    if "plans a consultation" in system:
        return "1. Ask about fever. 2. Examine the chest. 3. Advise."
    if "checking how far" in system:
        return "Ask whether the patient has a fever."
    if "picks the reply" in system:                        # Ranker
        return "Equal"
    if "checks whether the draft replies" in system:       # Rethinker, Yes/No
        return "Yes"
    if "write one reply" in system:                        # Rethinker, c3
        return "Do you have a fever, and since when?"
    if "reviewing an online consultation" in system:       # judge
        first = user.split("Possible reply 1:")[1].split("Possible reply 2:")[0]
        return "Response 1" if "fever" in first else "Response 2"
    raise AssertionError(f"unexpected prompt: {system[:60]}")


@pytest.fixture
def scripted_models(monkeypatch):
    backends = []

    def factory(cfg, shared):
        backend = ScriptedBackend(responder, name=f"scripted{'+lora' if cfg.adapter else ''}",
                                  option_responder=rem_options)
        backends.append(backend)
        return backend

    monkeypatch.setitem(llm_session.BACKENDS, "hf", factory)
    return backends


@pytest.fixture
def raw_params(tmp_path):
    raw = copy.deepcopy(yaml.safe_load((REPO_ROOT / "params.yaml").read_text()))
    raw["shared"]["llm"]["cache_dir"] = str(tmp_path / "cache")
    raw["rem"]["train"]["adapter_dir"] = str(tmp_path / "rem_lora")
    raw["rem"]["fitted"]["model_dir"] = str(tmp_path / "rem_encoder")
    raw["rem"]["llm_eval_sets"] = ["test"]     # the LLM rows on the test split only
    raw["rem"]["independent"] = None           # its loader and tables: tests/test_rem_scorers.py
    # Eq. 4 on the paper's fixed cuts: these runs have no stage-03 dev cuts of their scripted
    # REM (reading them and gating on them: tests/test_eq4_gating.py)
    raw["annotation"]["scoring"]["met"] = "fixed"
    raw["annotation"]["rem_thresholds"] = str(tmp_path / "reports/03_rem/thresholds.csv")
    return raw


def hashed_words(texts):
    """A stand-in sentence encoder (no model loaded): hashed word counts, normalised."""
    import zlib

    import numpy as np

    out = np.zeros((len(texts), 32), dtype=np.float32)
    for i, text in enumerate(texts):
        for word in text.lower().split():
            out[i, zlib.crc32(word.encode()) % 32] += 1.0
        out[i] /= max(float(np.linalg.norm(out[i])), 1.0)
    return out


def _fake_encoder(monkeypatch):
    """The fitted scorers read the real word lists and a hashed stand-in encoder."""
    from medpref.remscore import scorers
    from medpref.remscore.features import StateFeatures

    real = scorers.state_features
    monkeypatch.setattr(scorers, "state_features",
                        lambda rem: StateFeatures(hashed_words, real(rem).load_words))


def _stage(name, raw, tmp_path, monkeypatch) -> Stage:
    monkeypatch.setattr(Stage, "data_dir", property(lambda s: tmp_path / "data" / s.name))
    monkeypatch.setattr(Stage, "reports_dir", property(lambda s: tmp_path / "reports" / s.name))
    return Stage(name=name, params=parse_params(raw))


def _fake_training(monkeypatch, tmp_path):
    from medpref.finetune.sft import TASK_CARD, TrainResult
    from medpref.rem import build_rem

    def train_rem(p, inputs, base_model, seed):
        adapter = tmp_path / "rem_lora"
        adapter.mkdir(exist_ok=True)
        (adapter / TASK_CARD).write_text(json.dumps(build_rem.rem_task_card(p)))
        return TrainResult(adapter, n_train=10, n_dropped=0, steps=2, runtime_s=0.1,
                           losses=[{"step": 1, "loss": 1.5}, {"step": 2, "loss": 1.1}])

    monkeypatch.setattr(build_rem, "train_rem", train_rem)
    _fake_encoder(monkeypatch)


def test_stage_03_runs_every_scorer_and_writes_table5(raw_params, tmp_path, monkeypatch,
                                                      scripted_models):
    from medpref.rem import stage as rem_stage

    raw_params["rem"]["eval_per_rule"] = 3
    _fake_training(monkeypatch, tmp_path)
    stage = _stage("03_rem", raw_params, tmp_path, monkeypatch)
    out = rem_stage.run(stage)
    assert list(out.table5["scorer"]) == ["sampled", "expected", "finetuned", "encoder",
                                          "encoder_blind", "majority", "length", "surface"]
    assert {"fuzzy02_%", "near_constant", "top_label_share", "never_predicted",
            "order_right_%"} <= set(out.table5.columns)
    assert out.table5["n"].tolist() == [18] * 8
    # the default REM is chosen on the dev split, where only the fitted rows ran here
    assert out.selection["chosen"].sum() == 1
    assert set(out.selection["scorer"]) == {"encoder", "encoder_blind", "majority", "length",
                                            "surface"}
    assert set(out.paired["against"]) <= {"length", "surface", "encoder_blind"}
    assert "score first" in out.table5.set_index("scorer").loc["finetuned", "method"]
    from medpref.prompts import load_prompt
    from scripted_stage import provenance_as_before

    rem_prompt = stage.params.rem.prompt     # the notebook passed its prompt by hand
    before = provenance_as_before(stage, out.models,
                                  {rem_prompt: load_prompt(rem_prompt).sha})
    stage.finish(out.metrics)
    assert json.loads((tmp_path / "reports/03_rem/provenance.json").read_text()) == before
    metrics = json.loads((tmp_path / "reports/03_rem/metrics.json").read_text())
    assert set(metrics["finetuned"]) == {"n", "exact_%", "fuzzy_%", "fuzzy02_%", "coverage_%",
                                         "mae", "top_label_share", "near_constant",
                                         "order_right_%"}
    assert metrics["dev_chosen"] == out.selection.query("chosen")["scorer"].iloc[0]
    assert "wall_s" not in json.dumps(metrics) and "runtime_s" not in json.dumps(metrics)
    assert (tmp_path / "reports/03_rem/timings.json").exists()
    assert pd.read_csv(tmp_path / "reports/03_rem/table5.csv").shape[0] == 8


def test_stage_03_writes_records_its_tables_rebuild_from(raw_params, tmp_path, monkeypatch,
                                                         scripted_models):
    """Every judgement and the loss log are keyed records; every table rebuilds from them
    alone, byte for byte; a table edited by hand is caught, and an edited record moves
    its table by the hand-computed amount."""
    from medpref.outputs import read_rows, write_rows
    from medpref.rem import stage as rem_stage
    from medpref.rem.outputs import OUTPUTS

    raw_params["rem"]["eval_per_rule"] = 3
    _fake_training(monkeypatch, tmp_path)
    stage = _stage("03_rem", raw_params, tmp_path, monkeypatch)
    out = rem_stage.run(stage)
    reports = tmp_path / "reports/03_rem"
    rows = {r.name: read_rows(r.path(reports)) for r in OUTPUTS.records}
    inputs = b03_inputs(stage)
    n_dev, n_hand = len(inputs.split("dev")), len(inputs.split("test", hand=True))
    n_turns = len(inputs.split("turns_dev"))     # the labelled turns' dev part (rem.turns)
    assert n_turns > 0
    # fitted rows: dev, turns_dev, test and the hand test rows; LLM rows: test (llm_eval_sets)
    assert len(rows["predictions"]) == 8 * 18 + 5 * (n_dev + n_turns + n_hand)
    assert len(rows["scorer_runs"]) == 8 + 5 + 5 + 5
    assert len(rows["compliance_judgements"]) == 2 * 3 * 6    # scorers × dialogues × rules
    assert [(r["step"], r["loss"]) for r in rows["training_loss"]] == [(1, 1.5), (2, 1.1)]
    for name, recs in rows.items():
        keys = [r["key"] for r in recs]
        assert all(re.fullmatch(r"[0-9a-f]{16}", k) for k in keys), name
        assert len(set(keys)) == len(keys), f"{name}: two rows share a content key"
    finetuned = [r for r in rows["predictions"] if r["scorer"] == "finetuned"]
    assert all(r["probs"] and r["model_id"].endswith("+lora") for r in finetuned)
    # the raw answers are kept; the annotations' dialogue text is not copied in
    histories = {t.text for a in b03_eval_set(stage) for t in a.history if len(t.text) > 30}
    written = (reports / "records/predictions.jsonl").read_text()
    assert histories and not any(json.dumps(t)[1:-1] in written for t in histories)
    assert (reports / "training.csv").read_text() == "step,loss\n1,1.5\n2,1.1\n"
    assert not (reports / "predictions.jsonl").exists()

    assert OUTPUTS.differences(reports, stage.params, tmp_path / "rebuilt") == []
    (reports / "table5.md").write_text((reports / "table5.md").read_text()
                                       .replace("finetuned", "fine-tuned", 1))
    assert OUTPUTS.differences(reports, stage.params, tmp_path / "rebuilt2") == [
        f"{reports / 'table5.md'}: differs from its rebuild from the records"]

    # one finetuned label that was right made wrong: its exact match drops by 100/18
    right = next(r for r in finetuned if r["label"] == r["gold"])
    right["label"] = (right["gold"] + 1) % 3
    write_rows(reports / "records/predictions.jsonl", [
        right if r["key"] == right["key"] else r for r in rows["predictions"]])
    OUTPUTS.rebuild(reports, stage.params, tmp_path / "r3")
    before = out.table5.set_index("scorer")["exact_%"]
    after = pd.read_csv(tmp_path / "r3/table5.csv").set_index("scorer")["exact_%"]
    assert after["finetuned"] == pytest.approx(before["finetuned"] - 100 / 18)
    assert after.drop("finetuned").tolist() == pytest.approx(
        before.drop("finetuned").tolist())


def b03_inputs(stage):
    from medpref.params import repo_path
    from medpref.rem.build_rem import load_inputs

    return load_inputs(stage.p, repo_path(stage.params.shared.split))


def b03_eval_set(stage):
    return b03_inputs(stage).split(stage.p.eval_split, stage.p.eval_per_rule, hand=False)


def _items(n: int) -> list[UnlabeledItem]:
    def future(tag):
        return [{"role": "patient", "text": f"{tag}: no"}, {"role": "doctor", "text": f"{tag}"},
                {"role": "patient", "text": f"{tag}: ok"}, {"role": "doctor", "text": f"{tag}"}]
    return [UnlabeledItem.model_validate({
        "id": f"u-{i}", "history": [{"role": "patient", "text": f"Cough for {i + 2} days."}],
        "candidates": [
            {"response": "Any fever with it?", "future": future("Any fever since?"),
             "source": "sampled"},
            {"response": "Just rest at home.", "future": future("Rest more."),
             "source": "generated"}]}) for i in range(n)]


def _stage04(raw, tmp_path, monkeypatch, n_items=5, rem_scorer="finetuned"):
    unlabeled = tmp_path / "unlabeled.jsonl"
    write_jsonl(unlabeled, _items(n_items))
    table5 = tmp_path / "table5.csv"
    pd.DataFrame([{"scorer": "finetuned", "exact_%": 47.7, "fuzzy_%": 90.0,
                   "fuzzy02_%": 80.0, "near_constant": False}]).to_csv(table5, index=False)
    raw["annotation"]["input"] = str(unlabeled)
    raw["annotation"]["rem_table5"] = str(table5)
    raw["annotation"]["rem_scorer"] = rem_scorer   # default: the LoRA REM's wiring
    adapter = tmp_path / "rem_lora"
    adapter.mkdir(exist_ok=True)
    (adapter / "medpref_task.json").write_text(json.dumps(
        {"answer_order": "score_first", "rule_detail": "short"}))
    return _stage("04_annotation", raw, tmp_path, monkeypatch)


def test_stage_04_scores_with_stage_03s_finetuned_rem_on_every_item(
        raw_params, tmp_path, monkeypatch, scripted_models):
    from medpref.annotation import stage as annotation_stage

    stage = _stage04(raw_params, tmp_path, monkeypatch)
    out = annotation_stage.run(stage)
    assert out.items == 5 and out.rem_row["scorer"] == "finetuned"
    rem_backends = [b for b in scripted_models if b.name == "scripted+lora"]
    assert rem_backends, "stage 04 did not load stage 03's adapter"
    # 5 items × 2 candidates × 3 states, deduplicated: the same texts give 6 states
    assert out.coverage["full_length_share"] == 1.0
    res = out.results
    assert len(res["cai_avg"].pairs) == 5 and len(res["cai_dep"].pairs) == 5
    assert all(p.chosen == "Any fever with it?" for p in res["cai_dep"].pairs)
    assert len(res["gpt4_rank"].pairs) == 5   # one order; the judge likes the fever reply
    assert list(out.summary["strategy"][:2]) == ["gpt4_rank", "gpt4_rank (both orders: ours)"]
    assert {r["step"] for r in res["agent"].records} >= {"need", "rethink", "rerank"}
    # the run wrote its records, and its tables are the ones its records rebuild
    from medpref.annotation.outputs import OUTPUTS

    records = OUTPUTS.load_records(stage.reports_dir)
    assert len(records["pairs"]) == sum(len(r.pairs) for r in res.values())
    assert len(records["decisions"]) == sum(len(r.decisions) for r in out.shown)
    assert OUTPUTS.differences(stage.reports_dir, stage.params, tmp_path / "rebuilt") == []
    from scripted_stage import provenance_as_before

    before = provenance_as_before(stage, out.models, out.prompts, ("rem",))
    stage.finish(out.metrics, sections=("rem",))
    assert json.loads((tmp_path / "reports/04_annotation/provenance.json").read_text()) == before
    metrics = json.loads((tmp_path / "reports/04_annotation/metrics.json").read_text())
    assert metrics["cai_dep"]["pairs"] == 5 and metrics["rem"]["scorer"] == "finetuned"
    assert metrics["gpt4_rank"]["pairs"] == 5 and "gpt4_rank_both_orders" in metrics
    assert "wall_s" not in json.dumps(metrics) and "model_calls" not in json.dumps(metrics)
    for name in ("gpt4_rank", "cai_avg", "cai_dep", "agent"):
        assert (tmp_path / f"data/04_annotation/pairs/{name}.jsonl").exists()
    judge = [r for b in scripted_models for r in b.requests
             if "reviewing an online consultation" in r.messages[0]["content"]]
    assert judge, "no judge request was sent"   # gpt4_rank and the agent's re-rank
    spec = raw_params["annotation"]["calls"]["judge"]
    assert {(r.params.max_new_tokens, r.prefix) for r in judge} == \
        {(spec["max_new_tokens"], spec["answer_prefix"])}


def test_stage_04_guard_fails_before_writing(raw_params, tmp_path, monkeypatch,
                                             scripted_models):
    """A REM whose score token never comes (zero option mass) scores no item: the stage
    stops with one line and writes nothing."""
    from medpref.annotation import stage as annotation_stage

    class OffFormat(ScriptedBackend):
        def option_probs(self, prompts, options, assistant_prefixes):
            return [({o: 0.0 for o in options}, 0.0) for _ in prompts]

    monkeypatch.setitem(llm_session.BACKENDS, "hf",
                        lambda cfg, shared: OffFormat(responder))
    stage = _stage04(raw_params, tmp_path, monkeypatch)
    with pytest.raises(StageFailed, match=r"stage annotation failed: 0 of 5 items the REM"):
        annotation_stage.run(stage)
    assert not (tmp_path / "data/04_annotation").exists()


def test_stage_04_needs_a_scorer_table5_evaluated(raw_params, tmp_path, monkeypatch,
                                                  scripted_models):
    from medpref.annotation import stage as annotation_stage

    raw_params["rem"]["scorers"]["zero_shot"] = {"mode": "expected", "detail": "short"}
    stage = _stage04(raw_params, tmp_path, monkeypatch, rem_scorer="zero_shot")
    with pytest.raises(ValueError, match="no row for REM scorer 'zero_shot'"):
        annotation_stage.run(stage)


# -- the notebooks themselves, cell by cell, on the scripted backends ---------------------------
def _run_notebook(name: str, **parameters) -> dict:
    """Execute a pipeline notebook's code cells in order (the parameters cell's values
    replaced), as papermill would; returns the namespace."""
    nb = json.loads((REPO_ROOT / "notebooks" / name).read_text())
    namespace: dict = {}
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        exec(compile("".join(cell["source"]), f"{name}", "exec"), namespace)
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            namespace.update(parameters)
    return namespace


def test_notebooks_03_04_and_the_grid_run_in_order(raw_params, tmp_path, monkeypatch,
                                                   scripted_models):
    raw = raw_params
    raw["rem"]["eval_per_rule"] = 1
    raw["rem"]["compliance_n"] = 1     # stage 04 scores with the default REM: encoder
    unlabeled = tmp_path / "unlabeled.jsonl"
    write_jsonl(unlabeled, _items(4))
    raw["annotation"].update(input=str(unlabeled), reports=str(tmp_path / "reports" /
                                                                "04_annotation"),
                             rem_table5=str(tmp_path / "reports" / "03_rem" / "table5.csv"))
    raw["annotation"]["grid"].update(output_dir=str(tmp_path / "data" / "grid"),
                                     reports=str(tmp_path / "reports" / "04_annotation" /
                                                 "grid"))
    params_path = tmp_path / "params.yaml"
    params_path.write_text(yaml.safe_dump(raw, sort_keys=False))
    _fake_training(monkeypatch, tmp_path)
    monkeypatch.setattr(Stage, "data_dir", property(lambda s: tmp_path / "data" / s.name))
    monkeypatch.setattr(Stage, "reports_dir", property(lambda s: tmp_path / "reports" / s.name))
    monkeypatch.setattr("matplotlib.pyplot.show", lambda *a, **k: None)

    ns = _run_notebook("03_rem.ipynb", params_path=str(params_path))
    assert set(ns["out"].table5["scorer"]) >= {"sampled", "expected", "finetuned", "encoder"}
    ns = _run_notebook("04_annotation.ipynb", params_path=str(params_path))
    assert ns["out"].items == 4 and ns["out"].rem_row["scorer"] == "encoder"
    for w in ("avg", "dep"):
        for n in (1, 2, 3):
            cell = _run_notebook("04_annotation_grid.ipynb", params_path=str(params_path),
                                 weighting=w, trajectory=n)
            assert cell["out"].row["items"] == 4
    ns = _run_notebook("04_annotation_grid_table.ipynb", params_path=str(params_path))
    table = ns["out"].table
    assert len(table) == 6 and table["model_calls"].sum() == 0  # cells hit the cache
    from medpref.annotation.grid_outputs import OUTPUTS as GRID

    reports = tmp_path / "reports/04_annotation/grid_table"
    assert len(GRID.load_records(reports)["decisions"]) == 6 * 4
    assert GRID.differences(reports, load_params(params_path), tmp_path / "rebuilt") == []
    assert (tmp_path / "reports/04_annotation/grid_table/metrics.json").exists()
