"""One registry for every pluggable kind, in the style of lm-evaluation-harness's
``lm_eval/api/registry.py``: each kind is a :class:`Registry` here, its entries are added
by name with the registry's ``register(name)`` decorator in the module that defines them,
and a params key chooses one by name (``get(name)``, which names the known entries when
the name is unknown).

- :data:`STRATEGIES` (``annotation.strategies``): ``register_strategy`` (in
  ``medpref.annotation.strategies``: ``STRATEGIES.register`` and a check that
  ``control=True`` marks exactly the control strategies); built-ins in
  ``medpref.annotation.<name>``.
- :data:`GRADERS` (``simulation.grader.mode``): ``register_grader``; built-ins in
  ``medpref.simulation.graders``.
- :data:`PATIENTS` (``simulation.patient.kind``): ``register_patient``; built-ins in
  ``medpref.simulation.patients``.
- :data:`CONTROL_DOCTORS` (``simulation.controls``): ``register_control``; built-ins in
  ``medpref.simulation.controls``.
- :data:`REM_SCORERS` (``rem.scorers.<name>.mode``): ``register_rem_scorer``; built-ins
  in ``medpref.remscore.scorers``.
- :data:`BACKENDS` (``shared.llm.roles.<role>.backend``): ``register_backend``; built-ins
  in ``medpref.llm.session``.
- :data:`PIECES` (``open_stage(name, **piece)``): ``register_piece``; built-ins in
  ``medpref.annotation.grid`` and ``medpref.training.stage``.

The built-in entries register exactly as a user's do: the same decorator, in their own
module. A registry is filled when the modules that register into it are imported (the
module that builds an entry imports them: ``build_grader`` lives beside the graders).
Strategies are the one lazy kind: a name no loaded module registered is looked up in the
module of that name, ``medpref.annotation.<name>`` (:func:`import_strategy_module`), so
a new strategy is one file and one entry of ``annotation.strategies``, no other edit;
a name still unknown then is looked for in every module of the package
(:func:`import_strategy_modules`) before the error lists the known ones.

Model doctors are not registered: any role is a doctor, chosen in ``simulation.doctors``
(docs/extending.md). ``params.SECTIONS`` (the params section table) is kept apart: it maps
a section to its model, it registers no plug-in.

This module is a library below every stage: it imports no medpref module (the strategy
lookup imports a module by its name, at run time, when a name is asked for).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class RegistryError(KeyError, ValueError):
    """A name no entry of a registry holds (a ``KeyError`` for lookups, a ``ValueError``
    for the params validators that catch it)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class Registry(Generic[T]):
    """Entries of one pluggable ``kind`` by name; ``key`` is the params key that names one.

    ``register(name)`` is the decorator (a second, different entry under a taken name is
    an error); ``get(name)`` returns the entry or fails naming the key and the known
    names; ``names()`` lists them sorted. ``name_attr``: the entry's attribute that
    ``register`` sets to its name (classes that report their name). ``find``: called
    with a name no entry holds, before ``get`` gives up (a lazy kind imports the module
    that registers it). ``discover``: called before a miss is reported, to register
    every entry that can be found (so the error lists them all, and an entry registered
    by a module not named after it is still found). Iteration, ``in`` and ``len`` see
    the registered entries, in the order they were registered.
    """

    def __init__(self, kind: str, key: str, *, name_attr: str | None = None,
                 find: Callable[[str], Any] | None = None,
                 discover: Callable[[], Any] | None = None):
        self.kind, self.key, self.name_attr = kind, key, name_attr
        self.find, self.discover = find, discover
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: record the decorated function or class as entry ``name``."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind}: a registered name must be a non-empty string, "
                             f"got {name!r}")

        def deco(entry: T) -> T:
            held = self._entries.get(name)
            if held is not None and held is not entry and held != entry:
                raise ValueError(f"{self.kind} '{name}' is registered twice: "
                                 f"{_where(held)} and {_where(entry)} ({self.key} names "
                                 "one entry; rename one of them)")
            if self.name_attr:
                setattr(entry, self.name_attr, name)
            self._entries[name] = entry
            return entry
        return deco

    def get(self, name: str, key: str | None = None) -> T:
        """Entry ``name``; an unknown name is a :class:`RegistryError` naming the params
        key (``key`` overrides the registry's, for another key that names the same kind)
        and the known names."""
        if name not in self._entries and self.find is not None:
            self.find(name)
        if name not in self._entries and self.discover is not None:
            self.discover()
        try:
            return self._entries[name]
        except KeyError:
            raise RegistryError(f"{key or self.key}: no {self.kind} '{name}' (known: "
                                f"{', '.join(self.names())})") from None

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._entries)

    def unregister(self, name: str) -> None:
        """Remove entry ``name`` (tests that register a throwaway entry)."""
        self._entries.pop(name, None)

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __setitem__(self, name: str, entry: T) -> None:
        """Replace (or add) entry ``name`` without the twice-registered check: a test that
        stands a fake in for a built-in (``monkeypatch.setitem``)."""
        self._entries[name] = entry

    def __delitem__(self, name: str) -> None:
        self.unregister(name)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def items(self) -> list[tuple[str, T]]:
        return list(self._entries.items())

    def values(self) -> list[T]:
        return list(self._entries.values())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.key!r}: {', '.join(self._entries)})"


def _where(entry: Any) -> str:
    return f"{getattr(entry, '__module__', '?')}.{getattr(entry, '__qualname__', entry)}"


# -- the lazy lookup of strategies ----------------------------------------------------------
#: the package a strategy named in ``annotation.strategies`` is looked up in
STRATEGY_PACKAGE = "medpref.annotation"
#: strategies registered by a module not named after them (the name is taken by a helper:
#: ``medpref.annotation.agent`` is the agent's algorithm, ``control`` the controls')
STRATEGY_MODULES = {"control_process": "control", "agent": "agent_strategy"}


def import_strategy_module(name: str) -> None:
    """Import the module that registers strategy ``name`` if it exists:
    ``medpref.annotation.<name>`` (or the one :data:`STRATEGY_MODULES` names). A module
    that exists but fails inside is an error of its own, not an unknown name."""
    module = f"{STRATEGY_PACKAGE}.{STRATEGY_MODULES.get(name, name)}"
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:  # the module exists but an import inside it failed
            raise


def import_strategy_modules() -> None:
    """Import every module of ``medpref.annotation`` (a name was not found where it was
    looked for: the error lists every strategy the package registers)."""
    package = importlib.import_module(STRATEGY_PACKAGE)
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{STRATEGY_PACKAGE}.{info.name}")


# -- the registries -------------------------------------------------------------------------
@dataclass(frozen=True)
class RemMode:
    """A REM scorer mode: its builder and what the code around it must know without
    asking which mode it is (see :func:`register_rem_scorer`)."""

    build: Callable[..., Any]
    adapter: bool = False
    describe: Callable[..., str] | None = None
    check: Callable[[Any], None] | None = None
    fitted: bool = False
    #: the mode reads the score token's probabilities (option scoring): a served model
    #: needs a server that returns log-probs
    options: bool = False

    def method(self, name: str, settings: Any, adapter_card: dict | None = None) -> str:
        """Table 5's ``method`` text for settings of this mode."""
        if self.describe is not None:
            return self.describe(settings, adapter_card)
        doc = (self.build.__doc__ or "").strip().splitlines()
        return f"mode {name}" + (f": {doc[0].rstrip('.')}" if doc else "")


#: stage 04's annotation strategies: ``fn(inputs) -> [written result, *shown-only results]``
#: (``medpref.annotation.strategies``)
STRATEGIES: Registry[Callable[[Any], Any]] = Registry(
    "annotation strategy", "annotation.strategies", find=import_strategy_module,
    discover=import_strategy_modules)
#: the SP test's checklist graders: classes ``cls(GraderContext)`` with ``grade``
GRADERS: Registry[type] = Registry("grader", "simulation.grader.mode", name_attr="name")
#: the SP test's simulated patients: classes ``cls(PatientContext)`` with ``reply``
PATIENTS: Registry[type] = Registry("patient", "simulation.patient.kind", name_attr="name")
#: the SP test's control doctors: classes ``cls(ControlContext)`` with ``turn`` and a
#: ``polarity``
CONTROL_DOCTORS: Registry[type] = Registry("control doctor", "simulation.controls",
                                           name_attr="name")
#: how a REM scorer reads the model: a :class:`RemMode` (its ``build``, what it reads,
#: how Table 5 describes it and which settings it accepts), added by
#: :func:`register_rem_scorer` on the builder function
REM_SCORERS: Registry[RemMode] = Registry("REM scorer mode", "rem.scorers.<name>.mode")
#: the model backends a role names (``shared.llm.roles.<role>.backend``):
#: ``fn(RoleConfig, SharedParams) -> Backend``; built-ins in ``medpref.llm.session``
BACKENDS: Registry[Callable[..., Any]] = Registry("LLM backend",
                                                  "shared.llm.roles.<role>.backend")
#: the stages opened for one piece of their work (a grid cell, a training part): stage
#: name → ``fn(stage, **keywords) -> Stage`` (``medpref.stagekit.open_stage``)
PIECES: Registry[Callable[..., Any]] = Registry("stage piece opener", "open_stage")


register_grader = GRADERS.register
register_patient = PATIENTS.register
register_control = CONTROL_DOCTORS.register
register_piece = PIECES.register
register_backend = BACKENDS.register


def register_rem_scorer(name: str, *, adapter: bool = False,
                        describe: Callable[..., str] | None = None,
                        check: Callable[[Any], None] | None = None, fitted: bool = False,
                        options: bool = False
                        ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator on a REM scorer mode's builder: registers ``RemMode(build, adapter,
    describe, check, fitted, options)`` as mode ``name`` and returns the builder unchanged.

    ``build(client, flowchart, examples, template, *, call, k, seed, n_examples,
    temperature, comment, detail, state_value) -> scorer`` (take the keywords you use,
    ``**_`` for the rest). ``adapter``: the mode reads stage 03's LoRA REM
    (``rem.train.adapter_dir``, its task card's ``comment``/``detail``) instead of
    in-context examples. ``describe(settings, adapter_card) -> str``: Table 5's ``method``
    column (default: the mode's name and its builder's first docstring line).
    ``check(settings)``: raises ``ValueError`` on settings the mode cannot honour.
    ``fitted``: the mode is fitted on the REM data by stage 03 and read from
    ``rem.fitted.model_dir`` by name; its ``build(settings)`` returns what it reads and
    how it learns (a :class:`medpref.remscore.fitted.FitSpec`), not a scorer.
    ``options``: the mode scores the answer options from their probabilities (the
    client's ``option_scores``), so params refuse it for a role whose server says
    ``logprobs: false``."""
    def deco(build: Callable[..., Any]) -> Callable[..., Any]:
        REM_SCORERS.register(name)(RemMode(build, adapter, describe, check, fitted, options))
        return build
    return deco
