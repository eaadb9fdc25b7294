"""Every dvc stage, declared once: what it runs, what it reads that is not Python, its
params keys, and its outputs list. ``medpref dvc-yaml`` (``make dvc-yaml``) writes
dvc.yaml from :data:`PIPELINE`; tests/test_dvc_generated.py fails when dvc.yaml differs.

A stage's code deps are not typed here: they are the import closure of its notebook
(:mod:`medpref.importwalk`). Its outputs come from its :class:`~medpref.outputs.StageOutputs`
(:data:`medpref.pipeline.STAGES`); a stage without one (an index, the models, a DPO run,
a grid cell) names its data and report files here. Adding a stage: write its entry
below, run ``make dvc-yaml``, commit both (docs/extending.md).
"""

from __future__ import annotations

from pathlib import Path

from medpref.dvcgen import Dep, DvcStage, Pipeline, Plot
from medpref.handoffs import POLICY_ADAPTERS, POLICY_ROLES
from medpref.outputs import Data
from medpref.pipeline import STAGES as OUT

MODELS = Dep("models", "every model folder (content; .dvcignore leaves out wheels)")
HARDWARE = ("configs/hardware/cpu.yaml", "configs/hardware/gpu.yaml")
RULES = "configs/rules/plpf_flowchart.yaml"
ICL = "data/embedded/rem/icl_examples.jsonl"
DIALOGUES = "data/embedded/dialogues.jsonl"
SPLIT = "data/embedded/dialogue_split.yaml"
STRATEGIES_BY_NAME = Dep("medpref.annotation", "the folder: a strategy module is found by "
                         "name (medpref.registry), control_process too")


def prompts(*names: str) -> list[str]:
    return [f"configs/prompts/{n}.yaml" for n in names]


# -- stage 04: the REM's settings it scores with, the parts the grid cells share ----------------
REM_SCORING_PARAMS = ["rem.scorers", "rem.calls", "rem.icl_examples",
                      "rem.train.adapter_dir", "rem.fitted"]
#: what a fitted REM scorer reads (rem.fitted): its models and its word lists
FITTED_REM = ["data/03_rem/rem_encoder", "data/embedded/lexicon"]
ANNOTATION_READS = [*prompts("rem_judge"), RULES, "data/01_sampling/unlabeled.jsonl",
                    Dep(SPLIT, "shared.split: items of dev/eval dialogues are refused"),
                    "data/03_rem/rem_lora", *FITTED_REM,
                    Dep("reports/03_rem/thresholds.csv", "annotation.rem_thresholds: Eq. 4's "
                        "'met' cut per rule when annotation.scoring.met is rem_dev")]

# -- stage 05: one notebook, three parts; every DPO run (strategy or grid cell) alike -------
TRAINING_PARAMS = ["training.recipe", "training.recipes", "training.hardware",
                   "training.base_role"]
RUN_PARAMS = ["training.checkpoints_dir", "training.keep_checkpoints", "training.reports",
              "training.warn_below_steps", "training.guard"]
DPO_PARAMS = ["shared.seed", "shared.llm.roles.policy", *TRAINING_PARAMS,
              "training.sft.system_prompt", "training.sft.output_dir", "training.dpo.runs",
              "annotation.strategies", "annotation.output_dir", "training.dpo.min_pairs",
              "training.dpo.max_pairs", "training.dpo.eval_pairs",
              "training.dpo.heldout_folds", "training.dpo.heldout_runs",
              "training.dpo.output_dir", *RUN_PARAMS]


def dpo_stage(name: str, var: str, pairs: str, foreach: str, note: str, comment: str = ""
              ) -> DvcStage:
    """A DPO run per ``foreach`` entry (``var``: ``${item}`` or ``${key}``) on ``pairs``."""
    return DvcStage(
        name, comment=comment, foreach=foreach, foreach_note=note,
        notebook="05_training", executed=f"05_training/dpo_{var}",
        nb_params=(("part", "dpo"), ("run", var)),
        data=(Data(f"data/05_training/dpo/{var}"),),
        reports=f"05_training/dpo/{var}",
        files=("log_history.json", "heldout.csv", "log_history.csv"),
        plots=(Plot("log_history.csv", "step", "rewards/margins",
                    f"DPO reward margin (chosen − rejected), {var}"),),
        deps=[*prompts("policy_doctor"), *HARDWARE, "data/05_training/sft", pairs, MODELS],
        params=DPO_PARAMS)


STAGES = [
    DvcStage(
        "sampling", notebook="01_sampling", outputs=OUT["01_sampling"], llm=True,
        deps=[*prompts("trajectory_continuation", "trajectory_patient", "trajectory_doctor"),
              DIALOGUES, Dep(SPLIT, "shared.split: stage 01 samples its train part"), MODELS],
        params=["shared.seed", "shared.split", "shared.llm.max_cost_usd", "shared.llm.prices",
                "shared.llm.servers", "shared.llm.roles.annotator", "shared.llm.roles.patient",
                "shared.llm.roles.doctor", "sampling"]),
    DvcStage(
        "imapscore", notebook="07_imapscore", outputs=OUT["07_imapscore"], llm=True,
        deps=[*prompts("imap_question", "imap_answer", "imap_relation"),
              "data/embedded/qa_human_scores.jsonl", "data/embedded/lexicon", MODELS],
        params=["shared.seed", "shared.llm.roles.judge", "imapscore"]),
    DvcStage(
        "notechat_index", module="medpref.notechat.lexicon_index",
        args="data/embedded/lexicon data/02_notechat/quickumls_index",
        data=(Data("data/02_notechat/quickumls_index"),),
        deps=["data/embedded/lexicon"], params=[]),
    DvcStage(
        "notechat", notebook="02_notechat", outputs=OUT["02_notechat"], llm=True,
        deps=[*prompts("notechat_planning", "notechat_doctor", "notechat_patient",
                       "notechat_polish", "notechat_single_prompt"),
              "configs/notechat", "data/embedded/notes.jsonl",
              Dep("data/embedded/turn_quality_labels.jsonl", "notechat.turn_quality_labels"),
              Dep("data/embedded/turn_quality_notes.jsonl",
                  "the labels' notes (the note read aloud)"),
              "data/02_notechat/quickumls_index", MODELS],
        params=["shared.seed", "shared.llm.roles.planner", "shared.llm.roles.doctor",
                "shared.llm.roles.patient", "shared.llm.roles.rethinker", "notechat"]),
    DvcStage(
        "rem", notebook="03_rem", outputs=OUT["03_rem"], llm=True,
        deps=[RULES, *prompts("rem_judge"), *HARDWARE, "data/embedded/rem/annotations.jsonl",
              Dep("data/embedded/rem/constructed.jsonl",
                  "rem.constructed: generated by python -m medpref.rem.constructions"),
              Dep("data/embedded/rem/independent.jsonl",
                  "rem.independent: turns no construction made, labelled blind"),
              Dep("data/embedded/rem/real_turns.jsonl",
                  "rem.turns.files: labelled turns the REM learns from"),
              Dep("data/embedded/rem/train_turns.jsonl",
                  "rem.turns.files: the policies' labelled turns on training states"),
              ICL, Dep("data/embedded/lexicon", "rem.fitted.lexicon: the surface word lists"),
              Dep(SPLIT, "shared.split: hand training rows sharing text with an eval "
                  "dialogue are left out"), DIALOGUES, MODELS],
        params=["shared.seed", "shared.split", "shared.llm.roles.rem", "rem"]),
    DvcStage(
        "annotation", notebook="04_annotation", outputs=OUT["04_annotation"], llm=True,
        comment="Stage 04 scores with stage 03's REM by name (annotation.rem_scorer → "
                "rem.scorers): the adapter, the scorer settings and the Table 5 row it shows "
                "are its dependencies.",
        by_name=[STRATEGIES_BY_NAME],
        deps=[*prompts("annotation_judge", "annotation_long_plan", "annotation_short_plan",
                       "annotation_agent_rank", "annotation_rethink_need",
                       "annotation_rethink"),
              *ANNOTATION_READS, "reports/03_rem/table5.csv", ICL, MODELS,
              Dep(DIALOGUES, "control_process: the dialogues whose train part it reads")],
        params=["shared.seed", "shared.split", "shared.llm.roles.judge", "shared.llm.roles.rem",
                "shared.llm.roles.planner", "shared.llm.roles.ranker",
                "shared.llm.roles.rethinker", *REM_SCORING_PARAMS, "annotation.strategies",
                "annotation.input", "annotation.rules", "annotation.max_items",
                "annotation.history_max_turns", "annotation.output_dir",
                "annotation.reports", "annotation.rem_scorer", "annotation.rem_table5",
                "annotation.rem_thresholds",
                "annotation.scoring", "annotation.cai", "annotation.calls", "annotation.judge",
                "annotation.agent", "annotation.control", "annotation.guard"]),
    DvcStage(
        "annotation_grid", comment=(
            "Weighting × trajectory length (the axes of PLPF Table 3 / follow-up Fig. 10), "
            "one stage per cell (annotation_grid@avg-1 ... annotation_grid@dep-3); "
            "annotation statistics, not SP scores. Rerun one cell with changed knobs:\n"
            "  dvc exp run -S annotation.scoring.discount=0.5 annotation_grid@dep-3\n"
            "Cells read the main stage's LLM cache, so states it scored are not scored "
            "again."),
        matrix={"weighting": "${annotation.grid.weightings}",
                "trajectory": "${annotation.grid.trajectories}"},
        notebook="04_annotation_grid",
        executed="04_annotation_grid_${item.weighting}_${item.trajectory}",
        nb_params=(("weighting", "${item.weighting}"), ("trajectory", "${item.trajectory}")),
        llm=True, reports="04_annotation/grid/${item.weighting}_${item.trajectory}",
        data=(Data("data/04_annotation/grid/${item.weighting}_${item.trajectory}"),),
        deps=[*ANNOTATION_READS, ICL, MODELS, "data/cache/llm/04_annotation.sqlite"],
        params=["shared.seed", "shared.split", "shared.llm.roles.rem", *REM_SCORING_PARAMS,
                "annotation.input", "annotation.rules", "annotation.max_items",
                "annotation.rem_scorer", "annotation.rem_thresholds", "annotation.scoring",
                "annotation.grid", "annotation.guard"]),
    DvcStage(
        "annotation_grid_table", notebook="04_annotation_grid_table",
        outputs=OUT["04_annotation_grid_table"],
        deps=["reports/04_annotation/grid",
              Dep("data/04_annotation/grid", "the cells' decisions (records: decisions.jsonl)"),
              "reports/04_annotation/summary.csv"],
        params=["annotation.grid", "annotation.reports"]),
    DvcStage(
        "medqa", notebook="08_medqa", outputs=OUT["08_medqa"], llm=True,
        deps=[*prompts("medqa_distill_text", "medqa_distill_tools", "medqa_read",
                       "medqa_read_closed", "medqa_judge"),
              "data/embedded/medicines.jsonl", "data/embedded/medicineqa.jsonl", MODELS],
        params=["shared.seed", "shared.llm.roles.policy", "shared.llm.roles.judge", "medqa"]),
    DvcStage(
        "tables", notebook="09_tables", outputs=OUT["09_tables"], also=["reports/index.md"],
        metrics="The only metrics file: the headline numbers of configs/paper_tables.yaml "
                "(`dvc metrics show`, `dvc exp show`); every stage's full metrics.json is a "
                "plain output.",
        deps=["configs/paper_tables.yaml", "reports/02_notechat", "reports/03_rem",
              "reports/04_annotation/metrics.json", "reports/04_annotation/summary.csv",
              "reports/04_annotation/source_preferences.png", "reports/06_simulation",
              "reports/07_imapscore", "reports/08_medqa"],
        params=["tables"]),
    DvcStage(
        "models", module="medpref.models.prepare", params=[],
        comment="The embedded models as a stage, so `dvc exp run --temp/--queue` workspaces "
                "(and a DVC remote) get them from the DVC cache like any other output. "
                "`make models` runs it.",
        data=(Data("models/smollm2-135m-instruct"), Data("models/all-minilm-l6-v2"),
              Data("models/manifest.json"))),
    DvcStage(
        "simulation", notebook="06_simulation", outputs=OUT["06_simulation"], llm=True,
        comment="Stage 06: Standardized Patient test (PLPF §3, App. B) and next-turn "
                "evaluation, for the base model and every trained policy (stage 05 runs "
                "that trained).",
        deps=[*prompts("sp_patient", "policy_doctor", "sp_grade_turns_first",
                       "sp_grade_item_first", "sp_count_diseases", "sp_gpt_distance",
                       "rem_judge"),
              RULES, "data/embedded/sp_cases.jsonl", "data/embedded/sp_graded.jsonl",
              "data/embedded/sp_script_coverage.jsonl", DIALOGUES,
              Dep(SPLIT, "shared.split: held-out states and next-turn items"),
              Dep("data/embedded/sp_cases_gloss_en.yaml", "simulation.split_overlap.gloss"),
              ICL, "data/03_rem/rem_lora", *FITTED_REM,
              Dep(POLICY_ROLES, "the trained policies stage 06 tests (stage 05's hand-off)"),
              *POLICY_ADAPTERS, MODELS],
        params=["shared.seed", "shared.split", "shared.llm.roles.policy",
                "shared.llm.roles.patient", "shared.llm.roles.judge", "shared.llm.roles.rem",
                "training.base_role",
                Dep("annotation.grid.weightings",
                    "Table 3's cells when no grid policy was SP-tested"),
                "annotation.grid.trajectories", *REM_SCORING_PARAMS, "simulation"]),
    DvcStage(
        "training_sft", comment=(
            "Stage 05 (PLPF §2.4): SFT on dialogues, then one DPO run per pairs file, then a "
            "summary. One notebook, three parts. The DPO runs: one per annotation.strategies "
            "entry (training_dpo@<strategy>), then training.dpo.runs, the weighting × "
            "trajectory cells of PLPF Table 3 (training_dpo_grid@<run>). Rerun one run:\n"
            "  dvc repro training_dpo@cai_dep\n"
            "What is trained: training.recipe (tiny | "
            "paper); where and how fast: training.hardware (configs/hardware/<name>.yaml); "
            "how many processes: an accelerate config (docs/training.md)."),
        notebook="05_training", executed="05_training/sft", nb_params=(("part", "sft"),),
        outputs=OUT["05_training_sft"],
        plots=(Plot("log_history.csv", "step", "loss", "SFT loss (doctor turns only)"),
               Plot("dev_loss.csv", "epoch", "dev_loss", "SFT development loss per epoch "
                    "(epoch 0 the base model; the lowest is kept)")),
        deps=[*prompts("policy_doctor"), *HARDWARE,
              *prompts("notechat_doctor", "notechat_patient", "notechat_planning",
                       "notechat_polish", "notechat_single_prompt"),
              DIALOGUES, Dep(SPLIT, "train: trained on; dev: the epoch's loss; eval: never"),
              "data/02_notechat/dialogues.jsonl", MODELS],
        params=["shared.seed", "shared.split", "shared.llm.roles.policy", *TRAINING_PARAMS,
                "training.sft", *RUN_PARAMS]),
    dpo_stage("training_dpo", "${item}", "data/04_annotation/pairs/${item}.jsonl",
              "${annotation.strategies}", "the pairs file stage 04 writes for each"),
    dpo_stage("training_dpo_grid", "${key}", "${item}", "${training.dpo.runs}", "",
              comment="the other DPO runs (training.dpo.runs: run → pairs file), as "
                      "training_dpo does them"),
    DvcStage(
        "training", notebook="05_training", executed="05_training/summary",
        nb_params=(("part", "summary"),), outputs=OUT["05_training"],
        deps=[*HARDWARE, "data/05_training/sft", "data/05_training/dpo",
              "reports/05_training/dpo"],
        params=["shared.llm.roles.policy",
                Dep("training.recipe", "the notebook shows the recipe and hardware it checks"),
                "training.recipes", "training.hardware", "training.base_role",
                "training.dpo.runs", "training.dpo.output_dir", "training.sft.output_dir",
                "training.reports", "annotation.strategies", "annotation.output_dir"]),
]


def _csv(stage: str, table: str) -> str:
    """A table's CSV as the stage's outputs list writes it (an unknown name is an error)."""
    outputs = OUT[stage]
    names = {o.name for o in outputs.built}
    if table not in names:
        raise ValueError(f"{stage} declares no table '{table}'")
    return f"{outputs.reports_dir(Path('.')).as_posix()}/{table}.csv"


def _bars(title: str, stage: str, table: str, x: str, y: str) -> dict:
    return {title: {"template": "bar_horizontal", "x": x, "y": {_csv(stage, table): y}}}


def _scatter(title: str, stage: str, table: str, x: str, y: str) -> dict:
    return {title: {"template": "scatter", "x": x, "y": {_csv(stage, table): y}}}


#: the DPO runs whose curves the training plots show (annotation.strategies' default)
PLOTTED_RUNS = ("gpt4_rank", "cai_avg", "cai_dep", "agent")
_DPO_LOGS = [f"reports/05_training/dpo/{r}/log_history.csv" for r in PLOTTED_RUNS]

PLOTS = [
    {_csv("03_rem", "training"): {"title": "REM fine-tuning: training loss per step",
                                  "template": "linear", "x": "step", "y": "loss"}},
    _bars("REM Table 5, exact agreement (%)", "03_rem", "table5", "exact_%", "scorer"),
    _bars("REM Table 5, fuzzy agreement (%)", "03_rem", "table5", "fuzzy_%", "scorer"),
    _scatter("REM per rule, exact (%) against fuzzy (%) — one point per scorer x rule",
             "03_rem", "per_rule", "fuzzy_%", "exact_%"),
    _scatter("Rule compliance (Fig. 3), mean REM score per rule — one point per scorer x rule",
             "03_rem", "compliance", "n", "mean"),
    _bars("Sampling, words per candidate response", "01_sampling", "summary",
          "response_words", "source"),
    {_csv("02_notechat", "coverage"): {
        "title": "NoteChat: checklist coverage (%) by planning round, one point per note",
        "template": "scatter", "x": "round", "y": "coverage"}},
    _bars("NoteChat Table 3, ROUGE-1", "02_notechat", "table3", "ROUGE1", "system"),
    _bars("NoteChat Table 3, concept F1", "02_notechat", "table3", "Concept-F1", "system"),
    _bars("Annotation, tie ratio per strategy", "04_annotation", "summary", "tie_ratio",
          "strategy"),
    _bars("Annotation, median CAI margin per strategy", "04_annotation", "margins", "median",
          "strategy"),
    _bars("Annotation (Fig. 11), share of ties per strategy", "04_annotation",
          "source_preferences", "tie", "strategy"),
    _scatter("Annotation statistics on the weighting x trajectory grid, mean CAI margin by "
             "trajectory length", "04_annotation_grid_table", "grid_annotation_stats",
             "trajectory", "margin_mean"),
    _scatter("imapScore Table 2, Spearman ρ against Kendall τ — one point per metric x "
             "system x dimension", "07_imapscore", "correlations_long", "tau", "rho"),
    _bars("RagPULSE Table 3, document HR@10 per query source", "08_medqa",
          "table3_retrieval", "doc_HR@10", "query"),
    _bars("RagPULSE Table 3, attribute HR@10 per query source", "08_medqa",
          "table3_retrieval", "attr_HR@10", "query"),
    _bars("RagPULSE Table 2, instruction-follow rate per model", "08_medqa", "table2_models",
          "ins_follow_rate", "model"),
    _bars("RagPULSE Elo rating per model", "08_medqa", "ratings", "elo", "model"),
    {"training_loss": {"template": "linear", "x": "step", "y": {
        "reports/05_training/sft/log_history.csv": "loss", **dict.fromkeys(_DPO_LOGS, "loss")}}},
    {"dpo_reward_accuracy": {"template": "linear", "x": "step",
                             "y": dict.fromkeys(_DPO_LOGS, "rewards/accuracies")}},
]

PIPELINE = Pipeline(
    header="Generated by `medpref dvc-yaml` (`make dvc-yaml`) from src/medpref/dvcstages.py: "
           "edit a stage there, never here (tests/test_dvc_generated.py fails on any "
           "difference). Every stage runs its notebook with papermill; the executed copy is "
           "saved under reports/notebooks/. Each stage lists exactly the code (the import "
           "closure of its notebook), data, prompts and params keys it reads. Tables, "
           "figures and metrics are small and committed (cache: false) so reviewers see "
           "them without running anything; datasets, executed notebooks and LLM caches are "
           "DVC-cached. The LLM cache files persist across runs (a warm rerun makes no "
           "calls).",
    stages=STAGES,
    plots_note="`dvc plots show` (or `make plots`) draws these from the committed tables into "
               "dvc_plots/index.html; `dvc plots diff <rev>` compares them across "
               "commits/experiments. One entry per curve or score table the pipeline writes; "
               "the PNG figures are the papers' layouts, these are the quick, diffable views. "
               "The training curves: every training run's loss and accuracies in one view, "
               "beside the stage-level margin plots above.",
    plots=PLOTS,
)
