"""A stage's params keys of a section are derived from the section model's fields
(``ReadBy`` markers, ``CallSlot.read_by``): a marker decides which stages read a key, and
a marker naming no stage or no params key is an error."""

from __future__ import annotations

from typing import Annotated, ClassVar

import pytest

from medpref import REPO_ROOT, dvcgen
from medpref.dvcgen import Dep, DvcStage, Pipeline, section_params
from medpref.dvcstages import STAGES
from medpref.llm.calls import CallSlot
from medpref.params import ReadBy, StrictModel
from medpref.simulation.config import SimulationParams
from medpref.training.config import DPO_RUNS, RUNS, DPOParams, TrainingParams


class Toy(StrictModel):
    echo: int = 1
    mode: Annotated[str, ReadBy(("b",))] = "x"


class ToySection(StrictModel):
    SECTION: ClassVar[str] = "toy"
    READ_BY: ClassVar[tuple[str, ...]] = ("a",)
    CALLS: ClassVar[dict[str, CallSlot]] = {"ask": CallSlot(read_by=("b",))}
    cases: str = "c"
    scorer: Annotated[str, ReadBy(("a", "b"), reads=("rem.scorers",))] = "s"
    sub: Annotated[Toy, ReadBy(("c",))] = Toy()


def test_a_stage_reads_its_default_and_the_keys_markers_name_in_field_order():
    assert section_params(ToySection, "a") == ["rem.scorers", "toy.cases", "toy.scorer"]
    assert section_params(ToySection, "b") == ["rem.scorers", "toy.scorer", "toy.sub.mode",
                                               "toy.calls.ask"]
    assert section_params(ToySection, "c") == ["toy.sub"]
    assert section_params(ToySection, "d") == []


def test_a_marker_changes_the_params_of_exactly_the_stages_it_names(monkeypatch):
    stages = ("simulation", "next_turn", "heldout", "sp_grading")
    before = {s: section_params(SimulationParams, s) for s in stages}
    info = SimulationParams.model_fields["rounds"]
    assert "simulation.rounds" in before["simulation"]
    monkeypatch.setattr(info, "metadata", [*info.metadata, ReadBy(("simulation", "heldout"))])
    after = {s: section_params(SimulationParams, s) for s in stages}
    assert "simulation.rounds" in after["heldout"]
    assert [k for k in after["heldout"] if k != "simulation.rounds"] == before["heldout"]
    for s in ("simulation", "next_turn", "sp_grading"):
        assert after[s] == before[s]
    # a field's reads join only the stages that read it
    monkeypatch.setattr(info, "metadata", [ReadBy(("next_turn",), reads=("rem.fitted",))])
    moved = {s: section_params(SimulationParams, s) for s in stages}
    assert "simulation.rounds" not in moved["simulation"]
    assert moved["next_turn"][0] == "rem.fitted" and "simulation.rounds" in moved["next_turn"]
    assert moved["sp_grading"] == before["sp_grading"]


def test_the_simulation_stages_read_their_keys_from_the_model():
    by_name = {s.name: s for s in STAGES}
    assert section_params(SimulationParams, "sp_grading")[-1] == "simulation.calls.grader"
    nt = dvcgen.stage_params(by_name["next_turn"])
    assert "simulation.next_turn" in nt and "simulation.heldout" not in nt
    assert "training.base_role" in nt and "rem.scorers" not in nt   # no REM scorer named
    assert "rem.scorers" in dvcgen.stage_params(by_name["heldout"])


@pytest.mark.parametrize("mark, message", [
    (ReadBy(("simulaton",)), r"unknown stage\(s\) \['simulaton'\]"),
    (ReadBy(("simulation",), reads=("rem.scorer",)), "'rem.scorer', which is not a params"),
])
def test_a_marker_naming_no_stage_or_no_key_is_an_error(monkeypatch, mark, message):
    info = SimulationParams.model_fields["rounds"]
    monkeypatch.setattr(info, "metadata", [mark])
    with pytest.raises(ValueError, match=message):
        dvcgen.differences(Pipeline(header="", stages=STAGES), REPO_ROOT)


def test_a_call_slot_naming_no_stage_is_an_error(monkeypatch):
    calls = dict(SimulationParams.CALLS, gpd=CallSlot(read_by=("next_trun",)))
    monkeypatch.setattr(SimulationParams, "CALLS", calls)
    with pytest.raises(ValueError, match="simulation.calls.gpd.*next_trun"):
        dvcgen.check_marks(STAGES, dvcgen.params_tree(REPO_ROOT))


def test_a_sub_key_of_a_field_read_whole_or_a_key_typed_and_derived_is_an_error():
    class Twice(StrictModel):
        SECTION: ClassVar[str] = "toy"
        READ_BY: ClassVar[tuple[str, ...]] = ("b",)
        sub: Toy = Toy()

    with pytest.raises(ValueError, match="toy.sub.mode: ReadBy names stage 'b'"):
        section_params(Twice, "b")
    stage = DvcStage("next_turn", notebook="06_next_turn", params=["simulation.doctors"],
                     sections=[SimulationParams])
    with pytest.raises(ValueError, match=r"listed twice.*simulation.doctors"):
        dvcgen.render_stage(stage, REPO_ROOT)


# -- stage 05: the training section's markers ----------------------------------------------
PARTS = ("training_sft", "training_dpo", "training_dpo_grid", "training")


def _parts() -> dict[str, list[str]]:
    return {s: section_params(TrainingParams, s) for s in PARTS}


def test_a_training_marker_changes_the_params_of_exactly_the_stages_it_names(monkeypatch):
    before = _parts()
    key = "training.warn_below_steps"          # no marker: every run's (TrainingParams.READ_BY)
    assert [s for s in PARTS if key in before[s]] == list(RUNS)
    info = TrainingParams.model_fields["warn_below_steps"]
    monkeypatch.setattr(info, "metadata", [*info.metadata, ReadBy(("training_sft", "training"))])
    after = _parts()
    assert after["training_sft"] == before["training_sft"]
    for s in DPO_RUNS:
        assert after[s] == [k for k in before[s] if k != key]
    assert key in after["training"]
    assert [k for k in after["training"] if k != key] == before["training"]
    # a field of dpo (none reads it whole): its model's READ_BY, the DPO runs, unless marked
    sub = DPOParams.model_fields["eval_pairs"]
    monkeypatch.setattr(sub, "metadata", [*sub.metadata, ReadBy(("training_dpo",))])
    moved = _parts()
    assert "training.dpo.eval_pairs" in moved["training_dpo"]
    assert moved["training_dpo_grid"] == [k for k in after["training_dpo_grid"]
                                          if k != "training.dpo.eval_pairs"]
    assert moved["training_sft"] == after["training_sft"]
    assert moved["training"] == after["training"]


def test_the_annotation_keys_follow_the_dpo_runs_field(monkeypatch):
    reads = ["annotation.strategies", "annotation.output_dir"]
    before = _parts()
    assert [s for s in PARTS if before[s][:2] == reads] == [*DPO_RUNS, "training"]
    info = DPOParams.model_fields["runs"]
    monkeypatch.setattr(info, "metadata", [ReadBy(DPO_RUNS, reads=tuple(reads))])
    after = _parts()
    assert after["training"] == [k for k in before["training"]
                                 if k not in (*reads, "training.dpo.runs")]
    assert all(after[s] == before[s] for s in (*DPO_RUNS, "training_sft"))


def test_the_training_stages_read_their_keys_from_the_model():
    by_name = {s.name: s for s in STAGES}
    sft = dvcgen.stage_params(by_name["training_sft"])
    # the seed typed (no field brings it), the split brought by training.sft.dialogues
    assert sft[:2] == ["shared.seed", "shared.split"]
    assert "training.sft" in sft and not any(k.startswith("training.dpo") for k in sft)
    for name in DPO_RUNS:
        dpo = dvcgen.stage_params(by_name[name])
        assert "shared.seed" in dpo and "shared.split" not in dpo and "training.sft" not in dpo
        assert {"training.sft.system_prompt", "training.sft.output_dir"} <= set(dpo)
    summary = dvcgen.stage_params(by_name["training"])   # trains nothing: no seed, no guard
    assert not {"shared.seed", "training.guard", "training.checkpoints_dir"} & set(summary)
    note = Dep("training.recipe", "the notebook shows the recipe and hardware it checks")
    assert note in summary
    assert f"- {note.path}   # {note.note}" in "\n".join(
        dvcgen.render_stage(by_name["training"], REPO_ROOT))


def test_a_note_on_a_key_the_stage_is_not_given_is_an_error():
    stage = DvcStage("training", notebook="05_training", params=[], sections=[TrainingParams],
                     notes={"training.guard": "the summary reads no guard"})
    with pytest.raises(ValueError, match=r"notes on keys .*\['training.guard'\]"):
        dvcgen.stage_params(stage)
