# %% [markdown]
# # 04 · Annotation grid: statistics per cell
#
# Gathers the cells of `annotation_grid` (weighting {avg, dep} × trajectory length {1, 2, 3}) into
# one table and figure. These are annotation statistics (pairs kept, ties, margins, which source
# wins, model use) on the axes of PLPF Table 3 / the follow-up's Fig. 10 — not those papers' SP
# scores, which need a policy trained on each cell's pairs.

# %% tags=["parameters"]
params_path = "params.yaml"

# %%
import matplotlib

matplotlib.use("Agg")
from IPython.display import Image, display

from medpref.annotation import grid
from medpref.stagekit import open_stage

stage = open_stage("04_annotation_grid_table", params_path)
out = grid.run_table(stage)
out.table

# %% [markdown]
# gpt4_rank and agent (no trajectory) are the dashed references from the main stage.

# %%
display(Image(filename=str(out.figure)))

# %%
stage.finish(out.metrics)
