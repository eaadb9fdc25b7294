"""Stage 05's tables rebuild from its records alone (medpref.training.outputs): the SFT
part's sources, development-loss curve and trainer log, and the summary's runs table and
policies, from hand-made records; a changed record changes the rebuilt files."""

from __future__ import annotations

import io
import json

import pandas as pd

from medpref.training.outputs import SFT_OUTPUTS, SUMMARY_OUTPUTS


def sft_records():
    """One source of 10 dialogues (8 train, 2 dev); the base model's dev loss 3.0, then
    2.5 (kept) and 2.75 after epochs 1 and 2; three trainer log entries, of which two are
    training steps (the last is the run's summary entry)."""
    return {
        "source_counts": [{"name": "dialogues.jsonl", "dialogues": 10, "note": None,
                           "targets": 40, "failing_turn_quality": 2, "kept": 38,
                           "train": 8, "dev": 2, "held_out": 0}],
        "dev_curve": [{"epoch": 0, "dev_loss": 3.0, "train_loss": None, "wall_s": None,
                       "chosen": False},
                      {"epoch": 1, "dev_loss": 2.5, "train_loss": 2.8, "wall_s": 10.0,
                       "chosen": True},
                      {"epoch": 2, "dev_loss": 2.75, "train_loss": 2.4, "wall_s": 11.0,
                       "chosen": False}],
        "train_log": [{"step": 1, "epoch": 0.5, "loss": 3.1, "learning_rate": 0.001},
                      {"step": 2, "epoch": 1.0, "loss": 2.9, "learning_rate": 0.0005},
                      {"step": 2, "train_runtime": 12.0, "train_loss": 3.0}]}


def summary_records():
    """Run a trained (18 pairs, evaluated), run b sharing a's training, run c skipped."""
    trained = {"run": "a", "control": False, "status": "trained", "pairs_file": "a.jsonl",
               "pairs_sha": "s1", "pairs": 18, "epochs": 1, "steps": 18,
               "steps_warning": None, "shares_training_of": None, "adapter_sha": "x1",
               "runtime_s": 40.5, "eval_loss": 0.58, "eval_rewards/margins": 0.25,
               "heldout": None, "role": "policy_a", "strategies": ["a"]}
    return {
        "run_rows": [trained, {**trained, "run": "b", "shares_training_of": "a",
                               "role": "policy_b"},
                     {"run": "c", "control": True, "status": "skipped",
                      "reason": "2 pairs < min_pairs 4", "pairs": 2}],
        "margin_curves": [{"run": r, "step": s, "loss": 0.7 - 0.1 * s,
                           "rewards/margins": 0.1 * s, "rewards/accuracies": 1.0}
                          for r in ("a", "b") for s in (1, 2)],
        "policy_roles": [{"role": "policy_a", "run": "a", "backend": "hf", "model": "m",
                          "adapter": "data/a/adapter"}]}


def test_the_sft_tables_are_the_records():
    built = SFT_OUTPUTS.build(sft_records(), None)
    curve = pd.read_csv(io.StringIO(built["dev_loss_csv"]))
    assert curve["dev_loss"].tolist() == [3.0, 2.5, 2.75]
    assert curve.loc[curve["chosen"], "epoch"].tolist() == [1]
    assert built["dev_loss_csv"].splitlines()[1] == "0,3.0,,,False"
    steps = pd.read_csv(io.StringIO(built["log_history_csv"]))
    assert steps["step"].tolist() == [1, 2] and steps["loss"].tolist() == [3.1, 2.9]
    assert json.loads(built["log_history"])[-1]["train_runtime"] == 12.0
    assert built["sources"].loc[0, "kept"] == 38


def test_the_runs_table_and_policies_come_from_the_records(tmp_path):
    built = SUMMARY_OUTPUTS.build(summary_records(), None)
    runs = built["runs"]
    assert runs["run"].tolist() == ["a", "b", "c"]
    assert runs["shares_training_of"].tolist() == ["", "a", ""]   # text columns: blank
    assert runs["reason"].tolist() == ["", "", "2 pairs < min_pairs 4"]
    assert runs.loc[0, "eval_rewards/margins"] == 0.25 and pd.isna(runs.loc[2, "eval_loss"])
    assert "strategies" not in runs.columns                      # the card's extras stay out
    assert json.loads(built["policies"]) == {"policy_a": {"run": "a", "backend": "hf",
                                                          "model": "m",
                                                          "adapter": "data/a/adapter"}}
    reports = tmp_path / "reports/05_training/summary"
    assert SUMMARY_OUTPUTS.reports_dir(tmp_path) == reports
    SUMMARY_OUTPUTS.write(reports, summary_records(), None)
    assert SUMMARY_OUTPUTS.differences(reports, None, tmp_path / "s1") == []
    path = reports / "records/run_rows.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[1]["shares_training_of"] = None                         # b now trained on its own
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert SUMMARY_OUTPUTS.differences(reports, None, tmp_path / "s2") == [
        f"{reports / 'runs.csv'}: differs from its rebuild from the records",
        f"{reports / 'runs.md'}: differs from its rebuild from the records"]


def test_a_changed_sft_record_changes_the_rebuilt_curve(tmp_path):
    reports = SFT_OUTPUTS.reports_dir(tmp_path)
    SFT_OUTPUTS.write(reports, sft_records(), None)
    assert SFT_OUTPUTS.differences(reports, None, tmp_path / "s1") == []
    path = reports / "records/dev_curve.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[2]["dev_loss"] = 2.25                                   # epoch 2 now better
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert SFT_OUTPUTS.differences(reports, None, tmp_path / "s2") == [
        f"{reports / 'dev_loss.csv'}: differs from its rebuild from the records"]


def test_run_sft_writes_its_records_and_builds_its_reports_from_them(tmp_path, monkeypatch):
    """``run_sft`` as the stage runs it, with a stand-in trainer (its curve: dev loss 3.0
    → 2.5 → 2.75, epoch 1 kept): the records hold the curve and the log, and the reports
    are the ones the records rebuild."""
    from types import SimpleNamespace

    from medpref.finetune.runs import FitResult
    from medpref.stagekit import open_stage
    from medpref.training import stage as training_stage
    from medpref.training.dialogue_sft import EpochCurve

    logs = sft_records()["train_log"]

    def fake_training(base, examples, *args, dev_examples=None, **kwargs):
        fit = FitResult(log_history=logs, steps=2, runtime_s=1.0, resumed_from=None)
        curve = EpochCurve([3.0, 2.5, 2.75], [2.8, 2.4], [10.0, 11.0], 1, len(dev_examples))
        card = {"max_epochs": 2, "epochs_run": 2, "chosen_epoch": 1,
                "dev_examples": len(dev_examples), "dev_loss": 2.5}
        return SimpleNamespace(fit=fit, curve=curve, card=card, n_examples=len(examples),
                               n_dropped=0, warning=None)

    monkeypatch.setattr(training_stage, "train_dialogue_sft", fake_training)
    stage = open_stage("05_training", "params.yaml", part="sft")
    stage.p.reports, stage.p.sft.output_dir = str(tmp_path / "reports"), str(tmp_path / "sft")
    out = training_stage.run_sft(stage)
    reports = tmp_path / "reports" / "sft"
    records = SFT_OUTPUTS.load_records(reports)
    assert [r["dev_loss"] for r in records["dev_curve"]] == [3.0, 2.5, 2.75]
    assert [r["chosen"] for r in records["dev_curve"]] == [False, True, False]
    assert len(records["train_log"]) == 3
    assert [r["name"] for r in records["source_counts"]] == out.table["name"].tolist()
    assert (reports / "dev_loss.png").exists() and (reports / "log_history.json").exists()
    assert SFT_OUTPUTS.differences(reports, stage.params, tmp_path / "rebuilt") == []
