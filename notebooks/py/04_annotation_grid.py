# %% [markdown]
# # 04 · Annotation grid cell: weighting × trajectory length
#
# One cell of the ablation of PLPF Table 3 / the follow-up's Fig. 10: CAI ranking with
# `weighting` (`avg`: every w_r = 1; `dep`: Eq. 4) over trajectories of `trajectory`
# states (1 = the candidate alone). dvc.yaml's `annotation_grid` matrix stage runs this
# notebook once per cell with papermill parameters; each cell writes its pairs to
# `data/04_annotation/grid/<w>_<n>/` and a summary to `reports/04_annotation/grid/<w>_<n>/`.
# REM scores come through the shared LLM cache: states the main stage (or another cell)
# already scored are cache hits, which this cell's ledger shows.

# %% tags=["parameters"]
# papermill parameters: dvc.yaml passes the cell
params_path = "params.yaml"
weighting = "dep"
trajectory = 3

# %%
from medpref.params import load_params, repo_path
from medpref.contracts import write_jsonl
from medpref.annotation import grid, run
from medpref.llm import LLMSession
from medpref.rules import load_rules
from medpref.provenance import provenance, write_provenance

params = load_params(repo_path(params_path))
p = params.annotation
grid.check_cell(p, weighting, trajectory)
stage = grid.cell_stage(weighting, trajectory)
paths = grid.cell_paths(p, weighting, trajectory)
print(stage)
p

# %%
items = run.load_items(p)
flowchart = load_rules(repo_path(p.rules))
llm = LLMSession.for_stage(stage, params)
scorer = run.build_rem_scorer(llm, p, flowchart, params.shared.seed)
scored = run.score_states(items, scorer, flowchart, trajectory)
result = run.run_cai(items, scored, flowchart, p, weighting)
print(f"{len(items)} items, {len(scored.judgements)} distinct states scored in {scored.wall_s:.0f}s")

# %%
write_jsonl(paths["pairs"], result.pairs)
write_jsonl(paths["decisions"], [d.to_record() for d in result.decisions])
ledger = llm.write_ledger(paths["ledger"])
summary = grid.cell_summary(weighting, trajectory, result, ledger, len(scored.judgements))
grid.write_cell_summary(paths["summary"], summary)
write_provenance(paths["provenance"], provenance(
    params, ("annotation",), models={"rem": scorer.client.model_id},
    prompts={"rem_judge": scorer.prompt.sha}, seed=params.shared.seed,
    rem_mode=p.rem.mode, cell={"weighting": weighting, "trajectory": trajectory}))
llm.close()
summary
