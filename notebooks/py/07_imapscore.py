# %% [markdown]
# # 07 · imapScore: medical facts as term-value pairs, scored against human ratings
#
# imapScore (Wang et al.) distils a question into an *imap* of **Query** and **Constraint**
# term-value pairs, and each answer (the reference label and a system's response) into
# **Inform** pairs that answer the Query terms. Values of a shared term are related as
# *exact*, *belonging* (label ⊂ response), *containment* (label ⊃ response) or *unmatched*,
# and Eq. 1 sums, over shared terms, the share of label values matched plus the share of
# response values matched minus the containment penalty λ_t.
#
# Here the `judge` role extracts the imaps (raw completions kept, parsed by
# `medpref.imap.structure.parse_imap`), value relations come from the judge, from the
# ontology (the lexicon: synonyms → exact, parent/child → belonging/containment) and from
# both (+KG), and every metric — ROUGE-1/2/L, BLEU-4 and embedding similarity on raw
# texts and on imaps (+imap), and the three imapScores — is correlated with the human
# scores in the layout of the paper's Table 2. All logic lives in `medpref.imap`.

# %% tags=["parameters"]
# papermill parameters (dvc.yaml passes none: everything comes from params.yaml)
params_path = "params.yaml"
stage = "07_imapscore"

# %%
import pandas as pd
from IPython.display import Markdown, display

from medpref.contracts import write_jsonl
from medpref.imap import evaluate as ev
from medpref.imap.correlation import correlations, plot_heatmap, table2
from medpref.imap.ontology import link_table
from medpref.imap.textmetrics import load_encoder
from medpref.llm import LLMSession
from medpref.params import load_params, repo_path
from medpref.prompts import load_prompt
from medpref.provenance import provenance, write_provenance
from medpref.reports import save_figure, write_metrics, write_table

params = load_params(repo_path(params_path))
p = params.imapscore
paths = ev.output_paths(p)
timer = ev.Timer()
p

# %% [markdown]
# ## Scored QA triples (contract *Medical QA with human scores*)

# %%
items = ev.load_scored_qa(p)
human = ev.human_summary(items)
print(f"{len(items)} items from {p.source}")
human

# %% [markdown]
# ## Step 1 · Question imaps (Query + Constraint)
#
# One judge call per distinct question, all in one batch; the answer starts with `Query-`.

# %%
llm = LLMSession.for_stage(stage, params)
judge = llm.role(p.role)
with timer.step("question_imaps"):
    questions = ev.extract_question_imaps(p, judge, items)
first = next(iter(questions.values()))
print(f"{len(questions)} questions; the first raw completion:\n{first.prefix}{first.raw}")

# %% [markdown]
# ## Step 2 · Answer imaps (Inform), conditioned on the question imap
#
# One call per distinct reference and per response; each answer starts with
# `Inform-<first Query term>-`, so label and response inform the same term.

# %%
with timer.step("answer_imaps"):
    answers = ev.extract_answer_imaps(p, judge, items, questions)
imaps = ev.assemble_imaps(p, items, questions, answers)
extractions = [*questions.values(), *answers.values()]
parse = ev.parse_summary(extractions)
write_table(parse, paths["parse_summary"])
parse

# %%
example = ev.imap_example(imaps[0])
example

# %% [markdown]
# ## Step 3 · Value relations: ontology links and the judge
#
# Values are linked to lexicon concepts (whole string, longest span inside the value,
# then the nearest string by embedding above `link_min_similarity`).

# %%
with timer.step("ontology_links"):
    encode = load_encoder(repo_path(p.embedding_model))
    matcher = ev.build_matcher(p, encode)
    links = ev.link_values(matcher, imaps)
link_rows = pd.DataFrame(link_table(links, matcher.linker.lexicon))
write_table(link_rows, paths["links"])
link_rows.groupby("how").size()

# %% [markdown]
# The judge answers one word per label-response value pair of a shared term (pairs with
# the same text are exact without a call); `+KG` uses the ontology's relation where it
# finds one and the judge's elsewhere.

# %%
with timer.step("judge_relations"):
    judged = ev.relate_by_judge(p, judge, imaps)
print(f"{len(ev.relation_pairs(imaps))} value pairs, {len(judged or {})} judged")

# %% [markdown]
# ## Step 4 · Scores per item: baselines on raw texts and on imaps, imapScore

# %%
with timer.step("scores"):
    scores = ev.score_items(imaps, matcher, judged, encode)
write_table(scores, paths["scores"])
scores.head(6)

# %% [markdown]
# ## Step 5 · Correlation with human scores (Table 2's layout)

# %%
order = ev.metric_order(p.judge_relations)
long = correlations(scores, order)
wide = table2(long, order)
write_table(long, paths["correlations_long"])
write_table(wide, paths["correlations"], floatfmt=".0f")
caption = ev.table_caption(p, len(items))
display(Markdown(caption))
wide

# %%
fig = plot_heatmap(long, order, f"Spearman ρ with human scores ({p.source})")
save_figure(fig, paths["heatmap"])

# %% [markdown]
# ## Raw completions, metrics, model use and provenance

# %%
write_jsonl(paths["extractions"], [e.to_record() for e in extractions])
write_jsonl(paths["relations"], [j.to_record() for j in (judged or {}).values()])
stats = ev.run_metrics(imaps, extractions, judged, links, scores, timer)
stats["table_caption"] = caption
write_metrics(stats, paths["metrics"])
ledger = llm.write_ledger(paths["ledger"])
prompts = {n: load_prompt(n).sha for n in (p.question_prompt, p.answer_prompt, p.relation_prompt)}
write_provenance(paths["provenance"], provenance(
    params, ("imap",), models={p.role: judge.model_id, "embedding": p.embedding_model},
    prompts=prompts, seed=None))
llm.close()
{"wall_seconds": stats["wall_seconds"], "ledger": ledger["total"]}
