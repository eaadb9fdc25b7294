# %% [markdown]
# # Grading SP checklist items by hand (interactive, not a pipeline stage)
#
# A clinician grades checklist items of stage 06's real transcripts, so the checklist
# grader's accuracy and Cohen's κ can be re-measured on their own cases. Open this notebook
# in JupyterLab after `make repro` (stage 06's records are committed, so a fresh clone has
# the last run's); it is not run by dvc.
#
# Each item is one case × doctor × checklist item, in a seeded shuffle; items already in
# `output_path` are skipped, so a session can stop and resume. The machine's verdict is
# hidden unless `show_machine` is set, so the grade is blind. **Pass** and **Fail** append
# the verdict at once to `output_path` (contract `SPGradedItem`, tagged `hand:<grader>`,
# with the "why" text); **Skip** leaves the item for a later session.
#
# The rule is the rubric in `docs/sp_grading_rubric.md` (the panel shows it in short): a
# *symptom* (history included) passes when the doctor asked about it; a *test* when the
# doctor requested or recommended it; a *disease* when the doctor named it as the patient's
# diagnosis or as one of fewer than four candidates, not in teaching text, made-up history,
# a negation or a list. The patient volunteering it, or the doctor echoing the patient's
# words, does not count. All logic lives in `medpref.simulation.handgrading`.

# %% tags=["parameters"]
# paths are relative to the repository root
transcripts_path = "reports/06_simulation/records/consultations.jsonl"
grades_path = "reports/06_sp_grading/records/grades.jsonl"
output_path = "data/hand_graded.jsonl"
grader = ""            # your name or initials: each label is tagged hand:<grader>
limit = 20             # items in this session (None: all that are left)
doctors = None         # e.g. ["policy"]; None: every doctor under test
seed = 0
show_machine = False   # show the machine's verdict beside each item (not blind)

# %%
from medpref.params import repo_path
from medpref.simulation import handgrading as hg

out_path = repo_path(output_path)
queue = hg.grading_queue(repo_path(transcripts_path), repo_path(grades_path),
                         hg.load_graded_ids(out_path), doctors=doctors, limit=limit,
                         seed=seed, reveal_machine=show_machine)
print(f"{len(queue)} item(s) to grade; labels go to {out_path}")

# %%
hg.grading_widget(queue, hg.appender(out_path, grader), show_machine=show_machine)

# %% [markdown]
# ## Agreement of the machine grades with yours (accuracy, Cohen's κ)
#
# Machine grades that abstained (no judge answer and no fallback) are counted apart, not in
# accuracy or κ. Re-run this cell after grading. To re-measure the grader in stage 06, set
# `simulation.grader.graded_items` to `output_path` in `params.yaml`.

# %%
hg.agreement(out_path, repo_path(grades_path))
