"""Stage 02's tables rebuild from its records alone (medpref.notechat.outputs): hand-made
records give hand-computed tables, and a changed record changes the rebuilt tables."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pandas as pd

from medpref.notechat import outputs
from medpref.turns.turn_quality import TABLE3_NOTE

OUT = outputs.OUTPUTS
PARAMS = SimpleNamespace(notechat=SimpleNamespace(max_rounds=3))


def _scores(system, note, rouge1, words):
    return {"system": system, "note_id": note, "rouge1": rouge1, "rouge2": 1.0,
            "rougeLsum": 2.0, "concept_p": 50.0, "concept_r": 25.0, "concept_f1": None,
            "src_rouge1": 10.0, "src_rouge2": 5.0, "src_rougeL": 8.0, "utterances": 4,
            "words": words, "medical": 2, "doctor_words_per_utt": 5.0,
            "doctor_term_density": 10.0, "patient_words_per_utt": 3.0,
            "patient_term_density": 0.0, "note_concept_recall": 50.0}


def records():
    """Two notes, one baseline, NoteChat and the human reference: NoteChat's ROUGE-1 is
    30 and 50 (mean 40), the baseline's 10 and 20; NoteChat's 8 turns have 2 leaks and
    1 repeat (5 pass); n-1's checklist is covered 0 → 50 → 100 % in two rounds, n-2 has
    no checklist."""
    systems = ("single_prompt", "NoteChat", "Human")
    rouge = {"single_prompt": (10.0, 20.0), "NoteChat": (30.0, 50.0), "Human": (100.0, 100.0)}
    turn = [{"role": "doctor", "text": "What brings you in?"},
            {"role": "patient", "text": "A cough."}]
    return {
        "dialogues": [{"system": s, "note_id": n, "turns": turn}
                      for s in systems[:2] for n in ("n-1", "n-2")],
        "scores": [_scores(s, n, rouge[s][i], 40 + 10 * i)
                   for s in systems for i, n in enumerate(("n-1", "n-2"))],
        "diversity": [{"system": s, "sbleu_all": 0.5, "sbleu_doctor": 0.25,
                       "sbleu_patient": None} for s in systems],
        "turn_flags": [{"system": "NoteChat", "note_id": "n-1", "turns": 4, "role": 0,
                        "leak": 2, "repeat": 0, "passing": 2},
                       {"system": "NoteChat", "note_id": "n-2", "turns": 4, "role": 0,
                        "leak": 0, "repeat": 1, "passing": 3},
                       {"system": "Human", "note_id": "n-1", "turns": 2, "role": 0,
                        "leak": 0, "repeat": 0, "passing": 2}],
        "coverage_curves": [{"note_id": "n-1", "checklist_size": 2, "segments": 1,
                             "curve": [0.0, 0.5, 1.0]},
                            {"note_id": "n-2", "checklist_size": 0, "segments": 1,
                             "curve": [0.0]}],
        "events": [{"method": "notechat", "role": "doctor", "action": "repaired",
                    "raw": "Doctor: hi"},
                   {"method": "single_prompt", "step": "parse", "action": "dropped",
                    "raw": "???"}],
        "call_steps": [{"method": "notechat", "step": "doctor", "batches": 2, "requests": 4,
                        "cache_hits": 1, "failures": 0, "tokens_out": 40, "model_s": 1.5,
                        "model_calls": 3, "wall_s": 1.75},
                       {"method": "notechat", "step": "patient", "batches": 2,
                        "requests": 4, "cache_hits": 0, "failures": 0, "tokens_out": 20,
                        "model_s": 0.5, "model_calls": 4, "wall_s": 0.5}],
        "method_times": [{"method": "notechat", "wall_s": 2.5}],
        "table3_notes": [{"note": "`single_prompt` is a single prompt to `m`."}]}


def test_the_tables_compute_what_the_hand_made_records_say():
    built = OUT.build(records(), PARAMS)
    t2 = built["table2"].set_index("statistic")
    assert list(t2.columns) == ["single_prompt", "NoteChat", "Human"]
    assert t2.loc["dialogues", "NoteChat"] == 2 and t2.loc["words / dialogue", "NoteChat"] == 45
    t3 = pd.read_csv(io.StringIO(built["table3_csv"])).set_index("system")
    assert t3.loc["NoteChat", "ROUGE1"] == 40.0 and t3.loc["single_prompt", "ROUGE1"] == 15.0
    assert t3.loc["NoteChat", "passing %"] == 62.5 and t3.loc["NoteChat", "leak %"] == 25.0
    assert pd.isna(t3.loc["NoteChat", "Concept-F1"])      # None on every note: no mean
    assert pd.isna(t3.loc["Human", "ROUGE1"])             # Human: extractiveness only
    md = built["table3"]
    assert md.index("| Similarity") < md.index("| Diversity") < md.index("| Turn quality")
    assert md.endswith(f"- `single_prompt` is a single prompt to `m`.\n- {TABLE3_NOTE}\n")
    calls = built["calls"].set_index(["method", "step"])
    assert calls.loc[("notechat", "total"), "model_calls"] == 7
    assert calls.loc[("notechat", "total"), "wall_s"] == 2.5
    coverage = built["coverage"]
    assert coverage["coverage"].tolist() == [0.0, 50.0, 100.0]   # n-2: no checklist
    assert built["malformed_summary"]["count"].tolist() == [1, 1]
    assert [json.loads(x)["raw"] for x in built["malformed"].splitlines()] == ["Doctor: hi",
                                                                                "???"]


def test_a_changed_record_changes_the_rebuilt_tables(tmp_path):
    reports = tmp_path / "reports/02_notechat"
    OUT.write(reports, records(), PARAMS)
    assert OUT.differences(reports, PARAMS, tmp_path / "s1") == []
    path = reports / "records/scores.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[2]["rouge1"] = 70.0                                     # NoteChat on n-1: 30 → 70
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    diffs = OUT.differences(reports, PARAMS, tmp_path / "s2")
    assert sorted(diffs) == sorted(
        f"{reports / name}: differs from its rebuild from the records"
        for name in ("table3.csv", "table3.md", "per_dialogue.csv", "per_dialogue.md"))
