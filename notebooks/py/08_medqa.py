# %% [markdown]
# # 08 · Medication consultation with retrieval: Distill-Retrieve-Read (RagPULSE)
#
# RagPULSE answers a patient's medication question inside a consultation in three steps:
#
# 1. **Distill** — the model calls a `search_engine` tool with keywords distilled from the
#    dialogue (native function calls where the backend has them, else a strict written
#    format: `configs/prompts/medqa_distill_text.yaml`); the share of well-formed calls is the
#    *instruction-follow rate*, and a malformed call falls back to the last question;
# 2. **Retrieve** — the query is embedded (MiniLM) and matched against the medicine database,
#    a tree *medicine → "generic name + attribute" items*; hit rates HR@k at document level
#    (which medicine) and attribute level (which medicine and attribute), beside the
#    *History* and *Last question* baselines (Table 3 layout);
# 3. **Read** — each model configuration answers with its evidence (or closed-book); a judge
#    compares the answers pairwise in both orders; Elo (mean over shuffled orders, bootstrap
#    CIs) and Bradley–Terry rate the configurations (Table 2 layout).
#
# All logic lives in `medpref.medqa`; this notebook calls it and shows the results.

# %% tags=["parameters"]
# papermill parameters (dvc.yaml passes none: everything comes from params.yaml)
params_path = "params.yaml"
stage = "08_medqa"

# %%
import pandas as pd
from medpref.params import load_params, repo_path
from medpref.contracts import write_jsonl
from medpref.llm import LLMSession
from medpref.medqa import plots, stage as s06
from medpref.prompts import load_prompt
from medpref.provenance import provenance, write_provenance
from medpref.reports import save_figure, write_metrics, write_table

params = load_params(repo_path(params_path))
p = params.medqa
seed = params.shared.seed
paths = s06.output_paths(p)
timer = s06.StepTimer()
p

# %% [markdown]
# ## The medicine database as a tree, and the questions

# %%
with timer.step("load"):
    tree, items = s06.load_inputs(p)
print(f"{len(tree.medicines)} medicines → {len(tree.items)} attribute items; {len(items)} questions")
pd.DataFrame([{"key": it.key, "text": it.text[:90]} for it in
              (tree.items[i] for i in tree.children(tree.names[0]))])

# %% [markdown]
# ## Embeddings of the items (cached)
#
# The item vectors are a stage output keyed by the item texts and the MiniLM model: a
# rerun on the same database loads them instead of re-embedding.

# %%
with timer.step("embed_database"):
    encode, item_vecs, embeddings_cached = s06.embed_database(p, tree)
print(f"item vectors {item_vecs.shape}, from cache: {embeddings_cached}")

# %% [markdown]
# ## Distill: one `search_engine` call per question

# %%
llm = LLMSession.for_stage(stage, params)
roles = list(dict.fromkeys([m.role for m in p.models] + [p.judge_role]))
clients = {r: llm.role(r) for r in roles}
with timer.step("distill"):
    distilled = s06.run_distill(p, clients, items)
write_jsonl(paths["distilled"], [q.to_record() for qs in distilled.values() for q in qs])
write_jsonl(paths["malformed"], [q.to_record() for qs in distilled.values() for q in qs
                                 if not q.well_formed])
s06.distill_summary(distilled)

# %% [markdown]
# Why calls were malformed (the full raw answers are in `reports/08_medqa/malformed_calls.jsonl`), and a few answers as the model wrote them:

# %%
reasons = s06.malformed_reasons(distilled)
write_table(reasons, paths["malformed_reasons"])
display(reasons)
pd.DataFrame([{"role": q.role, "raw": q.raw[:100], "well_formed": q.well_formed,
               "query_used": q.query_used[:70]} for qs in distilled.values() for q in qs[:6]])

# %% [markdown]
# ## Retrieve: HR@k at document and attribute level (Table 3 layout)

# %%
with timer.step("retrieve"):
    sources = s06.query_sources(p, items, distilled)
    results = s06.retrieve_all(sources, items, encode, item_vecs, tree,
                               keep=max(p.read_top_k, 10))
write_jsonl(paths["retrievals"], s06.retrieval_records(results, tree))
model_ids = {r: c.model_id for r, c in clients.items()}
table3 = s06.retrieval_table(results, items, tree, p.hr_ks, model_ids)
write_table(table3, paths["table3"])
table3

# %% [markdown]
# With the embedded database's 52 medicines, document-level HR@50 is close to 1 for any query — a random
# ranking already reaches 50/52 ≈ 0.96 (the *chance* row); it is shown for the layout of the
# paper's Table 3, not as evidence.

# %%
labels = {s06.HISTORY: "History", s06.LAST_QUESTION: "Last question",
          **{s06.distilled_source(r): f"Distilled ({r})" for r in distilled}}
fig = plots.hr_curves(results, labels, len(tree.medicines), len(tree.items), p.hr_ks)
save_figure(fig, paths["hr_figure"])

# %% [markdown]
# ## Read: every configuration answers the read subset

# %%
subset = s06.read_subset(items, p.n_read_items, seed)
with timer.step("read"):
    answers = s06.run_read(p, clients, tree, subset, results)
write_jsonl(paths["answers"], [a.to_record() for a in answers])
one = subset[0]
print(f"Q ({one.id}, gold {one.gold_medicine}/{', '.join(one.gold_attributes)}): {one.question}\n")
for a in answers:
    if a.item_id == one.id:
        print(f"[{a.config}] evidence {a.evidence_keys}\n  {a.text}\n")

# %% [markdown]
# ## Battles: the judge compares answers pairwise, in both orders

# %%
with timer.step("judge"):
    battles = s06.run_battles(p, clients[p.judge_role], subset, answers)
write_jsonl(paths["verdicts"], battles.judged.judgements)
write_jsonl(paths["unparsable"], battles.judged.unparsable + battles.skipped)
print(f"{len(battles.judged.raw)} judge calls, {len(battles.judged.judgements)} verdicts, "
      f"{len(battles.judged.unparsable)} unparsable; agreement across orders: "
      f"{s06.order_agreement(battles.judged.judgements):.2f}")
pd.Series(s06.position_bias(battles.judged.raw)).round(3)

# %% [markdown]
# ## Ratings: Elo (mean over shuffled orders) and Bradley–Terry, with bootstrap CIs
#
# A battle is one (item, pair); its score is the mean of its verdicts over both orders, so a
# tie and a split verdict (each model winning in one order) count the same (see
# `medpref.medqa.ratings`). Stored verdicts named by `medqa.stored_verdicts` are rated too.

# %%
with timer.step("ratings"):
    ratings = s06.ratings_for(battles.judged.judgements, p, seed, "stage")
    stored = s06.stored_judgements(p)
    if stored:
        ratings = pd.concat([ratings, s06.ratings_for(stored, p, seed, "stored")],
                            ignore_index=True)
write_table(ratings, paths["ratings"], floatfmt=".1f")
ratings

# %%
save_figure(plots.rating_intervals(ratings), paths["elo_figure"])

# %% [markdown]
# ## The configurations side by side (Table 2 layout)

# %%
stage_ratings = ratings[ratings["verdicts"] == "stage"]
table2 = s06.models_table(p, distilled, results, stage_ratings, model_ids)
write_table(table2, paths["table2"])
table2

# %% [markdown]
# ## Metrics, model use and provenance

# %%
metrics = s06.stage_metrics(tree, items, subset, distilled, battles, embeddings_cached, timer)
write_metrics(metrics, paths["metrics"])
ledger = llm.write_ledger(paths["ledger"])
prompt_names = [p.distill_prompt, p.distill_tools_prompt, p.read_prompt, p.closed_book_prompt,
                p.judge_prompt]
write_provenance(paths["provenance"], provenance(
    params, ("medqa",), models={**model_ids, "embeddings": p.embedding_model},
    prompts={n: load_prompt(n).sha for n in prompt_names}, seed=seed))
llm.close()
print(metrics["wall_s"])
ledger["total"]
