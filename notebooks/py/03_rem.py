# %% [markdown]
# # 03 · Rules and the Rule Evaluation Model (REM)
#
# PLPF §2.2 and Appendices A/E; the follow-up's *Rules Development* and *Construct REM*.
#
# * **Rules** — the physician's flowchart as six rules A–F in `configs/rules/plpf_flowchart.yaml`
#   (goals A ≺ B ≺ C; constraints D → B, C and E, F → A, B, C), each with 0/1/2 criteria.
# * **REM task** — rule + dialogue history in, `Comment: …` + `Score: 0|1|2` out.
# * **The scorers of `rem.scorers`** — each a named configuration (`sampled`: in-context judge,
#   k samples averaged, Eq. 2; `expected`: Σ s·p(s) of the score token in one pass; `finetuned`:
#   the LoRA REM trained here; `encoder`: frozen sentence embeddings and a classifier per rule,
#   fitted here; the baselines `majority`, `length`, `surface` and the rule-blind encoder). This is
#   the one definition of a REM scorer: stage 04 scores its candidates with one of them by name
#   (`annotation.rem_scorer`), so its REM is a row of Table 5.
# * **Evaluation as Table 5** — exact and fuzzy match, the labels never predicted, within-history
#   rule ordering, on the development, test and independent sets; the default REM chosen on the
#   development split; the default against the baselines with paired bootstrap intervals.
# * **Rule compliance** (Fig. 3) of the embedded dialogues, as a radar chart.
#
# All logic lives in `medpref.rem` (`medpref.rem.stage.run`); this notebook shows what it returns.
# Every judgement and the adapter's loss log are records under `reports/03_rem/records/`; every
# table and figure here is built from them alone (`medpref tables 03_rem` rebuilds them).

# %% tags=["parameters"]
params_path = "params.yaml"

# %%
import matplotlib

matplotlib.use("Agg")
from IPython.display import Image, display

from medpref.rem import stage as rem_stage
from medpref.stagekit import open_stage

stage = open_stage("03_rem", params_path)
stage.p

# %%
out = rem_stage.run(stage)

# %% [markdown]
# ## The rules (contract “Rule”) and the flowchart they encode

# %%
display(Image(filename=str(out.figures["flowchart"])))
out.rules

# %% [markdown]
# ## Annotation data: examples per rule, split and gold score (plus the in-context examples)

# %%
out.counts

# %% [markdown]
# ## The fine-tuned REM (LoRA, loss on the answer only)
#
# Zero-shot prompt, short rule statement; `configs/hardware/<rem.train.hardware>.yaml` sets batch
# size, accumulation, bf16 and a step cap.

# %%
t = out.train
print(f"{t.steps} steps on {t.n_train} examples ({t.n_dropped} longer than max_length "
      f"dropped) in {t.runtime_s:.0f} s -> {t.adapter_dir}")
out.losses.tail()

# %% [markdown]
# ## Table 5: every scorer of `rem.scorers` on the test split
#
# Exact: the label equals the annotation. Fuzzy: only a 2 labelled 0 or a 0 labelled 2 is an error
# (PLPF's definition), so a gold 1 is always right; `fuzzy02_%` is the same match over the items
# whose gold is 0 or 2. A scorer that gives one label to more than `rem.near_constant_share` of the
# items is flagged `near_constant`: its fuzzy match is high whatever it tells apart. No usable
# answer counts as an error and lowers coverage.

# %%
m = out.majority
print(f"always-majority baseline: exact {m['exact_%']:.1f}%, fuzzy {m['fuzzy_%']:.1f}%, "
      f"fuzzy02 {m['fuzzy02_%']:.1f}%")
out.table5

# %% [markdown]
# ## Every set: development, test (constructed), hand test rows, independent
#
# `items = all`: the fitted scorers on every item; `llm_subset`: every scorer on the set's fixed,
# seeded subset (`rem.llm_eval_rows`), so the LLM rows compare with the others on the same items.

# %%
out.sets

# %% [markdown]
# ## The default REM, chosen on the development split (never on the test split)

# %%
out.selection

# %% [markdown]
# ## The chosen REM against the baselines (`rem.paired_against`)
#
# Accuracy difference in points with a bootstrap interval that resamples states, overall and per
# rule, on the test, hand test and independent sets. `excludes_0`: the interval lies off zero.

# %%
out.paired

# %% [markdown]
# ## The independent test's labels: κ(l1, l2) per rule on the doubly labelled rows

# %%
out.kappa

# %%
out.per_rule.pivot(index="rule", columns="scorer", values="exact_%")

# %%
display(Image(filename=str(out.figures["confusion"])))

# %% [markdown]
# ## A few raw answers (all kept in `records/predictions.jsonl`; parsing can be redone for free)

# %%
out.examples

# %% [markdown]
# ## Rule compliance of the embedded dialogues (Fig. 3)
#
# Each dialogue cut at its final doctor turn; per-rule mean score under each of
# `rem.compliance_scorers`.

# %%
display(Image(filename=str(out.figures["compliance_radar"])))
out.compliance

# %% [markdown]
# ## Metrics (scores only), model use, timings and provenance

# %%
stage.finish(out.metrics, rules=str(stage.p.rules), hardware=stage.p.train.hardware)
