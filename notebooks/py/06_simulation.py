# %% [markdown]
# # 06 · Standardized Patient test and next-turn evaluation (PLPF §3, App. B; follow-up)
#
# Every doctor under test — the base model, the SFT model and each DPO policy (base + LoRA
# adapter: every stage 05 run that trained), or any configured role — talks with a
# **simulated standardized patient** for at most `simulation.rounds` rounds (PLPF: 5):
#
# * the patient's knowledge base is its case's patient information and dialogue script, cut
#   into chunks of ≤ 128 tokens (a Han character is one token) and embedded with MiniLM;
#   each turn's query is the last two rounds and the top 4 chunks go into its prompt
#   (`configs/prompts/sp_patient.yaml`: answer only what is asked, ≤ 2 sentences, a test
#   result only once the test is recommended, never volunteer, ask about the disease when
#   the doctor asks nothing, end with the end marker);
# * doctor and patient turns are batched across cases, round by round (lock-step).
#
# Each checklist item is graded (Eq. 6: symptoms incl. history, tests, diseases; a turn
# naming ≥ 4 candidate diseases fails the disease item) by a judge role with two prompt
# orders and an embedding fallback, or — the CPU default, since the 135M judge answers "no"
# to everything — by MiniLM similarity alone (`simulation.grader.mode`). Beyond the paper, the patient's own honesty is counted (volunteered
# or unsupported sentences). Then next-turn prediction on held-out dialogues (BLEU-4,
# ROUGE-L P/R/F1, length, GPT-Distance) and the rule-compliance radar of each doctor's
# transcripts with stage 03's REM. All logic lives in `medpref.simulation`.

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
# ## Table 2: SP scores per department and ALL (Eq. 6, %)

# %%
out.table2

# %%
out.per_case

# %% [markdown]
# ## One transcript

# %%
first = out.consultations[0]
for t in first.turns:
    print(f"{t.role:>7}: {t.text}")
print("ended by:", first.ended_by)

# %% [markdown]
# ## The simulated patient's honesty (beyond the paper)

# %%
out.fidelity

# %% [markdown]
# ## Rule compliance of each doctor's transcripts (PLPF Fig. 3)

# %%
display(out.compliance)
out.radar

# %% [markdown]
# ## PLPF Table 3 / follow-up Fig. 10 and follow-up Table 6 (from the policies that exist)

# %%
out.grid

# %%
out.table6

# %% [markdown]
# ## Next-turn evaluation on held-out dialogues (PLPF Tables 4 and 6, Fig. 4)

# %%
out.next_turn

# %% [markdown]
# ## The grader against the hand-graded items (accuracy, Cohen's κ)

# %%
out.grader_validation

# %% [markdown]
# ## Held-out process compliance (issue 21)
#
# Each policy's next doctor turn on states of dialogues stage 01 never split (no preference
# pair came from them), scored per rule by stage 03's REM (0-2); the difference to SFT is
# paired by state, its 95 % interval resamples dialogues, with a sign-flip p-value and the
# minimum detectable difference (`medpref.simulation.heldout`).

# %%
display(out.heldout.states)
out.heldout.table

# %% [markdown]
# ## Metrics, model use and provenance

# %%
stage.finish(out.metrics, models=out.model_ids, prompts=out.prompts)
