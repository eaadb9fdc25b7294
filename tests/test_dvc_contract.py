"""dvc.yaml tied to what the stages wrote.

dvc.yaml is generated (``medpref dvc-yaml``; tests/test_dvc_generated.py): each stage's
code deps are the import closure of its notebook (:mod:`medpref.importwalk`) and its
outputs its outputs list, so neither is checked by hand here. What the generator cannot
know is what a run left behind: each stage's declared report outputs must equal what it
wrote — the files committed under ``reports/`` (tables, figures, metrics are
``cache: false`` and committed) must each be declared by the stage that owns that folder,
and each ``cache: false`` output under ``reports/`` must be committed. A report a stage
starts writing and its outputs list does not declare, or one it stops writing that the
list still declares, fails here.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from medpref import REPO_ROOT
from medpref.importwalk import stage_code

SPEC = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text(encoding="utf-8"))
# a `foreach` stage keeps its definition under `do`; read it like any other stage
STAGES: dict = {name: {**{k: v for k, v in st.items() if k != "do"}, **st.get("do", {})}
                for name, st in SPEC["stages"].items()}


def test_the_import_walk_finds_what_a_stage_uses():
    """The walk itself: stage 08's closure holds its stage module and the shared ones, and
    not a module only the interactive hand-grading notebook imports."""
    files = {p.relative_to(REPO_ROOT).as_posix() for p in stage_code(STAGES["medqa"]["cmd"])}
    for expected in ("src/medpref/__init__.py", "src/medpref/medqa/stage.py",
                     "src/medpref/params.py", "src/medpref/contracts.py"):
        assert expected in files
    sim = {p.relative_to(REPO_ROOT).as_posix()
           for p in stage_code(STAGES["simulation"]["cmd"])}
    assert "src/medpref/simulation/stage.py" in sim
    assert "src/medpref/simulation/handgrading.py" not in sim


# -- (b) declared report outputs equal what the stages wrote ----------------------------------

def out_paths(stage: dict, uncached_only: bool = False) -> list[str]:
    paths = []
    for entry in stage.get("outs", []) + stage.get("metrics", []) + stage.get("plots", []):
        if isinstance(entry, dict):
            (path, props), = entry.items()
            if uncached_only and (props or {}).get("cache", True):
                continue
        else:
            path = entry
            if uncached_only:
                continue
        paths.append(path)
    return paths


def expand(path: str, stage: dict) -> list[str]:
    """A matrix stage's ``${item.x}`` paths, one per combination of its matrix."""
    if "${" not in path:
        return [path]
    if "foreach" in stage:  # ${key} over a params mapping's keys, ${item} over a list
        node = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
        ref = stage["foreach"]
        if isinstance(ref, str):
            for part in ref.strip("${}").split("."):
                node = node[part]
        else:
            node = ref
        if isinstance(node, list):
            return [path.replace("${item}", str(k)) for k in node]
        return [path.replace("${key}", str(k)) for k in node]
    matrix = {k: v for k, v in stage.get("matrix", {}).items()}
    for key, value in list(matrix.items()):
        if isinstance(value, str):  # e.g. ${annotation.grid.weightings}
            ref = value.strip("${}").split(".")
            node = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
            for part in ref:
                node = node[part]
            matrix[key] = node
    combos = [{}]
    for key, values in matrix.items():
        combos = [{**c, key: v} for c in combos for v in values]
    return [re.sub(r"\$\{item\.(\w+)\}", lambda m, c=c: str(c[m.group(1)]), path)
            for c in combos]


def declared_reports() -> dict[str, str]:
    """Every ``cache: false`` output under reports/ → the stage that declares it."""
    owners = {}
    for name, stage in STAGES.items():
        for path in out_paths(stage, uncached_only=True):
            for concrete in expand(path, stage):
                if concrete.startswith("reports/"):
                    owners[concrete] = name
    return owners


def committed_reports() -> set[str]:
    out = subprocess.run(["git", "ls-files", "reports"], cwd=REPO_ROOT, capture_output=True,
                         text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return {p for p in out.stdout.splitlines() if not p.startswith("reports/notebooks/")}


def report_folders() -> set[str]:
    """reports/<folder> that some stage declares outputs in."""
    return {"/".join(p.split("/")[:2]) for p in declared_reports()}


def test_every_committed_report_is_declared():
    declared = declared_reports()
    folders = report_folders()
    undeclared = sorted(p for p in committed_reports() - set(declared)
                        if "/".join(p.split("/")[:2]) in folders
                        and not any(p.startswith(d + "/") for d in declared))  # in an out folder
    assert not undeclared, ("files a stage wrote under reports/ that dvc.yaml does not "
                            "declare (add them as outs with cache: false, or stop writing "
                            "them):\n" + "\n".join(f"  {p}" for p in undeclared))


def locked_stages() -> set[str]:
    """Stages dvc.lock records as run (``name`` or ``name@item`` → ``name``)."""
    lock_path = REPO_ROOT / "dvc.lock"
    if not lock_path.exists():
        return set()
    lock = yaml.safe_load(lock_path.read_text(encoding="utf-8")) or {}
    return {key.split("@")[0] for key in lock.get("stages", {})}


def awaiting_records() -> tuple[str, ...]:
    """The record folders of the stages whose first records are not committed yet
    (``medpref.pipeline.AWAITING_RECORDS``)."""
    from medpref.outputs import RECORDS_DIR
    from medpref.pipeline import AWAITING_RECORDS
    from medpref.pipeline import STAGES as OUTPUTS

    return tuple(f"{OUTPUTS[n].reports_dir(Path('.')).as_posix()}/{RECORDS_DIR}/"
                 for n in AWAITING_RECORDS)


def test_every_declared_report_was_written():
    """Every report a stage that has run declares is committed (a stage dvc.lock does not
    record yet — a new stage never run — has nothing to check; nor have the records of a
    stage awaiting its first records)."""
    committed, ran, awaiting = committed_reports(), locked_stages(), awaiting_records()
    missing = sorted(f"{p} (stage {s})" for p, s in declared_reports().items()
                     if s in ran and p not in committed and not p.startswith(awaiting)
                     and not any(c.startswith(p + "/") for c in committed))  # a folder out
    assert not missing, ("dvc.yaml declares report outputs that are not committed (the stage "
                         "no longer writes them, or it has not been run and committed):\n"
                         + "\n".join(f"  {m}" for m in missing))


def test_no_report_folder_is_orphaned():
    """A committed reports/<folder> that no stage declares anything in (a renamed stage)."""
    folders = report_folders()
    orphans = sorted({"/".join(p.split("/")[:2]) for p in committed_reports()} - folders)
    assert not orphans, f"committed report folders no dvc stage writes: {orphans}"
