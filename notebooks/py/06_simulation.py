# %% [markdown]
# # 06 · Standardized Patient test, the doctors: consultations, next turn, held-out compliance (PLPF §3, App. B; follow-up)
#
# Every doctor under test — the base model, the SFT model and each DPO policy (base + LoRA
# adapter: every stage 05 run that trained), or any configured role — talks with a
# **simulated standardized patient** for at most `simulation.rounds` rounds (PLPF: 5):
#
# * the patient (`simulation.patient.kind`) is by default **extractive**: it answers only
#   with its case's own text (the scripted answer to the closest scripted question, else a
#   history sentence, test findings only after a test request, else "I'm not sure about
#   that."; a turn that asks nothing gets a neutral sentence, never a request for a
#   diagnosis); `llm` is PLPF's retrieval-augmented patient for served models. The run
#   fails when more than 10 % of the patient's sentences are not in its case;
# * doctor and patient turns are batched across cases, round by round (lock-step);
# * beside the model doctors, **controls** (`simulation.controls`) hold consultations on
#   every case with no model call: the case's own scripted interview (must score high), a
#   recital of the whole checklist, a lecture and an echo of the patient (must score low).
#
# Then next-turn prediction on held-out dialogues (BLEU-4, ROUGE-L P/R/F1, length,
# GPT-Distance), the rule-compliance radar of each doctor's transcripts with stage 03's REM,
# and held-out process compliance. The checklist grades (Eq. 6), Table 2, the controls'
# gate and the grader's agreement with the hand-graded items are the next notebook's
# (`06_sp_grading.ipynb`, dvc stage `sp_grading`), which grades the consultations recorded
# here: a change to a grader parameter reruns only that stage. All logic lives in
# `medpref.simulation`.

# %% tags=["parameters"]
# papermill parameters (dvc.yaml passes none: everything comes from params.yaml)
params_path = "params.yaml"

# %%
from IPython.display import display

from medpref.simulation import stage as sim_stage
from medpref.stagekit import open_stage

stage = open_stage("06_simulation", params_path)
stage.p

# %%
out = sim_stage.run(stage)
print(f"{len(out.consultations)} consultations, {len(out.doctors)} doctors")
out.doctors

# %% [markdown]
# ## The SP cases against the written split (issue 31)
#
# Before any consultation, each SP case is compared with every dialogue of the split's corpus
# (`shared.split`): the MiniLM cosine of the case's complaint and diseases against the dialogue's
# complaint and diagnosis, and the specific words their disease names share. A *flagged* pair
# (the same disease and presentation) whose dialogue is in `train` stops the stage; *near* pairs
# are listed for reading (`medpref.simulation.overlap`).

# %%
out.split_overlap

# %% [markdown]
# ## One transcript (all of them, marked with their grades, in `reports/06_sp_grading/transcripts.html`)

# %%
first = out.consultations[0]
for t in first.turns:
    print(f"{t.role:>7}: {t.text}")
print("ended by:", first.ended_by)

# %% [markdown]
# ## Rule compliance of each doctor's transcripts (PLPF Fig. 3)

# %%
display(out.compliance)
out.radar

# %% [markdown]
# ## Next-turn evaluation on held-out dialogues (PLPF Tables 4 and 6, Fig. 4)
#
# The dialogues are the written split's eval part, which nothing trained or tuned on. Beside
# the paper's metrics: the share of predicted turns that ask a question, bootstrap 95 %
# intervals for GPD and ROUGE-L F1, and every doctor against SFT paired by item (GPD points per
# item, ROUGE-L F1 and BLEU-4 in points, asks-a-question in %). First the GPD judge's own check:
# each reference turn against itself and against an unrelated turn; if the judge does not give
# the unrelated turn a worse GPD (paired interval above 0), GPD is not valid with this judge and
# no comparison is ranked by it.

# %%
display(out.gpd_check.table if out.gpd_check else None)
display(out.next_turn)
out.next_turn_paired

# %% [markdown]
# ## Held-out process compliance (issues 21, 31)
#
# Each policy's next doctor turn on states of the split's eval dialogues (before each one's
# diagnosis), scored per rule by stage 03's REM (0-2); the difference to SFT is paired by state,
# its 95 % interval resamples dialogues, with a sign-flip p-value and the minimum detectable
# difference (`medpref.simulation.heldout`). Two controls are scored on the same states:
# `control_real_turn` (the dialogue's own next turn) and `control_bad_turn` (its diagnosis or
# plan moved to this early state). Their difference is the REM's range (`rem_range`, beside every
# row); where it does not exclude 0, the REM does not separate a good turn from a bad one there
# and no policy is ranked.

# %%
display(out.heldout.states)
out.heldout.table

# %% [markdown]
# ## The share of doctor turns that ask a question (issue 32)
#
# On the held-out states above and on the SP openings (each consultation's first doctor turn),
# from turns already generated: the share with its Wilson interval, and each doctor against
# base, paired by state (resampling dialogues) or by case (`medpref.simulation.questions`).

# %%
out.question_share

# %% [markdown]
# ## What the run keeps: its records
#
# Every answer above is a per-item record under `reports/06_simulation/records/`
# (`medpref.simulation.outputs`), each row with its content key; every table and the radar
# are built from them alone, so `medpref tables 06_simulation` rebuilds them with no model
# call. Rows per record file:

# %%
{name: len(rows) for name, rows in out.records.items()}

# %% [markdown]
# ## Metrics, model use and provenance

# %%
stage.finish(out.metrics)
