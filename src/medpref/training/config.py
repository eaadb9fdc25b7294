"""The ``training`` params section (stage 05): recipes, hardware, the SFT data, the DPO runs.

A **recipe** (``training.recipes.<name>``, chosen by ``training.recipe``) says what is
trained: one :class:`~medpref.finetune.recipe.Recipe` for the SFT and one for every DPO
run, each in trl's and peft's own field names (the REM's recipe is the same type), and
how many context turns an example keeps. ``paper`` is PLPF's Appendix C setting, ``tiny``
the CPU default that trains in minutes. The **hardware** (``training.hardware``:
``configs/hardware/<name>.yaml``, its ``policy`` section) says where and how fast: its
trainer arguments are laid over the recipe's. Any recipe runs on any hardware. How many
processes (one, DDP, DeepSpeed) is an accelerate config under
``configs/hardware/accelerate/``, chosen at launch.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from medpref.finetune.hardware import Hardware, load_hardware
from medpref.finetune.recipe import Recipe, require_kind
from medpref.params import ReadBy, StrictModel
from medpref.stagekit import GuardParams

#: the dvc stages that read this section, stage 05's parts (``ReadBy`` on a field; a field
#: without one is every training run's, ``TrainingParams.READ_BY``): the SFT, each DPO run
#: (an annotation strategy's, ``training_dpo``; another's, ``training_dpo_grid``) and the
#: summary, which trains nothing and reads what names the runs and where they are
SFT = ("training_sft",)
DPO_RUNS = ("training_dpo", "training_dpo_grid")
RUNS = (*SFT, *DPO_RUNS)
ALL_PARTS = (*RUNS, "training")
#: the DPO runs (medpref.finetune.policies.dpo_runs): one per annotation strategy on the
#: pairs stage 04 writes for it under its output_dir, then ``training.dpo.runs``
STRATEGY_RUNS = ("annotation.strategies", "annotation.output_dir")


class PolicyRecipe(StrictModel):
    """What stage 05 trains: the SFT's recipe, the DPO runs' recipe (``beta`` and
    ``loss_type`` in it), and the context an example keeps."""

    sft: Recipe
    dpo: Recipe
    history_max_turns: int | None = Field(ge=1)   # context turns kept before an answer (null: all)

    @model_validator(mode="after")
    def _kinds(self) -> PolicyRecipe:
        require_kind(self.sft, "sft", dpo=False)
        require_kind(self.dpo, "dpo", dpo=True)
        return self


class RealDialogues(StrictModel):
    """A licensed set read through ``medpref.data.adapters`` (../shared/data)."""

    source: Literal["mts_dialog", "aci_bench"]
    split: str
    limit: int | None = Field(ge=1)


class SFTParams(StrictModel):
    # contract Dialogue files; a missing one is noted, skipped. The split (shared.split)
    # decides for the dialogues it lists: train is trained on, dev gives the development
    # loss, eval is never read; a file it lists none of trains whole
    dialogues: Annotated[list[str], ReadBy(reads=("shared.split",))]
    real: list[RealDialogues]          # [] on the embedded default
    # configs/prompts/<name>.yaml: the policy's system text (a DPO run's too)
    system_prompt: Annotated[str, ReadBy(DPO_RUNS)]
    max_examples: int | None = Field(ge=1)  # seeded subset of doctor-turn examples (null: all)
    # stop once the development loss has not fallen for this many epochs (the adapter of
    # the epoch with the lowest one is kept; at most the recipe's sft.num_train_epochs)
    patience: int = Field(ge=1, le=100)
    # the SFT adapter (each DPO run starts from it; the summary lists it)
    output_dir: Annotated[str, ReadBy((*DPO_RUNS, "training"))]
    # only doctor turns that pass medpref.turns.turn_quality are targets (failing ones
    # stay as context); false keeps them (it retrains SFT and what follows)
    turn_quality: bool = True




class DPOParams(StrictModel):
    #: every DPO run reads each field (none reads ``training.dpo`` whole); the summary too
    #: what names the runs and where they are
    READ_BY: ClassVar[tuple[str, ...]] = DPO_RUNS

    # the runs besides one per annotation strategy (those come from annotation.strategies,
    # first; medpref.finetune.policies.dpo_runs): run name → pairs file (contract "Labeled
    # preference pair"), e.g. the Table 3 grid cells; dvc.yaml's training_dpo_grid reads it
    runs: Annotated[dict[str, str], ReadBy((*DPO_RUNS, "training"), reads=STRATEGY_RUNS)]
    min_pairs: int = Field(ge=1)           # fewer pairs: the run is skipped, with its reason
    max_pairs: int | None = Field(ge=1)    # seeded subset (null: all)
    eval_pairs: int | None = Field(ge=1)   # reward metrics after training on the first N
    # <output_dir>/<run>/adapter
    output_dir: Annotated[str, ReadBy((*DPO_RUNS, "training"))]
    # held-out implicit reward by cross-fitting (medpref.training.heldout): k folds, each
    # scored by a policy trained on the others (0: off); for the runs named ("strategies":
    # each annotation strategy's run; null: all)
    heldout_folds: int = Field(0, ge=0, le=20)
    heldout_runs: Literal["strategies"] | list[str] | None = "strategies"

    @model_validator(mode="after")
    def _heldout_folds(self) -> DPOParams:
        if self.heldout_folds == 1:
            raise ValueError("heldout_folds: 0 (off) or at least 2 folds")
        return self




class TrainingParams(StrictModel):
    SECTION: ClassVar[str] = "training"
    READ_BY: ClassVar[tuple[str, ...]] = RUNS

    recipe: Annotated[str, ReadBy(ALL_PARTS)]      # a name in ``recipes``
    # configs/hardware/<name>.yaml (or a path to a YAML file)
    hardware: Annotated[str, ReadBy(ALL_PARTS)]
    recipes: Annotated[dict[str, PolicyRecipe], ReadBy(ALL_PARTS)]
    # shared.llm.roles entry whose model is trained
    base_role: Annotated[str, ReadBy(ALL_PARTS)]
    sft: Annotated[SFTParams, ReadBy(SFT)]
    dpo: Annotated[DPOParams, ReadBy()]            # each field says who reads it
    checkpoints_dir: str               # <dir>/<run>/checkpoint-N: where a killed run resumes
    keep_checkpoints: bool             # false: a finished run deletes its checkpoints
    reports: Annotated[str, ReadBy(ALL_PARTS)]
    # a run planned with fewer optimizer steps is flagged (logged, and in its card and
    # runs.csv), e.g. gpu hardware's 2 × 16 batch on a pairs file of 21 pairs: 1 step
    warn_below_steps: int = Field(ge=1)
    guard: GuardParams = Field(default_factory=GuardParams)

    @field_validator("recipes")
    @classmethod
    def _some_recipe(cls, value: dict[str, PolicyRecipe]) -> dict[str, PolicyRecipe]:
        if not value:
            raise ValueError("at least one recipe is needed")
        return value

    def active_recipe(self) -> PolicyRecipe:
        """``training.recipes[training.recipe]``; an unknown name is an error."""
        if self.recipe not in self.recipes:
            raise ValueError(f"training.recipe '{self.recipe}' is not in training.recipes "
                             f"(known: {sorted(self.recipes)})")
        return self.recipes[self.recipe]

    def active_hardware(self) -> Hardware:
        """``configs/hardware/<training.hardware>.yaml``, validated."""
        return load_hardware(self.hardware)
