# %% [markdown]
# # 06 · Standardized Patient test, the grading: Table 2 (PLPF §3, Eq. 6; follow-up Tables 3 and 6)
#
# The consultations `06_simulation.ipynb` recorded (`reports/06_simulation/records/`), each
# rebuilt from its record, are graded item by item against their case's checklist (Eq. 6:
# symptoms incl. history, tests, diseases; a turn naming ≥ 4 candidate diseases fails the
# disease item, and a sentence naming ≥ 4 candidates earns no item at all) by the grader
# `simulation.grader.mode` names: by default **echo-aware** — only the doctor's own
# sentences count (a sentence that repeats the patient's words earns nothing), of the act
# the category needs (asked, recommended, named), matched to the item. Judge graders
# abstain on unusable answers. No doctor model is loaded here: a change to a grader
# parameter reruns this stage alone.
#
# The controls (`simulation.controls`: the case's own script must score high; a checklist
# recital, a lecture and an echo must score low) are labelled rows of every table, and the
# stage fails, writing nothing, when one misses its gate (`simulation.controls_gate`). Every
# grader is also run on the hand-graded items (accuracy, Cohen's κ with its interval, per
# split and batch), and each model doctor's scores are read beside what a blind reader found
# earned and corrected for the grader's measured error. Beyond the paper: intervals and paired
# comparisons with the minimum detectable difference, the patient's fidelity, the doctors'
# behaviour, and `transcripts.html` for clinicians. All logic lives in
# `medpref.simulation.grading_stage`.

# %% tags=["parameters"]
# papermill parameters (dvc.yaml passes none: everything comes from params.yaml)
params_path = "params.yaml"

# %%
from IPython.display import display

from medpref.simulation import grading_stage
from medpref.stagekit import open_stage

stage = open_stage("06_sp_grading", params_path)
out = grading_stage.run(stage)
print(f"{len(out.grades)} checklist grades of {len(out.records['consultations'])} consultations")

# %% [markdown]
# ## Table 2: SP scores per department and ALL (Eq. 6, %)

# %%
out.table2

# %% [markdown]
# Each doctor's ALL score with a bootstrap 95 % interval over cases, and every doctor
# against `base` and `sft` paired by case (difference, interval, p-value, the minimum
# detectable difference, verdict):

# %%
display(out.table2_ci)
out.table2_paired

# %% [markdown]
# What a blind reader found earned, per model doctor and category: Table 2's score beside
# the read score (the share of each case's checklist a reader found earned), the credits
# read and found earned, the misses found earned, and the read score against `base`
# (docs/sp-test.md, "What a reader found, doctor by doctor"); then each score corrected for
# the grader's error measured on the run's hand-graded sentences:

# %%
display(out.table2_read)
out.table2_corrected

# %% [markdown]
# ## The instrument's range and the controls' gate
#
# Per category, `control_script` minus `control_lecture` paired by case: the widest
# difference this test shows on these cases. Beside it, each model comparison's minimum
# detectable difference: a comparison whose MDE is larger than the range could not see
# any difference between two doctors that lie between lecture and script. Then each
# control's verdict (the stage would have stopped here, writing nothing, had one failed).

# %%
display(out.table2_range)
out.controls_gate

# %%
out.per_case

# %% [markdown]
# ## The doctors' behaviour and the patient's fidelity, per doctor

# %%
display(out.doctors)
out.patient_fidelity

# %% [markdown]
# ## PLPF Table 3 / follow-up Fig. 10 and follow-up Table 6 (from the policies that exist)
#
# Table 3's `note` says how its cells were SP-tested: by default (`simulation.grid_cases: 0`)
# they are not, since each cell trains on a dozen or two pairs and the few cases a CPU run
# affords detect nothing; the table then keeps its cells, empty, with that reason.
# Beside each table, its intervals (bootstrap 95 % over cases, or items for GPD) and every
# column paired against the table's reference (the `avg` cell of the same trajectory
# length; GPT-4 ranking): difference, interval, sign-flip p-value, the minimum detectable
# difference (α .05, power .8) and the verdict (`table3_grid_ci.md`, `table6_rethinker_ci.md`).

# %%
display(out.table3_grid)
out.table3_grid_ci

# %%
display(out.table6_rethinker)
out.table6_rethinker_ci

# %% [markdown]
# ## The graders against the hand-graded items (accuracy, Cohen's κ with its interval; `dev`: where settings were chosen, `test`: reported)

# %%
out.grader_validation

# %% [markdown]
# ## What the stage keeps: its records
#
# Every grade is a per-item record under `reports/06_sp_grading/records/`
# (`medpref.simulation.grading_outputs`), each row with its content key; every table and
# `transcripts.html` are built from them and the doctors' records alone, so `medpref tables
# 06_sp_grading` rebuilds them with no model call. Rows per record file of this stage:

# %%
{name: len(out.records[name]) for name in ("grades", "grader_verdicts")}

# %% [markdown]
# ## Metrics and provenance

# %%
stage.finish(out.metrics)
