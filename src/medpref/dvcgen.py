"""dvc.yaml, generated: each stage declared once (:data:`medpref.dvcstages.PIPELINE`), its outputs
read from its :class:`~medpref.outputs.StageOutputs`, its code deps from the import
closure of what it runs (:mod:`medpref.importwalk`).

    medpref dvc-yaml            # write dvc.yaml
    medpref dvc-yaml --check    # compare with dvc.yaml; print a unified diff, exit 1 on any

What a stage writes comes from its outputs list: data products (``Data``: DVC-cached,
``persist`` kept), then its LLM cache (``data/cache/llm/<run>.sqlite``, persisted) and
executed notebook when it has them, then its records, tables, figures, pages and
assembled folders (committed: ``cache: false``), then the files every run writes
(``provenance.json``, ``ledger.json`` for a stage that calls a model, ``timings.json``,
``metrics.json``). Code deps are every module file the notebook (or ``python -m`` module)
imports, transitively; a package folder all of whose modules are in that closure is
listed as the folder. Then the deps its params name (:func:`params_deps`): every prompt
file and every input file (under ``data/embedded/`` or ``configs/``) that a value of its
params keys names, so a path or prompt typed in params.yaml is not typed again here. The
declared deps (upstream outputs, files no params key names) follow. Likewise the
``shared.llm.roles.<role>`` keys of every role its params name join its params.

A stage's params keys of a section it names in ``sections`` are derived from that
section's model (:func:`section_params`): each field says which stages read it
(``Annotated[type, ReadBy(stages, reads=...)]``, else its model's ``READ_BY``), a call
slot likewise (``CallSlot(read_by=...)``), and ``reads`` names the other sections' keys a
stage reads because it reads the field. They follow the keys the stage types; its
``notes`` writes a note beside one.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import BaseModel

from medpref import REPO_ROOT
from medpref.importwalk import code_closure
from medpref.outputs import Data, StageOutputs
from medpref.params import ReadBy

#: where the files a params value may name as a stage's input live (outputs of other stages
#: are declared deps: a params value naming one does not make it an input)
INPUT_ROOTS = ("data/embedded/", "configs/")
PROMPTS_DIR = "configs/prompts"
#: where a stage's LLM cache lives (``shared.llm.cache_dir``'s default)
LLM_CACHE_DIR = "data/cache/llm"
PAPERMILL = "papermill --log-level WARNING"
WIDTH = 92


@dataclass(frozen=True)
class Dep:
    """A dep or params key with the comment written beside it."""

    path: str
    note: str = ""


@dataclass(frozen=True)
class Plot:
    """A stage's report file shown by ``dvc plots`` (declared under the stage's plots)."""

    file: str
    x: str
    y: str
    title: str


@dataclass(frozen=True)
class DvcStage:
    """One dvc stage, declared once.

    ``notebook`` (``notebooks/<notebook>.ipynb``, run by papermill into
    ``reports/notebooks/<executed>.ipynb`` with ``nb_params`` as ``-p``) or ``module``
    (``python -m <module> <args>``) is what it runs. ``outputs`` is its outputs list; a
    stage without one names its ``reports`` folder, its ``data`` and its report ``files``
    here. ``also``: committed outputs outside the reports folder. ``deps``: what it reads
    that is not Python (data, prompts, configs, upstream outputs); ``by_name``: packages
    whose modules it imports by name at run time (each module's closure joins its deps).
    ``llm``: it calls a model (an LLM cache and a ledger). ``metrics``: the comment of its
    ``metrics:`` section when its metrics.json is dvc's metrics file. ``unread``: params
    keys whose value names a file the stage does not read (a generator's config kept in the
    stage's section); ``why``: a note per params key, written beside the dep it names.
    ``sections``: section models whose fields say this stage reads them
    (:func:`section_params`): their keys follow ``params``; ``notes``: a note per key they
    give it, written beside the key (a typed key carries its own: ``Dep(key, note)``).
    """

    name: str
    params: Sequence[str | Dep]
    notebook: str = ""
    executed: str = ""
    nb_params: Sequence[tuple[str, str]] = ()
    module: str = ""
    args: str = ""
    outputs: StageOutputs | None = None
    reports: str = ""
    data: Sequence[Data] = ()
    files: Sequence[str] = ()
    also: Sequence[str] = ()
    deps: Sequence[str | Dep] = ()
    by_name: Sequence[Dep] = ()
    llm: bool = False
    metrics: str = ""
    plots: Sequence[Plot] = ()
    foreach: str = ""
    foreach_note: str = ""
    matrix: dict[str, str] = field(default_factory=dict)
    comment: str = ""
    unread: Sequence[str] = ()
    why: dict[str, str] = field(default_factory=dict)
    sections: Sequence[type[BaseModel]] = ()
    notes: dict[str, str] = field(default_factory=dict)

    @property
    def run_name(self) -> str:
        """The executed notebook's name (and the LLM cache's)."""
        return Path(self.executed or self.notebook).name

    @property
    def reports_dir(self) -> str:
        if self.outputs is not None:
            return self.outputs.reports_dir(Path(".")).as_posix()
        return f"reports/{self.reports}"

    def cmd_lines(self) -> list[str]:
        if self.module:
            return [f"python -m {self.module} {self.args}".rstrip()]
        executed = f"reports/notebooks/{self.executed or self.notebook}.ipynb"
        lines = []
        if "/" in (self.executed or ""):
            lines.append(f"mkdir -p reports/notebooks/{Path(self.executed).parent} &&")
        lines.append(f"{PAPERMILL} notebooks/{self.notebook}.ipynb")
        flags = " ".join(f"-p {k} {v}" for k, v in self.nb_params)
        if not lines[:-1] and not flags:
            return [f"{lines[0]} {executed}"]
        tail = f"{executed} {flags}".rstrip()
        return lines + ([tail] if len(tail) <= WIDTH - 8 else [executed, flags])

    def outs(self) -> list[tuple[str, dict]]:
        """(path, flags) of every output, in the order written (see the module docstring)."""
        reports = self.reports_dir
        data = list(self.outputs.data if self.outputs else ()) + list(self.data)
        outs = [(d.path, {"persist": True} if d.persist else {}) for d in data]
        if self.llm:
            outs.append((f"{LLM_CACHE_DIR}/{self.run_name}.sqlite", {"persist": True}))
        if self.notebook:
            outs.append((f"reports/notebooks/{self.executed or self.notebook}.ipynb", {}))
        committed: list[str] = []
        if self.outputs is not None:
            o, here = self.outputs, Path(reports)
            committed += [r.path(here).as_posix() for r in o.records]
            committed += [f.as_posix() for b in o.built for f in b.files(here)]
            committed += [a.folder(here).as_posix() for a in o.assembled]
        committed += [f"{reports}/{f}" for f in self.files] + list(self.also)
        if self.notebook:
            run_files = ["provenance.json", *(["ledger.json"] if self.llm else []),
                         "timings.json", *([] if self.metrics else ["metrics.json"])]
            committed += [f"{reports}/{f}" for f in run_files]
        return outs + [(p, {"cache": False}) for p in committed]


# -- code deps ------------------------------------------------------------------------------

def package_modules(package: str, src: Path) -> set[str]:
    """Every module of a package, sub-packages included (``medpref.annotation.cai`` ...)."""
    folder = src.joinpath(*package.split("."))
    return {".".join(p.relative_to(src).with_suffix("").parts).removesuffix(".__init__")
            for p in folder.rglob("*.py") if "__pycache__" not in p.parts}


def code_deps(stage: DvcStage, root: Path) -> list[str]:
    """The stage's code files (repository-relative), a package folder whose every module is
    among them listed as the folder."""
    src = root / "src"
    notebooks = [root / f"notebooks/{stage.notebook}.ipynb"] if stage.notebook else []
    modules = {stage.module} if stage.module else set()
    for dep in stage.by_name:
        modules |= package_modules(dep.path, src)
    files = {p.relative_to(root).as_posix() for p in code_closure(notebooks, modules, src)}
    return _folders(files, root)


def _folders(files: set[str], root: Path) -> list[str]:
    out: list[str] = []
    for f in sorted(files):
        parts = f.split("/")   # src/medpref/<pkg>/.../<file>
        entry = f
        for depth in range(3, len(parts)):
            folder = "/".join(parts[:depth])
            modules = {p.relative_to(root).as_posix() for p in (root / folder).rglob("*.py")
                       if "__pycache__" not in p.parts}
            if modules <= files:
                entry = folder
                break
        if entry not in out:
            out.append(entry)
    return out


# -- params keys derived from the section models -------------------------------------------

def _marks(model: type[BaseModel], prefix: str, default: tuple[str, ...]
           ) -> Iterator[tuple[str, ReadBy]]:
    """(dotted key, who reads it) of every field of ``model`` in field order, each followed
    by its sub-fields (a sub-model's), then the call slots of a section's ``calls``."""
    for name, info in model.model_fields.items():
        key = f"{prefix}.{name}"
        yield key, next((m for m in info.metadata if isinstance(m, ReadBy)), ReadBy(default))
        sub = info.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            yield from _marks(sub, key, getattr(sub, "READ_BY", ()))
    for call, slot in getattr(model, "CALLS", {}).items():
        yield f"{prefix}.calls.{call}", ReadBy(slot.read_by)


def section_params(model: type[BaseModel], stage: str) -> list[str]:
    """The params keys ``stage`` reads by ``model``'s fields: first the other sections' keys
    that the fields it reads name (their ``reads``), then the section's keys in the model's
    field order, a sub-key at its field's place, then the calls it makes. A stage named by
    a sub-field's marker and its field's is an error (it reads the field whole)."""
    reads: list[str] = []
    keys: list[str] = []
    for key, mark in _marks(model, model.SECTION, model.READ_BY):
        whole = next((k for k in keys if key.startswith(f"{k}.")), "")
        if stage in mark.stages:
            if whole:
                raise ValueError(f"{key}: ReadBy names stage '{stage}', which reads {whole} "
                                 "whole")
            keys.append(key)
        if stage in mark.stages or whole:
            reads += [r for r in mark.reads if r not in reads]
    return reads + keys


def stage_params(stage: DvcStage) -> list[str | Dep]:
    """The stage's params keys: those it types, then those its sections' fields give it,
    each with its ``notes`` entry. A note on a key they do not give it is an error."""
    derived = [k for m in stage.sections for k in section_params(m, stage.name)]
    unknown = sorted(set(stage.notes) - set(derived))
    if unknown:
        raise ValueError(f"stage {stage.name}: notes on keys its sections do not give it: "
                         f"{unknown}")
    return [*stage.params, *(Dep(k, stage.notes[k]) if k in stage.notes else k
                             for k in derived)]


def check_marks(stages: Sequence[DvcStage], tree: dict) -> None:
    """Every stage a marker of a derived section names is one of ``stages`` (the whole
    pipeline: :func:`differences` and :func:`write` check it), and every key its ``reads``
    names is in params.yaml: a misspelt name would drop a key silently."""
    names = {s.name for s in stages}
    models = {m.SECTION: m for s in stages for m in s.sections}
    for section in sorted(models):
        model = models[section]
        for key, mark in _marks(model, section, model.READ_BY):
            unknown = sorted(set(mark.stages) - names)
            if unknown:
                raise ValueError(f"{key}: ReadBy names unknown stage(s) {unknown}")
            for read in mark.reads:
                try:
                    _value(tree, read)
                except ValueError:
                    raise ValueError(f"{key}: ReadBy reads '{read}', which is not a params "
                                     "key") from None


# -- deps and params named by params values ------------------------------------------------

def params_tree(root: Path) -> dict:
    """params.yaml at ``root``, validated, every section with its defaults filled in."""
    from medpref.params import SECTIONS, load_params

    params = load_params(root / "params.yaml")
    return {name: getattr(params, name).model_dump(mode="json") for name in SECTIONS}


def _value(tree: dict, dotted: str):
    node = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise ValueError(f"params key '{dotted}' is not in params.yaml")
        node = node[part]
    return node


def _leaves(node, key: str):
    """(dotted key, value) of every scalar under ``node``; a list's items keep its key."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, f"{key}.{k}")
    elif isinstance(node, list):
        for v in node:
            yield from _leaves(v, key)
    else:
        yield key, node


def _is_prompt_key(dotted: str) -> bool:
    return dotted.rsplit(".", 1)[-1].endswith(("prompt", "prompts"))


def params_deps(stage: DvcStage, tree: dict, root: Path) -> tuple[list[Dep], list[Dep]]:
    """(prompt deps, input deps) that the values of the stage's params keys name: a
    ``*prompt``/``*prompts`` value with a file under configs/prompts/, and a path under
    :data:`INPUT_ROOTS` that exists (not under a folder the stage declares, not under an
    ``unread`` key). Each is noted with the first key naming it (and its ``why``)."""
    folders = [(d.path if isinstance(d, Dep) else d).rstrip("/") + "/" for d in stage.deps]
    unread = tuple(stage.unread)
    prompts: dict[str, str] = {}
    inputs: dict[str, str] = {}
    for entry in stage_params(stage):
        key = entry.path if isinstance(entry, Dep) else entry
        for dotted, value in _leaves(_value(tree, key), key):
            if not isinstance(value, str) or dotted.startswith(unread):
                continue
            if _is_prompt_key(dotted) and (root / PROMPTS_DIR / f"{value}.yaml").is_file():
                prompts.setdefault(f"{PROMPTS_DIR}/{value}.yaml", dotted)
            elif (value.startswith(INPUT_ROOTS) and (root / value).exists()
                  and not any(value.startswith(f) for f in folders)):
                inputs.setdefault(value, dotted)

    def note(dotted: str) -> str:
        why = next((w for k, w in stage.why.items() if dotted.startswith(k)), "")
        return f"{dotted}: {why}" if why else dotted

    return ([Dep(p, note(k)) for p, k in prompts.items()],
            [Dep(p, note(k)) for p, k in inputs.items()])


def params_roles(stage: DvcStage, tree: dict) -> list[str]:
    """``shared.llm.roles.<role>`` for every role a value of the stage's params keys names
    (a ``role`` or ``*_role`` key), not already among its keys."""
    keys = [e.path if isinstance(e, Dep) else e for e in stage_params(stage)]
    roles: list[str] = []
    for key in keys:
        for dotted, value in _leaves(_value(tree, key), key):
            if dotted.rsplit(".", 1)[-1].endswith("role") and isinstance(value, str):
                role = f"shared.llm.roles.{value}"
                if role not in keys and role not in roles:
                    roles.append(role)
    return roles


# -- rendering ------------------------------------------------------------------------------

def scalar(text: str) -> str:
    """``text`` as a YAML scalar: plain where it reads back the same, else double-quoted."""
    try:
        plain = yaml.safe_load(f"k: {text}") == {"k": text} and " #" not in text
    except yaml.YAMLError:
        plain = False
    return text if plain else json.dumps(text, ensure_ascii=False)


def comment(text: str, indent: int) -> list[str]:
    """A comment wrapped to the file's width, each line ``# `` at ``indent``; a line of
    ``text`` that starts with spaces (a command to copy) is kept as it is."""
    out = []
    for para in text.split("\n"):
        if para.startswith(" "):
            out.append(" " * indent + "# " + para)
        else:
            out += _wrapped(para, " " * indent + "# ")
    return out


def _wrapped(text: str, pad: str) -> list[str]:
    lines, line = [], ""
    for word in text.split(" "):
        if line and len(pad) + len(line) + 1 + len(word) > WIDTH:
            lines.append(pad + line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return lines + [pad + line] if line else lines


def _item(entry: str | Dep, pad: str) -> str:
    if isinstance(entry, Dep):
        return f"{pad}- {entry.path}" + (f"   # {entry.note}" if entry.note else "")
    return f"{pad}- {entry}"


def render_stage(stage: DvcStage, root: Path, tree: dict | None = None) -> list[str]:
    lines = comment(stage.comment, 2) if stage.comment else []
    lines.append(f"  {stage.name}:")
    ind = "    "
    if stage.foreach:
        note = f"   # {stage.foreach_note}" if stage.foreach_note else ""
        lines += [f"{ind}foreach: {stage.foreach}{note}", f"{ind}do:"]
        ind += "  "
    if stage.matrix:
        lines.append(f"{ind}matrix:")
        lines += [f"{ind}  {k}: {v}" for k, v in stage.matrix.items()]
    cmd = stage.cmd_lines()
    if len(cmd) == 1:
        lines.append(f"{ind}cmd: {cmd[0]}")
    else:
        lines += [f"{ind}cmd: >-", *(f"{ind}  {c}" for c in cmd)]
    item = ind + "  "
    tree = params_tree(root) if tree is None else tree
    prompts, inputs = params_deps(stage, tree, root)
    named = [d.path for d in prompts + inputs]
    declared = [d.path if isinstance(d, Dep) else d for d in stage.deps]
    code = code_deps(stage, root)
    twice = sorted(set(declared) & (set(code) | set(named))) + sorted(
        {d for d in declared if declared.count(d) > 1})
    if twice:
        raise ValueError(f"stage {stage.name}: deps declared twice (or also code, or named "
                         f"by its params): {twice}")
    notes = {f"src/{d.path.replace('.', '/')}": d.note for d in stage.by_name}
    lines.append(f"{ind}deps:")
    if stage.notebook:
        lines.append(f"{item}- notebooks/{stage.notebook}.ipynb")
    lines += [_item(Dep(c, notes.get(c, "")), item) for c in code]
    lines += [_item(d, item) for d in prompts + inputs]
    lines += [_item(d, item) for d in stage.deps]
    params = [*stage_params(stage), *params_roles(stage, tree)]
    keys = [p.path if isinstance(p, Dep) else p for p in params]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise ValueError(f"stage {stage.name}: params keys listed twice (typed and derived "
                         f"from its sections?): {twice}")
    if params:
        lines.append(f"{ind}params:")
        lines += [_item(p, item) for p in params]
    lines += _render_outs(stage, ind)
    return lines


def _render_outs(stage: DvcStage, ind: str) -> list[str]:
    item = ind + "  "
    plots = {f"{stage.reports_dir}/{p.file}": p for p in stage.plots}
    outs = stage.outs()
    unknown = sorted(set(plots) - {p for p, _ in outs})
    if unknown:
        raise ValueError(f"stage {stage.name}: plots name files it does not write: {unknown}")
    records = f"{stage.reports_dir}/records/"
    lines = [f"{ind}outs:"]
    for n, (path, flags) in enumerate(outs):
        if path in plots:
            continue
        note = _out_note(stage, outs, n, records)
        lines += comment(note, len(item)) if note else []
        lines.append(f"{item}- {path}" + (":" if flags else ""))
        lines += [f"{item}    {k}: {str(v).lower()}" for k, v in flags.items()]
    if stage.metrics:
        lines += comment(stage.metrics, len(ind))
        lines += [f"{ind}metrics:", f"{item}- {stage.reports_dir}/metrics.json:",
                  f"{item}    cache: false"]
    if plots:
        lines.append(f"{ind}plots:")
        for path, p in plots.items():
            lines += [f"{item}- {path}:", f"{item}    cache: false", f"{item}    x: {p.x}",
                      f"{item}    y: {p.y}", f"{item}    title: {scalar(p.title)}"]
    return lines


def _out_note(stage: DvcStage, outs: list[tuple[str, dict]], n: int, records: str) -> str:
    """The comment above an output: a data product's doc, or the start of the records and
    of what is built from them."""
    path = outs[n][0]
    docs = {d.path: d.doc for d in list(stage.outputs.data if stage.outputs else ())
            + list(stage.data)}
    if docs.get(path):
        return docs[path]
    prev = outs[n - 1][0] if n else ""
    if stage.outputs is None or not stage.outputs.records:
        return ""
    if path.startswith(records) and not prev.startswith(records):
        return (f"the per-item records ({stage.outputs.stage}'s outputs list): every table "
                f"and figure below is built from them alone (`medpref tables "
                f"{stage.outputs.stage}`)")
    if prev.startswith(records) and not path.startswith(records):
        return "built from the records and the params"
    return ""


def render_plots(plots: Sequence[dict]) -> list[str]:
    """The top-level ``plots:`` section: each entry {name: {template, x, y, title?}}."""
    lines = ["plots:"]
    for entry in plots:
        (name, props), = entry.items()
        lines.append(f"  - {scalar(name)}:")
        for key, value in props.items():
            if isinstance(value, dict):
                lines.append(f"      {key}:")
                lines += [f"        {k}: {scalar(v)}" for k, v in value.items()]
            else:
                lines.append(f"      {key}: {scalar(value)}")
    return lines


@dataclass(frozen=True)
class Pipeline:
    """The whole file: a header comment, the stages in order, the top-level plots."""

    header: str
    stages: Sequence[DvcStage]
    plots_note: str = ""
    plots: Sequence[dict] = ()


def render(pipeline: Pipeline, root: Path | None = None) -> str:
    """The whole dvc.yaml text."""
    root = root or REPO_ROOT
    names = [s.name for s in pipeline.stages]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"dvc stages declared twice: {twice}")
    tree = params_tree(root)
    lines = [*comment(pipeline.header, 0), "stages:"]
    for n, stage in enumerate(pipeline.stages):
        lines += ([""] if n else []) + render_stage(stage, root, tree)
    if pipeline.plots:
        lines += ["", *comment(pipeline.plots_note, 0), *render_plots(pipeline.plots)]
    return "\n".join(lines) + "\n"


def differences(pipeline: Pipeline, root: Path | None = None) -> list[str]:
    """A unified diff of dvc.yaml against the generated text (empty when they agree)."""
    root = root or REPO_ROOT
    check_marks(pipeline.stages, params_tree(root))
    path = root / "dvc.yaml"
    current = path.read_text(encoding="utf-8") if path.exists() else ""
    return list(difflib.unified_diff(current.splitlines(keepends=True),
                                     render(pipeline, root).splitlines(keepends=True),
                                     "dvc.yaml", "dvc.yaml (generated)"))


def write(pipeline: Pipeline, root: Path | None = None) -> Path:
    root = root or REPO_ROOT
    check_marks(pipeline.stages, params_tree(root))
    path = root / "dvc.yaml"
    path.write_text(render(pipeline, root), encoding="utf-8")
    return path
