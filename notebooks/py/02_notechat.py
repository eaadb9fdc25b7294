# %% [markdown]
# # 02 · NoteChat: synthetic patient–physician dialogues from clinical notes
#
# NoteChat (Wang et al.) turns a clinical note into a conversation with three modules:
#
# 1. **Planning** — the note's medical concepts (medspacy + QuickUMLS over the project's
#    lexicon; negation from ConText) are the keywords; the `planner` drafts a dialogue around
#    them and the **checklist** is the note's concepts in the order the draft mentions them.
# 2. **Role-play** — a `doctor` agent and a `patient` agent (separate prompts: the patient speaks
#    lay language and never reports results), each doctor turn steered by the next checklist
#    concepts; after every round the covered concepts leave the checklist. All notes play in
#    lock-step, so a round is one batched call per role.
# 3. **Polish** — the `rethinker` rewrites the dialogue by the paper's ten expert rules
#    (`configs/notechat/polish_rules.yaml`, our words), twice; a rewrite is kept only if it keeps
#    the speakers and the concepts.
#
# Long notes are split by SOAP part, generated per part and combined (the paper's MTS-Dialog
# procedure; our Combine is rule-based, not a prompt). Single-prompt baselines (the paper's ChatGPT / GPT-4 rows) run through the same
# backends, and everything is scored as in the paper's Table 3 (similarity, factuality,
# extractiveness, diversity) and Table 2 (statistics). Malformed model answers are repaired or
# dropped and recorded, never fatal. All logic is in `medpref.notechat.stage`.

# %% tags=["parameters"]
# papermill parameters (dvc.yaml passes none: everything comes from params.yaml)
params_path = "params.yaml"

# %%
from IPython.display import Image, Markdown, display

from medpref.notechat import stage as notechat_stage
from medpref.stagekit import open_stage

stage = open_stage("02_notechat", params_path)
stage.p

# %%
out = notechat_stage.run(stage)
print(f"{len(out.run.notes)} notes from {out.p.source}; QuickUMLS index: {out.p.index_dir()}")
out.notes_overview

# %% [markdown]
# Concepts found in the first note (ConText marks the negated ones):

# %%
out.first_note_mentions.head(20)

# %% [markdown]
# ## NoteChat: planning → role-play → polish

# %%
out.summary

# %% [markdown]
# One note's plan and the dialogue it became, and the single-prompt baselines' dialogues:

# %%
print(out.example_dialogue())

# %% [markdown]
# ## Evaluation: Table 3 (intrinsic) and Table 2 (statistics)

# %%
display(Markdown(out.table3_markdown))

# %% [markdown]
# Turn quality per dialogue (Table 3's block above is per system): turns where the speaker
# claims the other role, prompt scaffolding or checklist annotations leak in, or a
# sentence repeats (`medpref.turns.turn_quality`; no model calls).

# %%
out.turn_quality

# %% [markdown]
# The checks measured like a grader: their recall and precision against generated turns a
# reader labelled by hand (`notechat.turn_quality_labels`, scored by
# `medpref.notechat.turn_quality_validation`; `dev` turns shaped the rules, `test` turns
# only measure them).

# %%
display(Markdown(out.turn_quality_validation_markdown))

# %%
display(Markdown(out.table2_markdown))

# %% [markdown]
# Checklist coverage after each role-play round (each note thin, the mean bold):

# %%
display(Image(filename=str(out.paths['figure'])))

# %% [markdown]
# ## Malformed model answers (repaired, dropped, polish decisions)

# %%
out.events

# %% [markdown]
# ## Model calls and wall time per method and step

# %%
out.calls

# %% [markdown]
# ## Metrics, model use and provenance

# %%
stage.finish(out.metrics, quickumls_index=out.p.index_dir())
