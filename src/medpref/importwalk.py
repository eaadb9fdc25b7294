"""The code a stage runs: its notebook (or ``python -m`` module) followed through every
``import medpref...`` to the module files under ``src/medpref``.

Every ``import`` and ``from ... import`` is followed — at module level and inside
functions, relative imports resolved — plus the ``__init__.py`` of each package on the way.
Imports made by name at run time (``params.SECTIONS``: each params section's model is
imported when params.yaml is validated; the strategy registry's lookup by name) are not
followed: a stage that needs them declares them (:mod:`medpref.dvcgen`'s ``by_name``).

:mod:`medpref.dvcgen` writes each dvc stage's code deps from this closure, and
tests/test_dvc_contract.py checks that dvc.yaml's deps cover it.
"""

from __future__ import annotations

import ast
import json
import re
from functools import cache
from pathlib import Path

from medpref import REPO_ROOT


def module_file(name: str, src: Path | None = None) -> Path | None:
    """``medpref.a.b`` → its file (``a/b.py`` or ``a/b/__init__.py``), None if absent."""
    base = (src or REPO_ROOT / "src").joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def package_inits(name: str, src: Path | None = None) -> list[Path]:
    """``medpref.a.b`` → ``medpref/__init__.py``, ``medpref/a/__init__.py`` (those that exist)."""
    src = src or REPO_ROOT / "src"
    parts = name.split(".")
    inits = [src.joinpath(*parts[:i], "__init__.py") for i in range(1, len(parts))]
    return [p for p in inits if p.is_file()]


def imported_modules(tree: ast.AST, current: str | None = None, src: Path | None = None
                     ) -> set[str]:
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
                own = module_file(current, src)
                anchor = package if own and own.name == "__init__.py" else package[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names
                         if module_file(f"{base}.{a.name}", src) is not None)
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


def closure_files(roots: set[str], src: Path | None = None) -> set[Path]:
    """Files of the modules ``roots`` import, transitively, with their packages' inits."""
    seen: set[str] = set()
    todo = list(roots)
    files: set[Path] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = module_file(name, src)
        if path is None:
            continue
        files.add(path)
        files.update(package_inits(name, src))
        todo.extend(imported_modules(ast.parse(path.read_text(encoding="utf-8")), name, src))
    return files


@cache
def _module_closure(name: str, src: Path) -> frozenset[Path]:
    return frozenset(closure_files({name}, src))


def entry_points(cmd: str, root: Path | None = None) -> tuple[list[Path], set[str]]:
    """The notebooks a stage command runs (its first .ipynb argument) and its ``-m`` module."""
    notebooks = []
    match = re.search(r"papermill\s.*?(\S+\.ipynb)", cmd, re.S)
    if match:
        notebooks.append((root or REPO_ROOT) / match.group(1))
    modules = set(re.findall(r"python[\d.]*\s+-m\s+([\w.]+)", cmd))
    return notebooks, modules


def code_closure(notebooks: list[Path], modules: set[str], src: Path | None = None
                 ) -> set[Path]:
    """Every module file the notebooks and modules import, transitively."""
    src = src or REPO_ROOT / "src"
    roots = set(modules)
    for nb in notebooks:
        roots |= imported_modules(notebook_tree(nb), src=src)
    files: set[Path] = set()
    for root in roots:
        files |= _module_closure(root, src)
    return files


def stage_code(cmd: str, root: Path | None = None) -> set[Path]:
    """The code files a dvc stage's ``cmd`` runs (see the module docstring)."""
    root = root or REPO_ROOT
    return code_closure(*entry_points(cmd, root), src=root / "src")
