# %% [markdown]
# # 08 · Medication consultation with retrieval: Distill-Retrieve-Read (RagPULSE)
#
# RagPULSE answers a patient's medication question inside a consultation in three steps:
#
# 1. **Distill** — the model calls a `search_engine` tool with keywords distilled from the
#    dialogue (native function calls where the backend has them, else a written call: the
#    paper's own forms `search_engine(keywords)`, `search_engine(input="...")` and JSON are
#    read, see `medpref.medqa.toolcall`); the share of well-formed calls is the
#    *instruction-follow rate*, and a malformed call falls back to the last question;
# 2. **Retrieve** — the query is embedded (MiniLM) and matched against the medicine database,
#    a tree *medicine → "generic name + attribute" items*; hit rates HR@k at document level
#    (the generic names, as in the paper) and attribute level, beside the *History* and
#    *Last question* baselines (Table 3 layout), and over well-formed calls only;
# 3. **Read** — each model configuration answers with its evidence (or closed-book); a judge
#    compares the answers pairwise in both orders; Elo (one verdict = one game, mean over
#    shuffled orders, bootstrap CIs) and Bradley–Terry rate the configurations (Table 2 layout).
#
# All logic lives in `medpref.medqa.stage`; this notebook calls it and shows the results.

# %% tags=["parameters"]
# papermill parameters (dvc.yaml passes none: everything comes from params.yaml)
params_path = "params.yaml"

# %%
from medpref.medqa import stage as medqa_stage
from medpref.stagekit import open_stage

stage = open_stage("08_medqa", params_path)
stage.p

# %%
out = medqa_stage.run(stage)
print(f"{len(out.tree.medicines)} medicines → {len(out.tree.items)} attribute items; "
      f"{len(out.items)} questions; item vectors from cache: {out.embeddings_cached}")

# %% [markdown]
# ## Distill: one `search_engine` call per question

# %%
out.distill_summary

# %% [markdown]
# Why calls were malformed (every raw answer is in `reports/08_medqa/records/distilled.jsonl`):

# %%
out.malformed_reasons

# %% [markdown]
# ## Retrieve: HR@k at document and attribute level (Table 3 layout)
#
# A malformed call falls back to the last question, so each *Distilled* row is followed by
# the same queries over the well-formed calls only, beside the last question on the same
# questions. With the embedded database's 52 medicines, document-level HR@50 is close to 1
# for any query (the *chance* row): it is shown for the paper's layout, not as evidence.

# %%
out.table3

# %%
out.hr_figure

# %% [markdown]
# ## Read: every configuration answers the read subset

# %%
print(out.example_answers())

# %% [markdown]
# ## Battles and ratings (Elo with bootstrap CIs, Bradley–Terry)

# %%
judged = out.battles.judged
print(f"{len(judged.raw)} judge calls, {len(judged.judgements)} verdicts, "
      f"{len(judged.unparsable)} unparsable; agreement across orders: "
      f"{out.metrics['order_agreement']:.2f}")
out.ratings

# %%
out.elo_figure

# %% [markdown]
# ## The configurations side by side (Table 2 layout)

# %%
out.table2

# %% [markdown]
# ## Metrics, model use and provenance

# %%
stage.finish(out.metrics)
