# %% [markdown]
# # 04 · Annotation grid cell: weighting × trajectory length
#
# One cell of the ablation whose axes are those of PLPF Table 3 / the follow-up's Fig. 10: CAI
# ranking with `weighting` (`avg`: every w_r = 1; `dep`: Eq. 4) over trajectories of `trajectory`
# states (1 = the candidate alone). dvc.yaml's `annotation_grid` matrix stage runs this notebook
# once per cell with papermill parameters; each cell writes its pairs to
# `data/04_annotation/grid/<w>_<n>/` and its annotation statistics to
# `reports/04_annotation/grid/<w>_<n>/`. REM scores come through the shared LLM cache: states the
# main stage (or another cell) already scored are cache hits, which this cell's ledger shows.

# %% tags=["parameters"]
params_path = "params.yaml"
weighting = "dep"
trajectory = 3

# %%
from medpref.annotation import grid
from medpref.stagekit import open_stage

stage = open_stage("04_annotation_grid", params_path, weighting=weighting,
                   trajectory=trajectory)
stage.name

# %%
out = grid.run_cell(stage, weighting, trajectory)
out.row

# %%
out.coverage["shortened_items"]

# %%
stage.finish(out.metrics, sections=("rem",),
             cell={"weighting": weighting, "trajectory": trajectory})
