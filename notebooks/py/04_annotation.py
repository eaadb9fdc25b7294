# %% [markdown]
# # 04 · Preference annotation: four strategies
#
# Every unlabeled item ⟨H, C1, F1, C2, F2⟩ of stage 01 (C1 sampled from a real dialogue, C2
# generated) is labeled by four strategies; each writes labeled preference pairs
# (`data/04_annotation/pairs/<strategy>.jsonl`) for DPO.
#
# | strategy | paper | how |
# |---|---|---|
# | `gpt4_rank` | follow-up, *GPT-4 Ranking* | one single-choice question per item (candidates in a seeded order), "equal" dropped (`annotation.judge.orders: one`); asking both orders and keeping only choices that survive the swap is our addition (`orders: both`), shown beside it (`report_both`) |
# | `cai_avg`, `cai_dep` | PLPF §2.3.3 (Eqs. 1-4), App. C; follow-up *CAI Ranking* | stage 03's REM (`annotation.rem_scorer`, a row of Table 5) scores every state along each trajectory against every rule; weighted (`avg`: w = 1; `dep`: Eq. 4), discounted (Eq. 1); differences below the tie threshold dropped, top-N by margin kept |
# | `agent` | follow-up, *Multiple Agent Ranking* | Planner (long-term plan → short-term objectives), Ranker (1/2/equal), Rethinker on "equal": Yes/No "is a better reply needed?", Yes → c3 ≻ c1, c3 ≻ c2; then GPT-4 Ranking re-ranks c1 vs c2 (`agent.rerank`) |
#
# The weighting × trajectory-length grid is stage `annotation_grid` (notebook
# `04_annotation_grid.ipynb`). All logic lives in `medpref.annotation` (`medpref.annotation.stage.run`)
# and `medpref.scoring`.

# %% tags=["parameters"]
params_path = "params.yaml"

# %%
import matplotlib

matplotlib.use("Agg")
from IPython.display import Image, display

from medpref.annotation import stage as annotation_stage
from medpref.stagekit import open_stage

stage = open_stage("04_annotation", params_path)
stage.p

# %%
out = annotation_stage.run(stage)

# %% [markdown]
# ## The REM that scored the states: its row of stage 03's Table 5

# %%
out.rem_row

# %% [markdown]
# ## Trajectory lengths actually scored
#
# Trajectory length L = states scored per candidate (1 = the candidate alone; Eq. 1's n = L − 1),
# the same for both candidates of an item. An item whose candidates have fewer complete future
# rounds than `annotation.cai.trajectory` − 1 is scored over fewer states and listed here.

# %%
{k: v for k, v in out.coverage.items() if k != "shortened_items"}

# %%
out.coverage["shortened_items"]

# %% [markdown]
# ## Pairs, ties and which source wins
#
# `tie_ratio` = ties / (decisive + ties); `unusable` = unparsable answers or unscored states.
# The gpt4_rank row writes pairs; the row in parentheses is the other reading, from the same
# answers, shown only. The last row is PLPF's reported sampled : generated win ratio (App. C).

# %%
out.summary

# %% [markdown]
# ### Preferences by candidate source (cf. the follow-up's Fig. 11)

# %%
display(Image(filename=str(out.figures["preferences"])))
out.preferences

# %% [markdown]
# ### CAI margins against the tie threshold, and what other thresholds would keep
#
# Read off the margins already computed (no new model call).

# %%
display(Image(filename=str(out.figures["margins"])))
out.margins

# %%
out.sweep

# %% [markdown]
# ## Unparsable answers (recorded, item skipped at that step)

# %%
out.unparsable.head(10)

# %% [markdown]
# ## One pair per strategy

# %%
print("\n".join(out.examples))

# %% [markdown]
# ## Metrics (scores only), model use, timings and provenance

# %%
stage.finish(out.metrics, sections=("rem",),
             rem_scorer=stage.p.rem_scorer)
