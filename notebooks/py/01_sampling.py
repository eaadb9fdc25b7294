# %% [markdown]
# # 01 · Data sampling: the unlabeled preference set
#
# PLPF §2.3.2 and the follow-up's *Data Preparation*: every item is a dialogue history **H**
# with two candidate doctor replies and their future trajectories, ⟨H, C1, F1, C2, F2⟩.
#
# * **C1/F1, sampled** — a real (here: the embedded synthetic) dialogue cut at a random doctor turn;
# * **C2/F2, generated** — the `annotator` role continues the same history in the style of
#   another dialogue (a one-shot style exemplar, `configs/prompts/trajectory_continuation.yaml`).
#
# Malformed continuations are recorded in `reports/01_sampling/rejected.jsonl`, retried
# with another exemplar, then dropped. All logic lives in `medpref.data`; this notebook only
# calls it and shows the results.

# %% tags=["parameters"]
# papermill parameters (dvc.yaml passes none: everything comes from params.yaml)
params_path = "params.yaml"
stage = "01_sampling"

# %%
from medpref.params import load_params, repo_path
from medpref.contracts import Dialogue, UnlabeledItem, read_jsonl, write_jsonl
from medpref.data import build_unlabeled as b01
from medpref.llm import LLMSession
from medpref.provenance import provenance, write_provenance
from medpref.reports import write_metrics, write_table

params = load_params(repo_path(params_path))
p = params.sampling
p

# %% [markdown]
# ## Source dialogues and the style-exemplar pool

# %%
dialogues = b01.load_source_dialogues(p)
pool = read_jsonl(repo_path(p.exemplar_pool), Dialogue)
print(f"{len(dialogues)} source dialogues ({p.source}), {len(pool)} style exemplars")

# %% [markdown]
# ## Sample splits and predict trajectories

# %%
llm = LLMSession.for_stage(stage, params)
annotator = llm.role(p.role, max_new_tokens=p.max_new_tokens)
result = b01.build_unlabeled(p, annotator, params.shared.seed, dialogues, pool)
paths = b01.output_paths(p)
write_jsonl(paths["items"], result.items)
write_jsonl(paths["rejected"], result.rejected)
stats = b01.metrics(result, p.n_items)
write_metrics(stats, paths["metrics"])
stats

# %% [markdown]
# ## Summary: counts and lengths by candidate source

# %%
summary = b01.summarise(result, p.n_items)
write_table(summary, paths["summary"].with_suffix(""))
summary

# %% [markdown]
# ## One item, as the annotation stage will see it

# %%
item = result.items[0] if result.items else None
if item:
    for t in item.history[-4:]:
        print(f"{t.role:>8}: {t.text}")
    for c in item.candidates:
        print(f"\n[{c.source}] doctor: {c.response}")
        for t in c.future:
            print(f"{'':>10}{t.role}: {t.text}")

# %% [markdown]
# ## Malformed continuations (recorded, not fatal)

# %%
import pandas as pd
pd.DataFrame(result.rejected, columns=["dialogue_id", "attempt", "reason", "raw"]).head(10)

# %% [markdown]
# ## Model use and provenance

# %%
ledger = llm.write_ledger(paths["ledger"])
write_provenance(paths["provenance"], provenance(
    params, ("sampling",), models={p.role: annotator.model_id},
    prompts={p.prompt: result.prompt_sha}, seed=params.shared.seed))
llm.close()
ledger["total"]
