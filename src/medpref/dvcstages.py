"""Every dvc stage, declared once: what it runs, what it reads that is not Python, its
params keys, and its outputs list. ``medpref dvc-yaml`` (``make dvc-yaml``) writes
dvc.yaml from :data:`PIPELINE`; tests/test_dvc_generated.py fails when dvc.yaml differs.

A stage's code deps are not typed here: they are the import closure of its notebook
(:mod:`medpref.importwalk`). Nor are the prompt and input files its params keys name, or
the ``shared.llm.roles.<role>`` keys of the roles they name: the generator reads them from
params.yaml (:func:`medpref.dvcgen.params_deps`); only what no params key names is listed.
The keys of a section a stage reads key by key are not typed either: its ``sections``
name the model whose fields say which stages read them (``ReadBy``,
:func:`medpref.dvcgen.section_params`).
Its outputs come from its :class:`~medpref.outputs.StageOutputs` (imported below;
:data:`medpref.pipeline.STAGES` lists them in this file's order); a stage without one (an
index, the models, a DPO run, a grid cell) names its data and report files here. A file
another stage writes for it is named through the writer's outputs list (:func:`produced`).
Adding a stage: write its entry below, run ``make dvc-yaml``, commit both
(docs/extending.md).
"""

from __future__ import annotations

from pathlib import Path

from medpref.annotation.config import AnnotationParams
from medpref.annotation.grid_outputs import OUTPUTS as ANNOTATION_GRID_TABLE
from medpref.annotation.outputs import OUTPUTS as ANNOTATION
from medpref.dvcgen import Dep, DvcStage, Pipeline, Plot
from medpref.handoffs import POLICY_ADAPTERS, POLICY_ROLES
from medpref.imap.outputs import OUTPUTS as IMAPSCORE
from medpref.medqa.outputs import OUTPUTS as MEDQA
from medpref.notechat.outputs import OUTPUTS as NOTECHAT
from medpref.outputs import Data
from medpref.papertables.outputs import OUTPUTS as PAPER_TABLES
from medpref.params import EMBEDDED_LLM
from medpref.rem.outputs import OUTPUTS as REM
from medpref.sampling.outputs import OUTPUTS as SAMPLING
from medpref.simulation.config import SimulationParams
from medpref.simulation.grading_outputs import OUTPUTS as SP_GRADING
from medpref.simulation.heldout_stage import OUTPUTS as HELDOUT
from medpref.simulation.nextturn_stage import OUTPUTS as NEXT_TURN
from medpref.simulation.outputs import OUTPUTS as SIMULATION
from medpref.training.config import TrainingParams
from medpref.training.outputs import SFT_OUTPUTS as TRAINING_SFT
from medpref.training.outputs import SUMMARY_OUTPUTS as TRAINING

#: each stage's outputs list by its name (the ``outputs=`` of its declaration below)
OUT = {o.stage: o for o in (SAMPLING, NOTECHAT, REM, ANNOTATION, ANNOTATION_GRID_TABLE,
                            TRAINING_SFT, TRAINING, SIMULATION, NEXT_TURN, HELDOUT,
                            SP_GRADING, IMAPSCORE, MEDQA, PAPER_TABLES)}

MODELS = Dep("models", "every model folder (content; .dvcignore leaves out wheels)")
HARDWARE = ("configs/hardware/cpu.yaml", "configs/hardware/gpu.yaml")
STRATEGIES_BY_NAME = Dep("medpref.annotation", "the folder: a strategy module is found by "
                         "name (medpref.registry), control_process too")


def prompts(*names: str) -> list[str]:
    """Prompt files a stage reads that no params key of its names."""
    return [f"configs/prompts/{n}.yaml" for n in names]


def produced(stage: str, name: str) -> str:
    """The data product ``name`` (its last path part) that ``stage``'s outputs list declares:
    a hand-off named by the stage that writes it (an unknown name is an error)."""
    paths = [d.path for d in OUT[stage].data if Path(d.path).name == name]
    if len(paths) != 1:
        raise ValueError(f"{stage} declares no data product '{name}'")
    return paths[0]


def _csv(stage: str, table: str) -> str:
    """A table's CSV as the stage's outputs list writes it (an unknown name is an error)."""
    outputs = OUT[stage]
    names = {o.name for o in outputs.built}
    if table not in names:
        raise ValueError(f"{stage} declares no table '{table}'")
    return f"{outputs.reports_dir(Path('.')).as_posix()}/{table}.csv"


# -- stage 04: the parts the grid cells share ---------------------------------------------------
REM_ADAPTER = produced("03_rem", "rem_lora")
#: what a fitted REM scorer reads (rem.fitted) from stage 03: its models (its word lists
#: are named by rem.fitted.lexicon)
FITTED_REM = [produced("03_rem", "rem_encoder")]
ANNOTATION_READS = [produced("01_sampling", "unlabeled.jsonl"), REM_ADAPTER, *FITTED_REM,
                    Dep(_csv("03_rem", "thresholds"), "annotation.rem_thresholds: Eq. 4's "
                        "'met' cut per rule when annotation.scoring.met is rem_dev")]
SFT_POLICY = produced("05_training_sft", "sft")


def records_of(outputs) -> list[Dep]:
    """Every record file of ``outputs``' stage, as a dep of a stage that reads them."""
    folder = outputs.reports_dir(Path(".")).as_posix()
    return [Dep(f"{folder}/records/{r.name}.jsonl", f"records of {outputs.stage}")
            for r in outputs.records]


# -- stage 05: one notebook, three parts; every DPO run (strategy or grid cell) alike -------
#: the seed every training run reads (the trainer's, the SFT examples' and the pairs'
#: subsets, the held-out folds): typed, as no one ``training`` field brings it; the rest of
#: a part's keys are its ``training`` fields' (``sections=[TrainingParams]``)
RUN_SEED = ("shared.seed",)


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
        deps=[*HARDWARE, SFT_POLICY, pairs, MODELS], params=RUN_SEED,
        sections=[TrainingParams])


#: every stage, in a dependency order: a stage comes after the stages whose outputs it reads
#: (tests/test_dvc_generated.py checks it), so :data:`medpref.pipeline.STAGES` (the
#: stages' outputs lists in this order) rebuilds a stage's tables after those it reads
STAGES = [
    DvcStage(
        "models", module="medpref.models.prepare", params=[],
        comment="The embedded models as a stage, so `dvc exp run --temp/--queue` workspaces "
                "(and a DVC remote) get them from the DVC cache like any other output. "
                "`make models` runs it.",
        data=(Data(EMBEDDED_LLM), Data("models/all-minilm-l6-v2"),
              Data("models/manifest.json"))),
    DvcStage(
        "sampling", notebook="01_sampling", outputs=SAMPLING, llm=True,
        why={"shared.split": "stage 01 samples its train part"}, deps=[MODELS],
        params=["shared.seed", "shared.split", "shared.llm.max_cost_usd", "shared.llm.prices",
                "shared.llm.servers", "sampling"]),
    DvcStage(
        "notechat_index", module="medpref.notechat.lexicon_index",
        args="data/embedded/lexicon data/02_notechat/quickumls_index",
        data=(Data("data/02_notechat/quickumls_index"),),
        deps=["data/embedded/lexicon"], params=[]),
    DvcStage(
        "notechat", notebook="02_notechat", outputs=NOTECHAT, llm=True,
        unread=["notechat.lexicon"],   # stage notechat_index builds the index from it
        deps=["configs/notechat",
              Dep("data/embedded/turn_quality_notes.jsonl",
                  "the labels' notes (the note read aloud)"),
              "data/02_notechat/quickumls_index", MODELS],
        params=["shared.seed", "notechat"]),
    DvcStage(
        "rem", notebook="03_rem", outputs=REM, llm=True,
        unread=["rem.construction"],   # the generator's (python -m medpref.rem.constructions)
        why={"rem.constructed": "generated by python -m medpref.rem.constructions",
             "rem.independent": "turns no construction made, labelled blind",
             "rem.turns.files": "labelled turns the REM learns from",
             "rem.fitted.lexicon": "the surface word lists",
             "shared.split": "hand training rows sharing text with an eval dialogue are left "
                             "out"},
        deps=[*HARDWARE, MODELS], params=["shared.seed", "shared.split", "rem"]),
    DvcStage(
        "annotation", notebook="04_annotation", outputs=ANNOTATION, llm=True,
        comment="Stage 04 scores with stage 03's REM by name (annotation.rem_scorer → "
                "rem.scorers): the adapter, the scorer settings and the Table 5 row it shows "
                "are its dependencies.",
        by_name=[STRATEGIES_BY_NAME],
        why={"shared.split": "items of dev/eval dialogues are refused",
             "annotation.control": "control_process: the dialogues whose train part it reads"},
        deps=[*ANNOTATION_READS, _csv("03_rem", "table5"), MODELS],
        params=["shared.seed", "shared.split"], sections=[AnnotationParams]),
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
        why={"shared.split": "items of dev/eval dialogues are refused"},
        deps=[*ANNOTATION_READS, MODELS, "data/cache/llm/04_annotation.sqlite"],
        params=["shared.seed", "shared.split"], sections=[AnnotationParams]),
    DvcStage(
        "annotation_grid_table", notebook="04_annotation_grid_table",
        outputs=ANNOTATION_GRID_TABLE,
        deps=["reports/04_annotation/grid",
              Dep("data/04_annotation/grid", "the cells' decisions (records: decisions.jsonl)"),
              "reports/04_annotation/summary.csv"],
        params=[], sections=[AnnotationParams]),
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
        outputs=TRAINING_SFT,
        plots=(Plot("log_history.csv", "step", "loss", "SFT loss (doctor turns only)"),
               Plot("dev_loss.csv", "epoch", "dev_loss", "SFT development loss per epoch "
                    "(epoch 0 the base model; the lowest is kept)")),
        why={"shared.split": "train: trained on; dev: the epoch's loss; eval: never"},
        deps=[*HARDWARE,
              *prompts("notechat_doctor", "notechat_patient", "notechat_planning",
                       "notechat_polish", "notechat_single_prompt"),
              produced("02_notechat", "dialogues.jsonl"), MODELS],
        params=RUN_SEED, sections=[TrainingParams]),
    dpo_stage("training_dpo", "${item}", "data/04_annotation/pairs/${item}.jsonl",
              "${annotation.strategies}", "the pairs file stage 04 writes for each"),
    dpo_stage("training_dpo_grid", "${key}", "${item}", "${training.dpo.runs}", "",
              comment="the other DPO runs (training.dpo.runs: run → pairs file), as "
                      "training_dpo does them"),
    DvcStage(
        "training", notebook="05_training", executed="05_training/summary",
        nb_params=(("part", "summary"),), outputs=TRAINING,
        deps=[*HARDWARE, SFT_POLICY, "data/05_training/dpo",
              "reports/05_training/dpo",
              Dep("data/04_annotation/grid", "each grid cell's cell.json: the Table 3 cell "
                  "of a run trained on its pairs (the policy record's cell)")],
        notes={"training.recipe": "the notebook shows the recipe and hardware it checks"},
        params=[], sections=[TrainingParams]),
    DvcStage(
        "simulation", notebook="06_simulation", outputs=SIMULATION, llm=True,
        comment="Stage 06, the doctors: Standardized Patient consultations (PLPF §3, App. "
                "B) of the base model, every trained policy (stage 05 runs that trained) "
                "and the controls, the REM's reading of their transcripts, the SP cases "
                "against the split. Their next turn, held-out compliance and grades are "
                "stages next_turn, heldout and sp_grading.",
        deps=[REM_ADAPTER, *FITTED_REM,
              Dep(POLICY_ROLES, "the trained policies stage 06 tests (stage 05's hand-off)"),
              *POLICY_ADAPTERS, MODELS],
        params=["shared.seed", "shared.split"], sections=[SimulationParams]),
    DvcStage(
        "next_turn", notebook="06_next_turn", outputs=NEXT_TURN, llm=True,
        comment="Stage 06, the next turn: every model doctor's next turn on held-out "
                "dialogues (PLPF Tables 4 and 6, Fig. 4), BLEU-4, ROUGE-L and the GPD "
                "judge with its check.",
        why={"shared.split": "the next-turn items come from the split's eval part"},
        deps=[Dep(POLICY_ROLES, "the trained policies (stage 05's hand-off)"),
              *POLICY_ADAPTERS, MODELS],
        params=["shared.seed", "shared.split"], sections=[SimulationParams]),
    DvcStage(
        "heldout", notebook="06_heldout", outputs=HELDOUT, llm=True,
        comment="Stage 06, held-out process compliance: each policy's next turn on states "
                "of the split's eval dialogues, scored per rule by stage 03's REM beside "
                "the controls, against SFT; and the share of turns that ask (the SP "
                "openings from stage simulation's records).",
        why={"shared.split": "the held-out states come from the split's eval part"},
        deps=[REM_ADAPTER, *FITTED_REM,
              Dep(POLICY_ROLES, "the trained policies (stage 05's hand-off)"),
              *POLICY_ADAPTERS, *records_of(SIMULATION), MODELS],
        params=["shared.seed", "shared.split"], sections=[SimulationParams]),
    DvcStage(
        "sp_grading", notebook="06_sp_grading", outputs=SP_GRADING, llm=True,
        comment="Stage 06, the grading: every SP consultation's checklist grades (Eq. 6), "
                "the controls' gate, the grader against the hand-graded items, Table 2 and "
                "what is built from it, from the consultations stage simulation recorded (no "
                "doctor model): a change to the grader reruns this stage alone.",
        deps=[*records_of(SIMULATION), *records_of(NEXT_TURN), MODELS],
        params=["shared.seed", Dep("annotation.grid.weightings",
                                   "Table 3's cells when no grid policy was SP-tested"),
                "annotation.grid.trajectories"], sections=[SimulationParams]),
    DvcStage(
        "imapscore", notebook="07_imapscore", outputs=IMAPSCORE, llm=True,
        deps=[MODELS], params=["shared.seed", "imapscore"]),
    DvcStage(
        "medqa", notebook="08_medqa", outputs=MEDQA, llm=True,
        deps=[MODELS], params=["shared.seed", "medqa"]),
    DvcStage(
        "tables", notebook="09_tables", outputs=PAPER_TABLES, also=["reports/index.md"],
        metrics="The only metrics file: the headline numbers of configs/paper_tables.yaml "
                "(`dvc metrics show`, `dvc exp show`); every stage's full metrics.json is a "
                "plain output.",
        deps=["reports/02_notechat", "reports/03_rem",
              "reports/04_annotation/metrics.json", "reports/04_annotation/summary.csv",
              "reports/04_annotation/source_preferences.png", "reports/06_simulation",
              "reports/06_next_turn", "reports/06_heldout", "reports/06_sp_grading",
              "reports/07_imapscore", "reports/08_medqa"],
        params=["tables"]),
]


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
