"""Stages on one floor, libraries below them.

A *stage package* is a package under ``src/medpref`` that holds a ``stage.py`` (the
module a stage's notebook runs). A stage package imports libraries (``medpref.llm``,
``medpref.finetune``, ``medpref.turns``, ``medpref.embedding`` …), never another stage
package: what two stages share lives in a library with its own name. And no module is
imported by a dotted string (``importlib.import_module``, ``__import__`` or a
``"medpref.x.y"`` / ``"medpref.x.y:Name"`` literal resolved at run time): every import is
one a reader (and the dvc contract test's import walk) can follow.

The top floor (:data:`TOP_FLOOR`: ``medpref.dvcstages``, which declares every stage with its
outputs, and ``medpref.pipeline``, which lists them)
may import stages; no other library does. And no two modules import each other, however
indirectly (a loop is broken by moving the shared piece into a third module).

The scan is static (``ast``): ``import medpref.x``, ``from medpref.x import y``, relative
imports, at module level and inside functions. Run as a script it prints every edge
between stage packages, every string import and every import loop it finds::

    python tests/test_stage_floors.py
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "medpref"
#: a string literal that names a medpref module (optionally ``:attribute``)
DOTTED = re.compile(r"^medpref(\.\w+)+(:\w+)?$")
STRING_IMPORTERS = {"import_module", "__import__", "find_spec"}
#: library modules above the stages (they import stage modules to list them)
TOP_FLOOR = {"medpref.pipeline", "medpref.dvcstages"}
#: string imports kept, each with why (file → top-level definitions that hold them)
KEPT_STRING_IMPORTS = {
    # params.yaml is validated whole when any stage loads it, so load_params needs every
    # section's model; the models live in the stage packages, which import medpref.params
    # (StrictModel), and name their sections (found by reading their config.py). A static
    # import would make params → every stage → params a loop and put all ten config
    # modules (and what they import) into every dvc stage's deps.
    "medpref/params.py": {"_section_model", "_find_sections"},
    # the documented plug-in lookup of docs/extending.md, held by the strategy registry: a
    # strategy named in annotation.strategies that no loaded module registered is imported
    # from the module of that name (a user's new strategy is one file and one list entry,
    # no other edit; the built-in strategies are found the same way), and a name still
    # unknown is looked for in every module of the package before the error lists them.
    "medpref/registry.py": {"STRATEGY_PACKAGE", "import_strategy_module",
                            "import_strategy_modules"},
    # dvc.yaml's declarations name the module a stage runs (`python -m ...`) and the
    # package whose modules stage 04 imports by name (the registry's lookup above): the
    # generator reads their imports to write the stages' deps; it never imports them.
    "medpref/dvcstages.py": {"STRATEGIES_BY_NAME", "STAGES"},
}


def stage_packages(pkg: Path = PKG) -> set[str]:
    """The top-level packages under ``pkg`` that hold a ``stage.py``."""
    return {p.parent.name for p in pkg.glob("*/stage.py")}


def module_name(path: Path, src: Path = SRC) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path: Path, src: Path = SRC) -> list[tuple[int, str]]:
    """(line, imported module or ``module.name``) for every import in ``path``, relative
    imports resolved against the module's package."""
    name = module_name(path, src)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            found += [(node.lineno, f"{base}.{a.name}") for a in node.names]
    return found


def stage_edges(src: Path = SRC) -> list[tuple[str, str, int, str]]:
    """(importing file, its stage, line, imported module) for every import from one stage
    package into another, sorted."""
    pkg = src / "medpref"
    stages = stage_packages(pkg)
    edges = []
    for path in sorted(pkg.rglob("*.py")):
        parts = path.relative_to(pkg).parts
        if len(parts) < 2 or parts[0] not in stages:
            continue
        for line, target in imports_of(path, src):
            tparts = target.split(".")
            if len(tparts) >= 2 and tparts[0] == "medpref" and tparts[1] in stages \
                    and tparts[1] != parts[0]:
                edges.append((path.relative_to(src).as_posix(), parts[0], line, target))
    return edges


def _top_name(node: ast.stmt) -> str:
    """The name a top-level statement defines (a def, a class, an assignment's target)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name
    targets = getattr(node, "targets", None) or [getattr(node, "target", None)]
    return next((t.id for t in targets if isinstance(t, ast.Name)), "")


def string_imports(src: Path = SRC) -> list[tuple[str, int, str, str]]:
    """(file, line, what, top-level definition holding it) for every call that imports by
    name and every string literal that names a medpref module, under ``src/medpref``."""
    found = []
    for path in sorted((src / "medpref").rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for top in tree.body:
            where = _top_name(top)
            for node in ast.walk(top):
                if isinstance(node, ast.Call):
                    fn = node.func
                    called = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
                    if called in STRING_IMPORTERS:
                        found.append((rel, node.lineno, f"{called}(...)", where))
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                        and DOTTED.match(node.value):
                    found.append((rel, node.lineno, repr(node.value), where))
                elif isinstance(node, ast.ImportFrom) and node.module == "importlib" \
                        and any(a.name in STRING_IMPORTERS for a in node.names):
                    found.append((rel, node.lineno, "from importlib import import_module", where))
    return found


def unexplained_string_imports(src: Path = SRC) -> list[tuple[str, int, str, str]]:
    """The string imports that :data:`KEPT_STRING_IMPORTS` does not keep."""
    return [f for f in string_imports(src) if f[3] not in KEPT_STRING_IMPORTS.get(f[0], set())]


def module_graph(src: Path = SRC) -> dict[str, set[str]]:
    """medpref module → the medpref modules it imports (a package's ``__init__`` left out:
    importing ``medpref.a.b`` runs ``medpref/a/__init__.py``, which is not an edge back)."""
    paths = {module_name(p, src): p for p in (src / "medpref").rglob("*.py")}
    graph = {}
    for name, path in paths.items():
        edges = set()
        for _, target in imports_of(path, src):
            while target and target not in paths:
                target = target.rpartition(".")[0]
            if target and target != name and paths[target].name != "__init__.py":
                edges.add(target)
        graph[name] = edges
    return graph


def import_loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    loops: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                loops.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(loops)


def library_edges(src: Path = SRC) -> list[tuple[str, int, str]]:
    """(file, line, stage module) for every library module outside :data:`TOP_FLOOR` that
    imports a stage package."""
    pkg = src / "medpref"
    stages = stage_packages(pkg)
    found = []
    for path in sorted(pkg.rglob("*.py")):
        parts = path.relative_to(pkg).parts
        if parts[0] in stages or module_name(path, src) in TOP_FLOOR:
            continue
        for line, target in imports_of(path, src):
            tparts = target.split(".")
            if len(tparts) >= 2 and tparts[0] == "medpref" and tparts[1] in stages:
                found.append((path.relative_to(src).as_posix(), line, target))
    return found


def test_the_scan_sees_every_form_of_import(tmp_path):
    """The scanner finds an absolute, a from-, a relative and a function-level import
    across stage packages, and the string forms (so the tests below can fail)."""
    pkg = tmp_path / "medpref"
    for stage in ("alpha", "beta"):
        (pkg / stage).mkdir(parents=True)
        (pkg / stage / "__init__.py").write_text("")
        (pkg / stage / "stage.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "lib.py").write_text("import medpref.alpha.stage\n")  # a library: not an edge
    (pkg / "alpha" / "a.py").write_text(
        "import medpref.beta.stage\n"
        "from medpref.beta import stage\n"
        "from ..beta.stage import x\n"
        "from . import stage as own\n"  # its own package: not an edge
        "def f():\n    from medpref.beta.stage import y\n"
        "import importlib\n"
        "M = importlib.import_module('medpref.lib')\n"
        "N = __import__('os')\n"
        "TABLE = {'k': 'medpref.beta.stage:Thing'}\n")
    edges = stage_edges(tmp_path)
    assert [(e[2], e[3]) for e in edges] == [
        (1, "medpref.beta.stage"), (2, "medpref.beta.stage"), (3, "medpref.beta.stage.x"),
        (6, "medpref.beta.stage.y")]
    strings = {(line, what, where) for _, line, what, where in string_imports(tmp_path)}
    assert strings == {(8, "import_module(...)", "M"), (8, "'medpref.lib'", "M"),
                       (9, "__import__(...)", "N"), (10, "'medpref.beta.stage:Thing'", "TABLE")}
    assert [(f, line) for f, line, _ in library_edges(tmp_path)] == [("medpref/lib.py", 1)]


def test_the_loop_finder_finds_a_loop_through_a_function_level_import(tmp_path):
    pkg = tmp_path / "medpref"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from medpref.b import x\n")
    (pkg / "b.py").write_text("import medpref.c\n")
    (pkg / "c.py").write_text("def f():\n    from medpref import a\n")
    (pkg / "d.py").write_text("import medpref.a\n")
    assert import_loops(module_graph(tmp_path)) == [["medpref.a", "medpref.b", "medpref.c"]]


def test_the_stage_packages_are_found():
    assert {"sampling", "notechat", "rem", "annotation", "training", "simulation", "medqa",
            "imap", "papertables"} <= stage_packages()


def test_no_stage_package_imports_another():
    edges = stage_edges()
    assert not edges, ("a stage package imports another stage package; move what they "
                       "share into a library below both:\n"
                       + "\n".join(f"  {f}:{line} ({s}) imports {t}" for f, s, line, t in edges))


def test_no_library_imports_a_stage_package():
    found = library_edges()
    assert not found, ("a library imports a stage package (a floor up); move what it needs "
                       "down:\n" + "\n".join(f"  {f}:{line} imports {t}" for f, line, t in found))


def test_no_module_is_imported_by_a_dotted_string():
    found = unexplained_string_imports()
    assert not found, ("a module is imported by name at run time; import it (or register "
                       "it explicitly) instead:\n"
                       + "\n".join(f"  {f}:{line}: {what} (in {where})"
                                    for f, line, what, where in found))


def test_the_kept_string_imports_are_still_there():
    """Each kept string import is still where the list says (a stale entry would keep a
    place open for a new one)."""
    held = {(f, where) for f, _, _, where in string_imports()}
    stale = sorted((f, n) for f, names in KEPT_STRING_IMPORTS.items() for n in names
                   if (f, n) not in held)
    assert not stale, f"KEPT_STRING_IMPORTS lists places with no string import: {stale}"


def test_no_two_modules_import_each_other():
    loops = import_loops(module_graph())
    assert not loops, ("modules that import each other (directly or through others); move "
                       "the shared piece into a third module:\n"
                       + "\n".join(f"  {' <-> '.join(group)}" for group in loops))


def report(src: Path = SRC) -> str:
    """The edges, string imports, upward imports and loops of the tree under ``src``."""
    out = []
    edges = stage_edges(src)
    pairs: dict[tuple[str, str], int] = {}
    for _, s, _, t in edges:
        key = (s, t.split(".")[1])
        pairs[key] = pairs.get(key, 0) + 1
    out.append(f"stage packages: {' '.join(sorted(stage_packages(src / 'medpref')))}")
    out.append(f"stage -> stage import edges: {len(edges)} imports, {len(pairs)} package pairs")
    out += [f"  {a} -> {b}: {n}" for (a, b), n in sorted(pairs.items())]
    out += [f"    {f}:{line} imports {t}" for f, s, line, t in edges]
    found = string_imports(src)
    kept = {(f, line) for f, line, *_ in found} - {(f, line) for f, line, *_ in
                                                    unexplained_string_imports(src)}
    out.append(f"string imports: {len(found)} ({len(kept)} kept, with reasons)")
    out += [f"  {f}:{line}: {what} (in {where}){'  [kept]' if (f, line) in kept else ''}"
            for f, line, what, where in found]
    lib = library_edges(src)
    out.append(f"library -> stage imports outside the top floor: {len(lib)}")
    out += [f"  {f}:{line} imports {t}" for f, line, t in lib]
    loops = import_loops(module_graph(src))
    out.append(f"import loops: {len(loops)}")
    out += [f"  {' <-> '.join(group)}" for group in loops]
    return "\n".join(out)


if __name__ == "__main__":  # python tests/test_stage_floors.py [SRC folder]
    print(report(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else SRC))
