# %% [markdown]
# # 04 · Annotation grid: the table
#
# Gathers the cells of `annotation_grid` (weighting {avg, dep} × trajectory length {1, 2, 3},
# PLPF Table 3 / the follow-up's Fig. 10) into one table and figure. These are
# annotation-level numbers (pairs kept, ties, which source wins, model use); the
# downstream effect on a trained policy is measured by training on each cell's pairs.

# %% tags=["parameters"]
params_path = "params.yaml"

# %%
from medpref.params import load_params, repo_path
from medpref.annotation import grid
from medpref.reports import save_figure, write_table

params = load_params(repo_path(params_path))
p = params.annotation
table = grid.grid_table(p)
write_table(table, repo_path(p.reports) / "grid_table")
table

# %% [markdown]
# Fig. 10's layout: CAI cells as lines over trajectory length; gpt4_rank and agent (no trajectory) as dashed references from the main stage.

# %%
import pandas as pd
references = grid.reference_rows(pd.read_csv(repo_path(p.reports) / "summary.csv"))
fig = grid.plot_grid(table, references)
save_figure(fig, repo_path(p.reports) / "grid.png")
