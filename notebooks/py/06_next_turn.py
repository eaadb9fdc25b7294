# %% [markdown]
# # 06 · Next-turn evaluation on held-out dialogues (PLPF Tables 4 and 6, Fig. 4)
#
# Every model doctor under test — the base model, the SFT model and each DPO policy (base +
# LoRA adapter: every stage 05 run that trained), or any configured role — writes the next
# doctor turn of items cut from held-out dialogues: by default the written split's eval
# part of the embedded dialogues, which nothing trained or tuned on
# (`simulation.next_turn`; MTS-Dialog or ACI-Bench through their adapters). Each prediction
# is scored against the dialogue's own next turn by BLEU-4, ROUGE-L P/R/F1 and length, and
# by GPT-Distance (GPD): a judge (`simulation.calls.gpd`) rates whether the prediction
# implies the reference fully, partially or not (0, 1, 2 points).
#
# Beside the paper's metrics: the share of predicted turns that ask a question, bootstrap
# 95 % intervals for GPD and ROUGE-L F1, and every doctor against SFT paired by item. First
# the GPD judge's own check: each reference turn against itself and against an unrelated
# turn; if the judge does not give the unrelated turn a worse GPD (paired interval above
# 0), GPD is not valid with this judge and no comparison is ranked by it. All logic lives in
# `medpref.simulation.nextturn_stage`.

# %% tags=["parameters"]
# papermill parameters (dvc.yaml passes none: everything comes from params.yaml)
params_path = "params.yaml"

# %%
from IPython.display import display

from medpref.simulation import nextturn_stage
from medpref.stagekit import open_stage

stage = open_stage("06_next_turn", params_path)
out = nextturn_stage.run(stage)
print(f"{len(out.records['next_turn_items'])} items, {len(out.model_ids)} doctors")

# %% [markdown]
# ## The GPD judge's check

# %%
out.gpd_check.table if out.gpd_check else None

# %% [markdown]
# ## Each doctor's next turn, and each against SFT paired by item

# %%
display(out.next_turn)
out.next_turn_paired

# %% [markdown]
# ## What the run keeps: its records
#
# Every prediction and verdict above is a per-item record under
# `reports/06_next_turn/records/`, each row with its content key; the tables are built
# from them alone, so `medpref tables 06_next_turn` rebuilds them with no model call. Rows
# per record file:

# %%
{name: len(rows) for name, rows in out.records.items()}

# %% [markdown]
# ## Metrics, model use and provenance

# %%
stage.finish(out.metrics)
