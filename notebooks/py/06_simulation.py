# %% [markdown]
# # 06 · Standardized Patient test, the doctors: consultations (PLPF §3, App. B; follow-up)
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
# Then the rule-compliance radar of each doctor's transcripts with stage 03's REM. The
# checklist grades (Eq. 6), Table 2, the controls' gate and the grader's agreement with the
# hand-graded items are `06_sp_grading.ipynb`'s (dvc stage `sp_grading`), which grades the
# consultations recorded here: a change to a grader reruns only that stage. The next turn
# on held-out dialogues and the held-out process compliance are `06_next_turn.ipynb` and
# `06_heldout.ipynb`. All logic lives in `medpref.simulation`.

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
