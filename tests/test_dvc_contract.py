"""dvc.yaml tied to the code.

(a) Each stage's declared dependencies cover the code it runs: the notebook (or the
    ``python -m`` module) of its ``cmd``, followed through every ``import medpref...`` —
    module level and inside functions — to the module files under ``src/medpref``, plus the
    ``__init__.py`` of each package on the way. Every one of those files must be a declared
    dep or lie under a declared dep folder; the failure lists, per stage, what to add.
    Imports made by name at run time (``params.SECTIONS``: each params section's model
    is imported when params.yaml is validated) are not followed: a stage's own section
    model is already in its closure through its domain code.
(b) Each stage's declared report outputs equal what it wrote: the files committed under
    ``reports/`` (tables, figures, metrics are ``cache: false`` and committed) must each be
    declared by the stage that owns that folder, and each ``cache: false`` output under
    ``reports/`` must be committed. A report a stage starts writing and dvc.yaml does not
    declare, or one it stops writing that dvc.yaml still declares, fails here.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest
import yaml

from medpref import REPO_ROOT

SRC = REPO_ROOT / "src"
SPEC = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text(encoding="utf-8"))
# a `foreach` stage keeps its definition under `do`; read it like any other stage
STAGES: dict = {name: {**{k: v for k, v in st.items() if k != "do"}, **st.get("do", {})}
                for name, st in SPEC["stages"].items()}


# -- (a) code deps cover the import closure ---------------------------------------------------

def module_file(name: str) -> Path | None:
    """``medpref.a.b`` → its file (``a/b.py`` or ``a/b/__init__.py``), None if absent."""
    base = SRC.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def package_inits(name: str) -> list[Path]:
    """``medpref.a.b`` → ``medpref/__init__.py``, ``medpref/a/__init__.py`` (those that exist)."""
    parts = name.split(".")
    inits = [SRC.joinpath(*parts[:i], "__init__.py") for i in range(1, len(parts))]
    return [p for p in inits if p.is_file()]


def imported_modules(tree: ast.AST, current: str | None = None) -> set[str]:
    """Every ``medpref`` module a syntax tree imports (``from m import x`` counts
    ``m.x`` when that is a module itself). ``current`` resolves relative imports."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level and current:
                package = current.split(".")
                # a module's package is its name minus the last part (an __init__ is its own)
                is_pkg = module_file(current) and module_file(current).name == "__init__.py"
                anchor = package if is_pkg else package[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names
                         if module_file(f"{base}.{a.name}") is not None)
    return {m for m in found if m == "medpref" or m.startswith("medpref.")}


def notebook_tree(path: Path) -> ast.AST:
    """All code cells of a notebook as one module (IPython magics and shell lines dropped)."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    lines = []
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        lines += [ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!"))]
        lines.append("")
    return ast.parse("\n".join(lines))


@cache
def _module_closure(name: str) -> frozenset[Path]:
    return frozenset(closure_files({name}))


def closure_files(roots: set[str]) -> set[Path]:
    """Files of the modules ``roots`` import, transitively, with their packages' inits."""
    seen: set[str] = set()
    todo = list(roots)
    files: set[Path] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = module_file(name)
        if path is None:
            continue
        files.add(path)
        files.update(package_inits(name))
        todo.extend(imported_modules(ast.parse(path.read_text(encoding="utf-8")), name))
    return files


def entry_points(cmd: str) -> tuple[list[Path], set[str]]:
    """The notebooks a stage command runs (its first .ipynb argument) and its ``-m`` module."""
    notebooks = []
    match = re.search(r"papermill\s.*?(\S+\.ipynb)", cmd, re.S)
    if match:
        notebooks.append(REPO_ROOT / match.group(1))
    modules = set(re.findall(r"python[\d.]*\s+-m\s+([\w.]+)", cmd))
    return notebooks, modules


def stage_code(stage: dict) -> set[Path]:
    notebooks, modules = entry_points(stage["cmd"])
    roots = set(modules)
    for nb in notebooks:
        roots |= imported_modules(notebook_tree(nb))
    files: set[Path] = set()
    for root in roots:
        files |= _module_closure(root)
    return files


def dep_paths(stage: dict) -> list[str]:
    return [next(iter(d)) if isinstance(d, dict) else d for d in stage.get("deps", [])]


def uncovered(stage: dict) -> list[str]:
    deps = [REPO_ROOT / d for d in dep_paths(stage)]
    missing = []
    for path in sorted(stage_code(stage)):
        if not any(path == d or d in path.parents for d in deps):
            missing.append(path.relative_to(REPO_ROOT).as_posix())
    return missing


def test_the_import_walk_finds_what_a_stage_uses():
    """The walk itself: stage 08's closure holds its stage module and the shared ones."""
    files = {p.relative_to(REPO_ROOT).as_posix() for p in stage_code(STAGES["medqa"])}
    for expected in ("src/medpref/__init__.py", "src/medpref/medqa/stage.py",
                     "src/medpref/params.py", "src/medpref/contracts.py"):
        assert expected in files


def test_uncovered_reports_a_missing_dep():
    stage = dict(STAGES["medqa"])
    stage["deps"] = [d for d in dep_paths(stage) if d != "src/medpref/medqa"]
    assert "src/medpref/medqa/stage.py" in uncovered(stage)


STAGE_NAMES = [n for n, s in STAGES.items() if entry_points(s["cmd"]) != ([], set())]


@pytest.mark.parametrize("name", STAGE_NAMES)
def test_declared_deps_cover_the_code_a_stage_runs(name):
    missing = uncovered(STAGES[name])
    assert not missing, (f"dvc.yaml stage '{name}' runs code it does not declare; add to its "
                         "deps:\n" + "\n".join(f"      - {m}" for m in missing))


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
