# %% [markdown]
# # 03 · Rules and the Rule Evaluation Model (REM)
#
# PLPF §2.2 and Appendices A/E; the follow-up's *Rules Development* and *Construct REM*.
#
# * **Rules** — the physician's flowchart as six rules A–F in `configs/rules/plpf_flowchart.yaml`
#   (goals A ≺ B ≺ C; constraints D → B, C and E, F → A, B, C), each with 0/1/2 criteria.
# * **REM task** — rule + dialogue history in, `Comment: …` + `Score: 0|1|2` out.
# * **Three scorers, one interface** (`medpref.rem.scorers.build_scorer`):
#   `sampled` (in-context judge, k samples averaged, Eq. 2), `expected` (Σ s·p(s) of the score
#   token from one forward pass), `finetuned` (LoRA REM trained here on the train split).
# * **Evaluation as Table 5** — exact and fuzzy match on the test split, confusion matrices.
# * **Rule compliance** (Fig. 3) of the embedded dialogues, as a radar chart.
#
# All logic lives in `medpref.rem`, `medpref.rules` and `medpref.training`; this notebook calls it.

# %% tags=["parameters"]
# papermill parameters (dvc.yaml passes none: everything comes from params.yaml)
params_path = "params.yaml"
stage = "03_rem"

# %%
import matplotlib
matplotlib.use("Agg")
import pandas as pd
from IPython.display import Image, display

from medpref.contracts import write_jsonl
from medpref.llm import LLMSession
from medpref.params import load_params, repo_path
from medpref.prompts import load_prompt
from medpref.provenance import provenance, write_provenance
from medpref.reports import save_figure, write_metrics, write_table
from medpref.rem import build_rem as b03
from medpref.rem.compliance import dialogue_states, radar_plot
from medpref.rem.figures import draw_flowchart, plot_confusions

params = load_params(repo_path(params_path))
p = params.rem
seed = params.shared.seed
paths = b03.output_paths(p)
p

# %% [markdown]
# ## The rules (contract “Rule”) and the flowchart they encode

# %%
inputs = b03.load_inputs(p)
flowchart = inputs.flowchart
pd.DataFrame([{"id": r.id, "name": r.name, "kind": r.kind,
               "predecessors": ", ".join(r.predecessors),
               "constrained_by": ", ".join(r.constrained_by)} for r in flowchart])

# %%
fig = draw_flowchart(flowchart)
save_figure(fig, paths["flowchart"])
display(Image(filename=str(paths["flowchart"])))

# %% [markdown]
# ## Annotation data: examples per rule, split and gold score (plus the in-context examples)

# %%
counts = b03.split_counts(inputs)
write_table(counts, paths["flowchart"].parent / "annotation_counts")
counts

# %% [markdown]
# ## Fine-tune the REM (LoRA, loss on the answer only)
#
# Same task format, zero-shot prompt with the short rule statement; the profile in
# `configs/hardware/<rem.train.hardware>.yaml` sets batch size, accumulation, bf16 and a step cap.

# %%
role_model = params.shared.llm.roles[p.role].model
train = b03.train_rem(p, inputs, role_model, seed)
losses = b03.training_table(train)
write_table(losses, paths["training"])
print(f"{train.steps} steps on {train.n_train} examples ({train.n_dropped} longer than "
      f"max_length dropped) in {train.runtime_s:.0f} s -> {train.adapter_dir}")
losses.tail()

# %% [markdown]
# ## Evaluate the scorers on the test split (PLPF Table 5)
#
# Exact match: the rounded score equals the annotation. Fuzzy match: only a 2 scored as 0 or a 0
# scored as 2 counts as an error. No usable answer counts as an error and lowers coverage.

# %%
llm = LLMSession.for_stage(stage, params)
eval_set = inputs.split(p.eval_split, p.eval_per_rule)
runs = [b03.run_scorer(mode, llm, p, inputs, eval_set, seed) for mode in p.scorers]
write_jsonl(paths["predictions"], [r for run in runs for r in run.records])
majority = b03.baseline_majority(eval_set, inputs.split("train"))
table = b03.table5(runs, p)
write_table(table, paths["table5"])
print(f"{len(eval_set)} test examples; always-majority baseline: "
      f"exact {majority['exact_%']:.1f}%, fuzzy {majority['fuzzy_%']:.1f}%")
table

# %%
per_rule = b03.per_rule_table(runs)
write_table(per_rule, paths["per_rule"])
per_rule.pivot(index="rule", columns="scorer", values="exact_%")

# %%
fig = plot_confusions(b03.confusion_tables(runs))
save_figure(fig, paths["confusion"])
display(Image(filename=str(paths["confusion"])))

# %% [markdown]
# ## A few raw answers (kept in `predictions.jsonl`; parsing can be redone for free)

# %%
pd.DataFrame([{"scorer": r["scorer"], "rule": r["rule"], "gold": r["gold"],
               "score": r["score"], "raw": (r["raw"] or [""])[0][:160]}
              for run in runs for r in run.records[:2]])

# %% [markdown]
# ## Rule compliance of the embedded dialogues (Fig. 3)
#
# Each dialogue cut at its final doctor turn; per-rule mean score. Later stages call the same
# `rule_compliance` for every model they compare and draw them together with `radar_plot`.

# %%
states = dialogue_states(b03.compliance_dialogues(p))
compliance = b03.compliance_tables(p.compliance_scorers, llm, p, inputs, states, seed)
comp_table = pd.concat([t.assign(scorer=m) for m, t in compliance.items()], ignore_index=True)
write_table(comp_table, paths["compliance"])
fig = radar_plot({f"embedded dialogues ({m})": t for m, t in compliance.items()},
                 title=f"Rule compliance, {len(states)} embedded dialogues")
save_figure(fig, paths["radar"])
display(Image(filename=str(paths["radar"])))
comp_table

# %% [markdown]
# ## Metrics, model use and provenance

# %%
metrics = b03.stage_metrics(runs, p, train, majority)
write_metrics(metrics, paths["metrics"])
ledger = llm.write_ledger(paths["ledger"])
finetuned_id = llm.role(p.role, adapter=p.train.adapter_dir).model_id
write_provenance(paths["provenance"], provenance(
    params, ("rem",), models={p.role: llm.role(p.role).model_id, "rem_finetuned": finetuned_id},
    prompts={p.prompt: load_prompt(p.prompt).sha}, seed=seed,
    rules=str(p.rules), hardware=p.train.hardware))
llm.close()
ledger["total"]
