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
# procedure). Single-prompt baselines (the paper's ChatGPT / GPT-4 rows) run through the same
# backends, and everything is scored as in the paper's Table 3 (similarity, factuality,
# extractiveness, diversity) and Table 2 (statistics). Malformed model answers are repaired or
# dropped and recorded, never fatal. All logic is in `medpref.notechat`.

# %% tags=["parameters"]
# papermill parameters (dvc.yaml passes none: everything comes from params.yaml)
params_path = "params.yaml"
stage = "02_notechat"

# %%
import json

from IPython.display import Image, Markdown, display

from medpref.llm import LLMSession
from medpref.notechat import evaluate
from medpref.notechat import stage as s02
from medpref.params import load_params, repo_path
from medpref.provenance import provenance, write_provenance

params = load_params(repo_path(params_path))
p = params.notechat
seed = params.shared.seed
p

# %% [markdown]
# ## Notes and their concepts

# %%
notes = s02.load_notes(p, seed)
extractor = s02.load_extractor(p)
print(f"{len(notes)} notes from {p.source}; QuickUMLS index: {p.index_dir()}")
s02.notes_overview(notes, extractor, p)

# %% [markdown]
# Concepts found in the first note (ConText marks the negated ones):

# %%
s02.mentions_frame(extractor, notes[0].note).head(20)

# %% [markdown]
# ## NoteChat: planning → role-play → polish

# %%
llm = LLMSession.for_stage(stage, params)
clients = s02.make_clients(llm, p)
templates = s02.load_templates(p)
rubric = s02.load_rubric(repo_path(p.rubric))
run = s02.StageRun(notes)
notechat = s02.run_notechat(run, clients, p, seed, extractor, templates, rubric)
s02.notechat_summary(notechat)

# %% [markdown]
# One note's plan and the dialogue it became (first 12 turns):

# %%
first = notechat[0]
print("checklist:", ", ".join(k.display() for pl in first.plays for k in pl.checklist.initial))
print("coverage by round:", [round(c, 2) for c in first.coverage_curve()], "\n")
for t in first.turns[:12]:
    print(f"{t.role:>8}: {t.text}")

# %% [markdown]
# ## Single-prompt baselines

# %%
baselines = s02.run_baselines(run, clients, p, seed)
for name, results in baselines.items():
    print(f"[{name}] {results[0].note_id}")
    for t in results[0].turns[:6]:
        print(f"{t.role:>8}: {t.text}")

# %% [markdown]
# ## Evaluation: Table 3 (intrinsic) and Table 2 (statistics)

# %%
per_dialogue = evaluate.score_systems(s02.systems(run), run.notes, extractor)
stats = s02.write_outputs(run, clients, templates, per_dialogue, p)
paths = s02.output_paths(p)
display(Markdown(paths["table3"].with_suffix(".md").read_text()))

# %%
display(Markdown(paths["table2"].with_suffix(".md").read_text()))

# %% [markdown]
# Checklist coverage after each role-play round (each note thin, the mean bold):

# %%
display(Image(filename=str(paths["figure"])))

# %% [markdown]
# ## Malformed model answers (repaired, dropped, polish decisions)

# %%
s02.events_summary(s02.all_events(run))

# %% [markdown]
# ## Model calls and wall time per method and step

# %%
s02.calls_table(run)

# %% [markdown]
# ## Ledger and provenance

# %%
ledger = llm.write_ledger(paths["ledger"])
write_provenance(paths["provenance"], provenance(
    params, ("notechat",), models={name: c.model_id for name, c in clients.items()},
    prompts={**{name: t.sha for name, t in templates.items()}, "polish_rules": rubric.sha},
    seed=seed,
    quickumls_index=p.index_dir()))
llm.close()
print(json.dumps(stats, indent=2))
ledger["total"]
