# %% [markdown]
# # 06 · Held-out process compliance, and the share of turns that ask (issues 21, 31, 32)
#
# Each policy's next doctor turn on states of the split's eval dialogues (before each one's
# diagnosis), scored per rule by stage 03's REM (0-2); the difference to SFT is paired by
# state, its 95 % interval resamples dialogues, with a sign-flip p-value and the minimum
# detectable difference (`medpref.simulation.heldout`). Controls are scored on the same
# states: `control_real_turn` (the dialogue's own next turn), `control_bad_turn` (its
# diagnosis or plan moved to this early state) and the templated turns of
# `simulation.heldout.control_turns`. Each rule's pair of controls is the REM's range on
# that rule (`rem_range`, beside every row); where it does not exclude 0, the REM does not
# separate a good turn from a bad one there and no policy is ranked. All logic lives in
# `medpref.simulation.heldout_stage`.

# %% tags=["parameters"]
# papermill parameters (dvc.yaml passes none: everything comes from params.yaml)
params_path = "params.yaml"

# %%
from IPython.display import display

from medpref.simulation import heldout_stage
from medpref.stagekit import open_stage

stage = open_stage("06_heldout", params_path)
out = heldout_stage.run(stage)
held = out.heldout
print(held.note or f"{len(held.states)} states, {len(out.records['heldout_turns'])} turns")

# %% [markdown]
# ## The states, then every policy and control per rule

# %%
display(out.heldout.states)
out.heldout.table

# %% [markdown]
# ## The share of doctor turns that ask a question (issue 32)
#
# On the held-out states above and on the SP openings (each consultation's first doctor
# turn, from the records of `06_simulation.ipynb`), from turns already generated: the share
# with its Wilson interval, and each doctor against base, paired by state (resampling
# dialogues) or by case (`medpref.simulation.questions`).

# %%
out.question_share

# %% [markdown]
# ## What the run keeps: its records
#
# Every turn and score above is a per-item record under `reports/06_heldout/records/`,
# each row with its content key; the tables are built from them (and the doctors'
# consultations) alone, so `medpref tables 06_heldout` rebuilds them with no model call.
# Rows per record file:

# %%
{name: len(rows) for name, rows in out.records.items()}

# %% [markdown]
# ## Metrics, model use and provenance

# %%
stage.finish(out.metrics)
