# %% [markdown]
# # 04 · Preference annotation: four strategies
#
# Every unlabeled item ⟨H, C1, F1, C2, F2⟩ from stage 01 (C1 sampled from a real dialogue,
# C2 generated) is labeled by four strategies; each writes labeled preference pairs
# (`data/04_annotation/pairs/<strategy>.jsonl`) for DPO.
#
# | strategy | paper | how |
# |---|---|---|
# | `gpt4_rank` | follow-up, *GPT-4 Ranking* | a judge picks response 1, 2 or equal, in both orders; disagreement = tie; ties dropped |
# | `cai_avg`, `cai_dep` | PLPF §2.3.3 (Eqs. 1-4), App. C; follow-up *CAI Ranking* | REM rule scores of every state along each trajectory, weighted (`avg`: w = 1; `dep`: Eq. 4), discounted (Eq. 1); differences below the tie threshold dropped, top-N by margin kept |
# | `agent` | follow-up, *Multiple Agent Ranking* | Planner (long-term plan → short-term objectives), Ranker (1/2/equal), Rethinker (a better c3 on ties: c3 ≻ c1, c3 ≻ c2, plus the judge's re-rank of c1 vs c2) |
#
# The REM is stage 03's scorer (`medpref.rem.scorers.build_scorer`), by default in the
# `expected` mode (Σ s·p(s) of the score token: one forward pass per (state, rule)). The
# weighting × trajectory-length ablation is stage `annotation_grid` (notebook
# `04_annotation_grid.ipynb`). All logic lives in `medpref.annotation` and `medpref.scoring`.

# %% tags=["parameters"]
# papermill parameters (dvc.yaml passes none: everything comes from params.yaml)
params_path = "params.yaml"
stage = "04_annotation"

# %%
import time

from medpref.params import load_params, repo_path
from medpref.contracts import write_jsonl
from medpref.annotation import analysis, cai, run
from medpref.llm import LLMSession
from medpref.rules import load_rules
from medpref.provenance import provenance, write_provenance
from medpref.reports import save_figure, write_metrics, write_table

started = time.perf_counter()
params = load_params(repo_path(params_path))
p = params.annotation
p

# %% [markdown]
# ## Items and rules

# %%
items = run.load_items(p)
flowchart = load_rules(repo_path(p.rules))
paths = run.output_paths(p)
llm = LLMSession.for_stage(stage, params)
print(f"{len(items)} items; rules {flowchart.ids} (goals {[r.id for r in flowchart.goals]})")

# %% [markdown]
# ## gpt4_rank — the judge, in both orders

# %%
results = {}
results["gpt4_rank"] = run.run_gpt4_rank(items, llm, p)
analysis.summary_table([results["gpt4_rank"]]).head(1)

# %% [markdown]
# ## cai_avg and cai_dep — REM scores along the trajectories
#
# Trajectory length L = number of states scored per candidate (1 = the candidate alone;
# Eq. 1's n = L − 1), capped for both candidates of an item by the shorter future. Every
# distinct state is scored against every rule once; both weightings reuse the scores.

# %%
scorer = run.build_rem_scorer(llm, p, flowchart, params.shared.seed)
scored = run.score_states(items, scorer, flowchart, p.cai.trajectory)
for weighting in ("avg", "dep"):
    results[f"cai_{weighting}"] = run.run_cai(items, scored, flowchart, p, weighting)
state_rows = cai.state_score_rows(scored.item_states, scored.judgements, flowchart, p.scoring)
print(f"{len(scored.judgements)} distinct states × {len(flowchart)} rules scored "
      f"in {scored.wall_s:.0f}s ({p.rem.mode} REM)")
analysis.summary_table([results["cai_avg"], results["cai_dep"]]).head(2)

# %% [markdown]
# ## agent — Planner, Ranker, Rethinker

# %%
results["agent"] = run.run_agent(items, llm, p, params.shared.seed)
analysis.summary_table([results["agent"]]).head(1)

# %% [markdown]
# ## Write the pairs and every raw answer

# %%
counts = run.write_results(results.values(), paths)
write_jsonl(paths["state_scores"], state_rows)
counts

# %% [markdown]
# ## Pairs, ties and which source wins
#
# `tie_ratio` = ties / (decisive + ties); `unusable` = unparsable answers or unscored states.
# The last row is PLPF's reported sampled : generated win ratio (Appendix C, 1.2 : 1).

# %%
summary = analysis.summary_table(results.values())
write_table(summary, paths["summary"])
summary

# %% [markdown]
# ### Preferences by candidate source (cf. the follow-up's Fig. 11)

# %%
prefs = analysis.source_preferences(results.values())
write_table(prefs, paths["preferences"])
save_figure(analysis.plot_source_preferences(prefs), paths["fig_preferences"])
prefs

# %% [markdown]
# ### CAI margins against the tie threshold
#
# The threshold (1.0) was set for GPT-scale REMs whose rule scores spread over 0-2; a
# small REM's expected scores are flatter, so fewer pairs clear it.

# %%
margins = analysis.margin_table(results.values(), p.scoring.tie_threshold)
write_table(margins, paths["margins"])
save_figure(analysis.plot_margins(results.values(), p.scoring.tie_threshold), paths["fig_margins"])
margins

# %% [markdown]
# How many pairs each tie threshold would keep (read off the margins above; no new model call):

# %%
sweep = analysis.threshold_sweep(results.values())
write_table(sweep, paths["sweep"])
sweep

# %% [markdown]
# ## Unparsable answers (recorded, item skipped at that step)

# %%
import pandas as pd
unparsable = run.unparsable_records(results.values())
pd.DataFrame(unparsable, columns=["strategy", "step", "item_id", "raw"]).head(10)

# %% [markdown]
# ## One pair per strategy

# %%
for name, res in results.items():
    if res.pairs:
        pair = res.pairs[0]
        print(f"[{name}] {pair.id}  margin={pair.margin}")
        print(f"  patient : {pair.prompt[-1].text[:160]}")
        print(f"  chosen  ({pair.chosen_source}): {pair.chosen[:160]}")
        print(f"  rejected({pair.rejected_source}): {pair.rejected[:160]}\n")

# %% [markdown]
# ## Model use, wall time and provenance

# %%
ledger = llm.write_ledger(paths["ledger"])
metrics = run.stage_metrics(list(results.values()), ledger, len(items), len(scored.judgements),
                            time.perf_counter() - started)
write_metrics(metrics, paths["metrics"])
prompts = {k: v for res in results.values() for k, v in res.prompts.items()}
write_provenance(paths["provenance"], provenance(
    params, ("annotation",), models={"judge": llm.role(p.judge.role).model_id,
                                     "rem": scorer.client.model_id, "planner": llm.role(p.agent.planner_role).model_id},
    prompts={**prompts, "rem_judge": scorer.prompt.sha}, seed=params.shared.seed,
    rem_mode=p.rem.mode))
llm.close()
metrics
