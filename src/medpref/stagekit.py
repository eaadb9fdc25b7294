"""The opening and closing every pipeline stage shares.

A stage is a notebook over ``medpref.<domain>.stage.run(stage)``. This module holds what
every one of them does around that call, so a notebook needs two lines::

    stage = open_stage("01_sampling", params_path)    # params, section, LLM session, timer
    out = sampling_stage.run(stage)                    # the domain's work, returns outputs
    ...                                                # cells that show out's tables
    stage.finish(out.metrics)                          # ledger, guard, metrics, provenance

One name per stage: ``01_sampling`` is the notebook, ``data/01_sampling`` and
``reports/01_sampling`` its folders, ``sampling`` (the name without its number) its dvc
stage and its params section. ``metrics.json`` holds scores only (``dvc metrics show``);
wall times go to ``timings.json`` and model use to ``ledger.json``.

A stage that runs in pieces (a cell of the weighting grid, a part of training) is opened
the same way, with the piece's keywords: :func:`open_stage` hands them to the domain's
function registered in :data:`PIECES` (:func:`register_piece`), which returns the stage
with the piece's own folders.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field

from medpref.params import Params, StrictModel, load_params, repo_path
from medpref.provenance import provenance, write_provenance
from medpref.registry import PIECES, register_piece  # noqa: F401  (re-exported)
from medpref.reports import write_metrics


class GuardParams(StrictModel):
    """When a stage's run is too poor to keep (every stage section has a ``guard``).

    ``min_yield``: the share of requested items that must come out (items written /
    items asked for). ``max_failure_rate``: the share of model calls that may fail
    (recorded failures / calls that reached a backend). Either breach fails the stage
    before it writes outputs that DVC would lock.
    """

    min_yield: float = Field(0.5, ge=0.0, le=1.0)
    max_failure_rate: float = Field(0.2, ge=0.0, le=1.0)


class StageFailed(RuntimeError):
    """A stage's run is not worth keeping; the message is one line naming the stage."""


def stage_key(name: str) -> str:
    """``01_sampling`` → ``sampling``: the dvc stage and params section of a stage."""
    head, _, rest = name.partition("_")
    return rest if head.isdigit() and rest else name


@dataclass
class Stage:
    """One run of one stage: its params, folders, model session and step timings."""

    name: str
    params: Params
    started: float = field(default_factory=time.perf_counter)
    timings: dict[str, float] = field(default_factory=dict)
    _llm: Any = None
    #: what the run adds to its provenance beyond its LLM session and the prompt loader
    _noted: dict[str, dict[str, str]] = field(
        default_factory=lambda: {"models": {}, "prompts": {}})

    def __post_init__(self) -> None:
        from medpref.prompts import forget_loaded_prompts

        forget_loaded_prompts()   # the prompts this stage loads are its provenance's

    @property
    def key(self) -> str:
        return stage_key(self.name)

    @property
    def p(self) -> Any:
        """This stage's params section."""
        return getattr(self.params, self.key)

    @property
    def seed(self) -> int:
        return self.params.shared.seed

    @property
    def data_dir(self) -> Path:
        return repo_path(Path("data") / self.name)

    @property
    def reports_dir(self) -> Path:
        return repo_path(Path("reports") / self.name)

    def report(self, filename: str) -> Path:
        return self.reports_dir / filename

    def data(self, filename: str) -> Path:
        return self.data_dir / filename

    # -- models -------------------------------------------------------------------------
    @property
    def llm(self):
        """The stage's LLM session (one cache file, one ledger), made on first use."""
        if self._llm is None:
            from medpref.llm import LLMSession

            self._llm = LLMSession.for_stage(self.name, self.params)
        return self._llm

    def role(self, name: str, **overrides: Any):
        return self.llm.role(name, **overrides)

    # -- timing -------------------------------------------------------------------------
    @contextmanager
    def step(self, label: str) -> Iterator[None]:
        """Time a step; repeated labels add up. An error after which no model call can
        succeed (refused credentials, the budget, an unpriced paid model, a server without
        log-probs) ends the stage here with one line naming it."""
        from medpref.llm.errors import FATAL_ERRORS, BackendError

        t0 = time.perf_counter()
        try:
            yield
        except FATAL_ERRORS + (BackendError,) as exc:
            raise StageFailed(f"stage {self.key} failed: {exc}") from None
        finally:
            self.timings[label] = self.timings.get(label, 0.0) + time.perf_counter() - t0

    @property
    def wall_s(self) -> float:
        return time.perf_counter() - self.started

    # -- the guard ----------------------------------------------------------------------
    def check_yield(self, produced: int, requested: int, *, what: str = "items") -> None:
        """Fail the stage (before it writes) when too few items came out or too many calls
        failed. Call it once the work is done and before the outputs are written."""
        guard: GuardParams = getattr(self.p, "guard", None) or GuardParams()
        problems = []
        if requested > 0 and produced / requested < guard.min_yield:
            problems.append(f"{produced} of {requested} {what} produced "
                            f"(min_yield {guard.min_yield:g})")
        role, failures, calls, first = self._worst_role()
        if calls and failures / calls > guard.max_failure_rate:
            problems.append(f"role '{role}' failed {failures} of {calls} calls "
                            f"(max_failure_rate {guard.max_failure_rate:g})")
        if problems:
            first_err = f"; first error: {first}" if first else ""
            raise StageFailed(f"stage {self.key} failed: {'; '.join(problems)}{first_err} "
                              f"(params {self.key}.guard)")

    def _worst_role(self) -> tuple[str, int, int, str]:
        if self._llm is None:
            return "", 0, 0, ""
        worst = ("", 0, 0, "")
        for role, tally in self._llm.ledger.totals()["roles"].items():
            calls, failures = tally["calls"], tally["failures"]
            if calls and (not worst[2] or failures / calls > worst[1] / worst[2]):
                worst = (role, failures, calls, self._llm.ledger.first_error(role))
        return worst

    # -- provenance -----------------------------------------------------------------------
    def note_provenance(self, *, models: dict[str, str] | None = None,
                        prompts: dict[str, str] | None = None) -> None:
        """Add what the LLM session and the prompt loader cannot see to this run's
        provenance (which doctor or agent ran which model, an embedding model, a rubric's
        hash). The domain's ``run`` notes it, so a notebook passes :meth:`finish` none of it."""
        self._noted["models"].update(models or {})
        self._noted["prompts"].update(prompts or {})

    # -- closing ------------------------------------------------------------------------
    def finish(self, metrics: dict[str, Any], *, sections: tuple[str, ...] = (),
               **extra: Any) -> dict[str, Any]:
        """Write the ledger, metrics (scores only), timings and provenance; close models.

        The provenance's ``roles`` (role → model id), ``models`` (model id → content
        identity of its weights) and ``prompts`` (every template the stage loaded) come from
        the stage's LLM session and the prompt loader, with what the run noted
        (:meth:`note_provenance`); ``sections`` are params sections hashed beside the
        stage's own, ``extra`` further provenance fields."""
        from medpref.prompts import loaded_prompts

        passed = sorted({"models", "prompts"} & set(extra))
        if passed:
            raise TypeError(f"finish() takes no {passed}: the session records the roles' "
                            "models and the loaded prompts, and the run notes the rest "
                            "(Stage.note_provenance)")
        ledger = self._llm.write_ledger(self.report("ledger.json")) if self._llm else None
        roles = self._llm.role_models() if self._llm else {}
        weights = self._llm.model_contents() if self._llm else {}
        write_metrics(metrics, self.report("metrics.json"))
        write_metrics({"wall_s": round(self.wall_s, 1),
                       "steps_s": {k: round(v, 1) for k, v in self.timings.items()}},
                      self.report("timings.json"))
        write_provenance(self.report("provenance.json"), provenance(
            self.params, (self.key, *sections), models={**weights, **self._noted["models"]},
            prompts={**loaded_prompts(), **self._noted["prompts"]}, seed=self.seed, stage=self.key,
            roles=roles, **extra))
        self.close()
        return {"metrics": metrics, "ledger": ledger["total"] if ledger else None,
                "wall_s": round(self.wall_s, 1)}

    def close(self) -> None:
        if self._llm is not None:
            self._llm.close()


#: the stages that are opened for one piece of their work (a grid cell, a training part),
#: in :data:`medpref.registry.PIECES`: stage name → the function that takes the opened
#: :class:`Stage` and the piece's keywords, checks them against the params and returns
#: the stage for that piece (its own folders). The domain module registers it
#: (``@register_piece(name)``: ``fn(stage, **keywords) -> Stage``) when imported, and a
#: piece's notebook imports that module before it opens the stage:
#: ``04_annotation_grid`` and ``04_annotation_grid_table`` (``medpref.annotation.grid``),
#: ``05_training`` (``medpref.training.stage``).


def open_stage(name: str, params_path: str | Path = "params.yaml", **piece: Any) -> Stage:
    """Load and validate the params and start the stage's clock: the one way every stage,
    grid cell and training part is opened (a notebook's first line)::

        open_stage("01_sampling", params_path)
        open_stage("04_annotation_grid", params_path, weighting="dep", trajectory=3)
        open_stage("05_training", params_path, part="dpo", run="cai_dep")

    A stage in :data:`PIECES` gets its piece's keywords (an unknown or missing one is a
    ``TypeError`` naming the stage); any other stage takes none."""
    stage = Stage(name=name, params=load_params(repo_path(params_path)))
    opener = PIECES[name] if name in PIECES else None
    if opener is None:
        if piece:
            raise TypeError(f"stage {name} is opened whole: it takes no {sorted(piece)} "
                            "(a stage opened in pieces registers its opener with "
                            "register_piece when its module is imported)")
        return stage
    try:
        inspect.signature(opener).bind(stage, **piece)
    except TypeError as exc:
        raise TypeError(f"stage {name}: {exc} (its keywords: "
                        f"{list(inspect.signature(opener).parameters)[1:]})") from None
    return opener(stage, **piece)
