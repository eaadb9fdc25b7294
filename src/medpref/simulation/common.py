"""What stage 06's four dvc stages share, and nothing else: the SP cases and the
next-turn dialogues they read, the doctors under test and their clients, the judge a
model-graded step uses, the REM scorer, and the stage object each of the three later
stages is opened as.

Stage 06 is four dvc stages over one params section (``simulation``):

* ``simulation`` (:mod:`~medpref.simulation.stage`): the doctors' SP consultations, the
  patient's sentences, the REM's reading of the transcripts, the split-overlap check;
* ``next_turn`` (:mod:`~medpref.simulation.nextturn_stage`): each doctor's next turn on
  held-out dialogues, with the GPD judge and its check;
* ``heldout`` (:mod:`~medpref.simulation.heldout_stage`): held-out process compliance;
* ``sp_grading`` (:mod:`~medpref.simulation.grading_stage`): the checklist grades of the
  recorded consultations, the controls' gate, the grader's validation, Table 2 and all
  built from it.

Each writes its own ``reports/06_*`` folder and keeps its own LLM cache; none imports
another's run module, so a change to one stage's code reruns that stage (and the stages
that read its records), not the others.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medpref.contracts import Dialogue, SPCase, read_jsonl
from medpref.llm.types import CallSpec
from medpref.outputs import StageOutputs
from medpref.params import repo_path
from medpref.simulation.config import DoctorConfig, SimulationParams
from medpref.simulation.doctors import all_doctors, trained_doctors
from medpref.stagekit import Stage

# -- the stage object ---------------------------------------------------------------------

@dataclass
class SectionStage(Stage):
    """A later stage of stage 06: its own folders and LLM cache (its name), the params
    section of stage 06 (``simulation``)."""

    @property
    def key(self) -> str:
        return "simulation"


def open_section_stage(stage: Stage, name: str) -> SectionStage:
    """``stage`` (as ``open_stage`` opened it) as stage 06's stage ``name``; its LLM cache
    is opened at once, so the file exists even when no call is made."""
    opened = SectionStage(name=name, params=stage.params, started=stage.started)
    _ = opened.llm
    return opened


@dataclass(frozen=True)
class ReadingOutputs(StageOutputs):
    """A stage's outputs whose builders also read the records of the stages in ``reads``
    (loaded from their folders under the same ``reports/``; never written here)."""

    reads: tuple[StageOutputs, ...] = field(default_factory=tuple)

    def load_records(self, reports_dir: Path) -> dict[str, list[dict[str, Any]]]:
        theirs = {name: rows for up in self.reads
                  for name, rows in up.load_records(up.reports_dir(self.root(reports_dir))
                                                    ).items()}
        return {**theirs, **self.own_records(reports_dir)}

    def own_records(self, reports_dir: Path) -> dict[str, list[dict[str, Any]]]:
        """Only the records this stage writes."""
        return StageOutputs.load_records(self, reports_dir)

    def root(self, reports_dir: Path) -> Path:
        """The folder whose ``reports/`` holds ``reports_dir`` (the repository's root)."""
        return reports_dir.parents[len(Path(self.folder or self.stage).parts)]

    def read_records(self, reports_dir: Path) -> dict[str, list[dict[str, Any]]]:
        """The records of the stages this one reads (an absent file is an error naming the
        stage to run first)."""
        out: dict[str, list[dict[str, Any]]] = {}
        for up in self.reads:
            folder = up.reports_dir(self.root(reports_dir))
            absent = [r.name for r in up.records if not r.path(folder).exists()]
            if absent:
                raise FileNotFoundError(f"{folder}/records: no {absent} (run the stage that "
                                        f"writes {up.stage} first: dvc repro)")
            out.update(up.load_records(folder))
        return out


# -- inputs ---------------------------------------------------------------------------------

def select_cases(cases: Sequence[SPCase], n: int | None, ids: Sequence[str] | None
                 ) -> list[SPCase]:
    """``ids`` if given; else the first ``n`` in round-robin over departments (file
    order), so a small subset spans departments; ``n=None``: all."""
    if ids:
        by_id = {c.id: c for c in cases}
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise KeyError(f"simulation.case_ids: no case {missing}")
        return [by_id[i] for i in ids]
    if n is None or n >= len(cases):
        return list(cases)
    queues: dict[str, list[SPCase]] = {}
    for c in cases:
        queues.setdefault(c.department, []).append(c)
    picked: list[SPCase] = []
    while len(picked) < n:
        for q in queues.values():
            if q and len(picked) < n:
                picked.append(q.pop(0))
    return picked


def load_cases(p: SimulationParams) -> list[SPCase]:
    """The SP cases: embedded JSONL or a real set through its adapter."""
    from medpref.data import adapters

    if p.source == "agentclinic":
        return adapters.agentclinic_cases(p.source_root, p.source_limit, file=p.agentclinic_file)
    if p.source == "cspt":
        if not p.source_root:
            raise ValueError("simulation.source 'cspt' needs simulation.source_root (the "
                             "CSPT folder or zip)")
        return adapters.cspt_cases(repo_path(p.source_root))[:p.source_limit]
    return read_jsonl(repo_path(p.cases), SPCase)


def held_out_dialogues(p: SimulationParams, params=None) -> list[Dialogue]:
    """The next-turn dialogues. Of a real set: its ``source_split``, ``dialogue_ids`` or
    else the last ``n_dialogues``. Of the embedded file: only the written split's eval
    part (``params``: the whole params, whose ``shared.split`` names it), ``dialogue_ids``
    (each must be an eval dialogue) or else the last ``n_dialogues`` of that part."""
    from medpref.simulation.heldout import eval_dialogues

    nt = p.next_turn
    if nt.source != "embedded":
        from medpref.data import adapters

        load = {"mts_dialog": adapters.mts_dialogues, "aci_bench": adapters.aci_dialogues}
        dialogues = load[nt.source](nt.source_split)
        if nt.dialogue_ids:
            return [d for d in dialogues if d.id in set(nt.dialogue_ids)]
        return dialogues[-nt.n_dialogues:]
    from medpref.data.split import load_split
    from medpref.params import SharedParams

    split = load_split(repo_path((params.shared if params is not None else SharedParams()).split))
    dialogues = eval_dialogues(repo_path(nt.dialogues), split)
    if nt.dialogue_ids:
        outside = [i for i in nt.dialogue_ids if split.part(i) != "eval"]
        if outside:
            raise ValueError(f"simulation.next_turn.dialogue_ids: {outside} are not in the eval "
                             f"part of {split.path}")
        return [d for d in dialogues if d.id in set(nt.dialogue_ids)]
    return dialogues[-nt.n_dialogues:]


# -- doctors ----------------------------------------------------------------------------------

def doctors_of(stage, p: SimulationParams) -> list[DoctorConfig]:
    """The model doctors (configured, then trained policies), then the controls."""
    trained = []
    if p.trained_policies and "training" in stage.params.raw:
        trained = trained_doctors(stage.params)
    return [*all_doctors(p.doctors, trained), *control_doctors(p)]


def model_doctors(stage, p: SimulationParams) -> list[DoctorConfig]:
    """The doctors with a model (no control), in :func:`doctors_of`'s order."""
    return [d for d in doctors_of(stage, p) if d.kind == "model"]


def trained_names(doctors: Sequence[DoctorConfig]) -> list[str]:
    """The trained policies among the doctors under test: models with an adapter."""
    return [d.name for d in doctors if d.kind == "model" and d.adapter]


def control_doctors(p: SimulationParams) -> list[DoctorConfig]:
    return [DoctorConfig(name=name, role="", kind="control") for name in p.controls]


def doctor_client(stage, d: DoctorConfig):
    return stage.role(d.role, adapter=d.adapter) if d.adapter else stage.role(d.role)


# -- judges -----------------------------------------------------------------------------------

def make_judge(stage, p: SimulationParams, call: CallSpec):
    """A judge that answers as ``call`` says and decodes as ``simulation.grader`` says."""
    from medpref.simulation.grading import Judge

    g = p.grader
    return Judge(stage.role(call.role), call, mode=g.mode, k=g.k, temperature=g.temperature,
                 min_mass=g.min_mass, seed=stage.seed)


def rem_scorer(stage, p: SimulationParams):
    """Stage 03's REM named ``simulation.rem_scorer`` (built as stage 03 builds it); with
    none named, its fine-tuned REM when the adapter exists, else the in-context one.
    Returns (scorer, flowchart, its name)."""
    from medpref.contracts import RemAnnotation
    from medpref.remscore.scorers import build_scorer, finetuned_settings, scorer_from_settings
    from medpref.rules import load_rules

    flowchart = load_rules(repo_path(p.rules))
    if p.rem_scorer:
        rem = stage.params.rem
        if p.rem_scorer not in rem.scorers:
            raise ValueError(f"simulation.rem_scorer '{p.rem_scorer}' is not in rem.scorers "
                             f"({sorted(rem.scorers)})")
        return (scorer_from_settings(p.rem_scorer, rem.scorers[p.rem_scorer], stage.llm, rem,
                                     flowchart, stage.seed), flowchart, p.rem_scorer)
    call = p.call("rem_comment")
    if p.rem_adapter and (repo_path(p.rem_adapter) / "adapter_config.json").exists():
        client = stage.role(call.role, adapter=p.rem_adapter)
        return build_scorer("finetuned", client, flowchart, [], call=call,
                            **finetuned_settings(repo_path(p.rem_adapter))), flowchart, "finetuned"
    examples = read_jsonl(repo_path(p.rem_icl_examples), RemAnnotation)
    return (build_scorer("expected", stage.role(call.role), flowchart, examples, call=call,
                         n_examples=1), flowchart, "expected")


def rem_settings(p: SimulationParams, mode: str, scorer) -> dict[str, Any]:
    """What of the REM determines a record it judged (hashed into the record's key)."""
    from medpref.identity import content_id

    return {"mode": mode, "rules": content_id(repo_path(p.rules)),
            "scorer": getattr(getattr(scorer, "client", None), "identity", None)}


def turns_of(turns) -> list[dict]:
    return [{"role": t.role, "text": t.text} for t in turns]


def as_json(value):
    """``value`` as its records read back (tuples as lists, numpy numbers as Python
    ones), so the gates judge what the tables will be built from."""
    from medpref.outputs import _plain

    return json.loads(json.dumps(value, ensure_ascii=False, default=_plain))


def set_threads(p: SimulationParams) -> None:
    """``simulation.torch_threads``, when set."""
    if p.torch_threads is not None:
        import torch

        torch.set_num_threads(p.torch_threads)
