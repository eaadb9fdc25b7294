# %% [markdown]
# # 07 · imapScore: medical facts as term-value pairs, scored against human ratings
#
# imapScore (Wang et al.) distils a question into an *imap* of **Query** and **Constraint**
# term-value pairs, and each answer (the reference label and a system's response) into
# **Inform** pairs that answer the Query terms. Values of a shared term are related as
# *exact*, *belonging* (label ⊂ response), *containment* (label ⊃ response) or *unmatched*,
# and Eq. 1 sums, over shared terms, the share of label values matched plus the share of
# response values matched minus the containment penalty λ_t.
#
# The `judge` role extracts the imaps (greedy, or the paper's three samples at T = 0.9
# keeping the pairs that repeat: `imapscore.extraction`), value relations come from the
# judge, from the ontology and from both (+KG), and every metric — ROUGE-1/2/L, BLEU-4,
# BERTScore on MiniLM and the MiniLM cosine on raw texts and on imaps (+imap), and the
# imapScores — is correlated with the human scores in the layout of the paper's Table 2.
# All logic lives in `medpref.imap.stage`. Every model computation is a per-item record under
# `reports/07_imapscore/records/` (the judge's raw completions next to their parse, the value
# relations, the ontology links, the text metrics), and every table and the figure below are
# built from those records alone: `medpref tables 07_imapscore` rebuilds them with no model.

# %% tags=["parameters"]
# papermill parameters (dvc.yaml passes none: everything comes from params.yaml)
params_path = "params.yaml"

# %%
from IPython.display import Markdown, display

from medpref.imap import stage as imap_stage
from medpref.stagekit import open_stage

stage = open_stage("07_imapscore", params_path)
stage.p

# %%
out = imap_stage.run(stage)
print(f"{len(out.items)} items; imaps extracted {out.extraction_mode}")
out.human

# %% [markdown]
# ## Imaps: parse summary and one item's imaps

# %%
out.parse

# %%
out.example

# %% [markdown]
# ## Value links to the ontology

# %%
out.links.groupby('how').size()

# %% [markdown]
# ## Scores per item and correlation with human scores (Table 2's layout)

# %%
out.scores.head(6)

# %%
display(Markdown(out.caption))
out.table2

# %%
out.heatmap

# %% [markdown]
# ## Metrics, model use and provenance

# %%
stage.finish(out.metrics)
