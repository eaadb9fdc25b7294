# %% [markdown]
# # 05 · Training: SFT on dialogues, then DPO per annotation strategy (PLPF §2.4)
#
# PLPF trains in two steps: supervised fine-tuning of the base model on medical dialogues
# (loss on the doctor's turns only, as NoteChat's extrinsic use does), then Direct
# Preference Optimization (Eq. 5) from that SFT model on the preference pairs, with the SFT
# model as the reference. Both steps use LoRA (peft) and trl's `SFTTrainer`/`DPOTrainer`.
#
# This notebook runs one *part* of the stage, chosen by the `part` parameter (dvc.yaml
# passes it): `sft`, one `dpo` run (`run` = an annotation strategy, `annotation.strategies`,
# or a weighting × trajectory cell of PLPF Table 3, `training.dpo.runs`), or the `summary`.
# What a run trains is `training.recipe` (`tiny` by default, `paper` for PLPF's setting);
# where and how fast is `training.hardware` (`configs/hardware/cpu.yaml` by default: batch,
# accumulation, precision); how many processes is an accelerate config (README, *Training*).

# %% tags=["parameters"]
# papermill parameters (dvc.yaml passes part and run)
params_path = "params.yaml"
part = "sft"      # sft | dpo | summary
run = ""          # the DPO run for part dpo, a name in policies.dpo_runs

# %%
from medpref.stagekit import open_stage
from medpref.training import stage as training_stage

stage = open_stage("05_training", params_path, part=part, run=run)
print(f"part {stage.part_dir}, recipe {stage.p.recipe}, hardware {stage.p.hardware}")
stage.p.active_recipe(), stage.p.active_hardware().policy

# %% [markdown]
# ## Train (or gather)
#
# SFT reads the written split (`shared.split`): the train dialogues' doctor turns (and
# NoteChat's, and `training.sft.real`'s) are its examples, the dev dialogues' doctor turns
# its development loss, the eval dialogues nothing. After each epoch it measures the
# development loss; it stops once that has not fallen for `training.sft.patience` epochs
# (at most the SFT recipe's `num_train_epochs`) and keeps the adapter of the epoch with the
# lowest.
# A DPO run trains one per annotation strategy, plus `control_process`: a control whose
# planted pairs (the real turn that takes the history over a premature diagnosis) show
# whether the recipe can move the policy at all; the summary marks it (`control`).
#
# The progress bar below is trl's: steps done, rate and time left. A run killed midway
# resumes from its last checkpoint (`training.checkpoints_dir`) when rerun with the same
# params and data. A DPO run with fewer than `training.dpo.min_pairs` pairs is skipped,
# and its reason is written instead of an adapter. A DPO run whose training would be
# another run's (same pairs, params, SFT adapter and code) copies that run's adapter
# instead of training again (`shares_training_of` in the summary's `runs.csv`). A run
# planned with fewer than `training.warn_below_steps` optimizer steps logs a warning.

# %%
out = training_stage.run(stage)
out.metrics

# %% [markdown]
# ## This part's table
#
# `sft`: where the dialogues came from (dialogues per part of the split, targets kept).
# `dpo`: the run's card with its reward metrics on
# the training pairs after training (`eval_rewards/margins` > 0 means the policy now
# prefers the chosen answers more than the SFT reference does). `summary`: every run,
# trained or skipped and why; `policies.json` lists the trained policies as roles.

# %%
out.table

# %% [markdown]
# `sft`: the development loss per epoch (epoch 0 is the base model before training) and
# the epoch kept (`chosen`); `dpo`, `summary`: nothing here.

# %%
out.extra.get("dev_loss")

# %%
out.figure

# %%
stage.finish(out.metrics, sections=("shared",))
