# %% [markdown]
# # 09 · Paper tables: every artefact the pipeline makes, in the papers' layout
#
# Each table puts **our** rows (read from the CSV a stage wrote — nothing is typed by hand)
# beside the paper's **published** rows, labelled as the paper's, under the paper's own
# headers. Which stage file feeds which artefact, and the published numbers, are data:
# `configs/paper_tables.yaml`. Tables are written as CSV, Markdown and a LaTeX fragment under
# `reports/09_tables/paper/`, figures as PNG (and PDF where the stage wrote one), and
# `reports/index.md` lists every stage's artefacts with their provenance. The `paper/` folder
# is rebuilt from the stages' files alone: `medpref tables` rebuilds it after the stages it
# reads (and `--check` compares it, file by file, with what is committed).
#
# Our rows come from whatever backend each stage's roles used — the embedded SmolLM2-135M
# by default (see each stage's `provenance.json`, listed in the index): on the embedded
# default they show the machinery, not the papers' model quality.

# %% tags=["parameters"]
params_path = "params.yaml"

# %%
from medpref.papertables import stage as tables_stage
from medpref.stagekit import open_stage

stage = open_stage("09_tables", params_path)
out = tables_stage.run(stage)
out.status[["paper", "artefact", "stage", "status"]]

# %% [markdown]
# ## The tables, ours beside the paper's

# %%
from IPython.display import Markdown, display

for artefact_id in out.built:
    display(Markdown((stage.reports_dir / "paper" / f"{artefact_id}.md").read_text()))

# %% [markdown]
# ## Provenance

# %%
stage.finish(out.metrics, sections=())
