# %% [markdown]
# # 01 · Data sampling: the unlabeled preference set
#
# PLPF §2.3.2 and the follow-up's *Data Preparation*: every item is a dialogue history **H**
# with two candidate doctor replies and their future trajectories, ⟨H, C1, F1, C2, F2⟩.
#
# * **C1/F1, sampled** — a real (here: the embedded synthetic) dialogue cut at a random doctor turn;
#   of the embedded corpus only the `train` part of the written split (`shared.split`): no item,
#   so no preference pair and no DPO run, holds a turn of a development or evaluation dialogue;
# * **C2/F2, generated** — the `annotator` role continues the same history in the style of
#   another dialogue (a one-shot style exemplar, `configs/prompts/trajectory_continuation.yaml`).
#
# Malformed continuations are recorded in `reports/01_sampling/records/rejected.jsonl`, retried
# with another exemplar, then dropped. When too few items come out, or too many model calls
# fail (`sampling.guard`), the stage stops with one line and writes nothing. All logic lives
# in `medpref.sampling`; this notebook only calls it and shows the results. The items go to
# `data/01_sampling/unlabeled.jsonl` (stage 04 reads them); each candidate's lengths and future
# rounds are records under `reports/01_sampling/records/`, and the tables below are built from
# them alone (`medpref tables 01_sampling` rebuilds them).

# %% tags=["parameters"]
# papermill parameters (dvc.yaml passes none: everything comes from params.yaml)
params_path = "params.yaml"

# %%
from medpref.sampling import stage as sampling_stage
from medpref.stagekit import open_stage

stage = open_stage("01_sampling", params_path)
stage.p

# %% [markdown]
# ## Sample splits and predict trajectories

# %%
out = sampling_stage.run(stage)
print(f"{out.n_dialogues} source dialogues ({stage.p.source}; embedded: the split's train part), "
      f"{out.n_exemplars} style exemplars")
out.metrics

# %% [markdown]
# ## Summary: counts and lengths by candidate source

# %%
out.summary

# %% [markdown]
# ## Complete future rounds per candidate
#
# `sampling.future_rounds` rounds are asked for. Sampled futures are real (splits keep at least
# `min_future_rounds`); a generated future that the one-shot continuation leaves short is
# continued round by round by the `patient` and `doctor` roles (`sampling.rounds`). Every
# candidate that still falls short is listed below (kept, and scored over fewer states by stage 04,
# which reports it)

# %%
out.rounds

# %%
out.short

# %% [markdown]
# ## One item, as the annotation stage will see it

# %%
item = out.items[0]
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

pd.DataFrame(out.rejected, columns=["dialogue_id", "attempt", "reason", "raw"]).head(10)

# %% [markdown]
# ## Model use and provenance

# %%
stage.finish(out.metrics)
