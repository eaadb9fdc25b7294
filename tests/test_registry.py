"""One registry for every pluggable kind (``medpref.registry``).

For each kind, an entry registered the way a user registers one (the registry's decorator,
in a module of the user's) is found by name through the same path the pipeline uses (the
params validators, ``build_*``, ``strategy_plan``, ``open_stage``); a second entry under a
taken name is refused naming both; an unknown name is refused naming the params key and
the known names. The built-in entries register the same way, from their own modules.
"""

from __future__ import annotations

import ast
import sys

import pytest

from medpref import REPO_ROOT, registry
from medpref.registry import Registry, RegistryError

SRC = REPO_ROOT / "src" / "medpref"


@pytest.fixture
def throwaway():
    """Names registered by a test, removed after it (the registries are module state)."""
    added: list[tuple[Registry, str]] = []
    yield added
    for reg, name in added:
        reg.unregister(name)


# -- the type -------------------------------------------------------------------------------

def test_a_registry_registers_gets_lists_and_refuses_clearly():
    reg: Registry = Registry("widget", "section.widget", name_attr="name")

    @reg.register("b")
    class B:
        pass

    @reg.register("a")
    class A:
        pass

    assert reg.get("a") is A and reg["b"] is B and A.name == "a"
    assert reg.names() == ["a", "b"] and list(reg) == ["b", "a"] and len(reg) == 2
    assert "a" in reg and "c" not in reg
    assert reg.register("a")(A) is A                       # the same entry again: no-op
    with pytest.raises(ValueError, match=r"widget 'a' is registered twice: .*\.A and "
                                         r".*\.Other"):
        @reg.register("a")
        class Other:
            pass
    with pytest.raises(RegistryError, match=r"^section.widget: no widget 'c' \(known: a, b\)$"):
        reg.get("c")
    with pytest.raises(KeyError):                           # a lookup error ...
        reg["c"]
    with pytest.raises(ValueError, match=r"^other.key: no widget 'c'"):   # ... and a bad value
        reg.get("c", key="other.key")
    with pytest.raises(ValueError, match="non-empty string"):
        reg.register("")
    reg.unregister("a")
    assert reg.names() == ["b"]


def test_a_lazy_registry_asks_find_then_discover_before_it_gives_up():
    asked = []
    reg: Registry = Registry("thing", "k", find=lambda n: asked.append(("find", n)),
                             discover=lambda: asked.append(("discover",)))
    with pytest.raises(RegistryError, match=r"k: no thing 'x' \(known: \)"):
        reg.get("x")
    assert asked == [("find", "x"), ("discover",)]
    reg2: Registry = Registry("thing", "k")
    reg2.find = lambda n: reg2.register(n)(object())       # find registers it: no discover
    reg2.discover = lambda: pytest.fail("discover called although find found the entry")
    assert reg2.get("y") is not None


def test_the_registry_module_imports_no_medpref_module():
    """A library below every stage: nothing it imports can pull a stage in."""
    tree = ast.parse((SRC / "registry.py").read_text(encoding="utf-8"))
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    imported += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [m for m in imported if m.startswith("medpref")], imported


# -- strategies -----------------------------------------------------------------------------

def test_the_built_in_strategies_register_from_their_own_modules():
    from medpref.annotation.stage import strategy_plan

    names = ["gpt4_rank", "cai_avg", "cai_dep", "agent", "control_process"]
    for name, fn in strategy_plan(names):
        module = f"medpref.annotation.{registry.STRATEGY_MODULES.get(name, name)}"
        assert fn.__module__ == module, (name, fn.__module__)
    stage_src = (SRC / "annotation" / "stage.py").read_text(encoding="utf-8")
    assert "register_strategy" not in stage_src      # none inside the stage module


def test_a_user_strategy_module_is_found_by_name(tmp_path, monkeypatch):
    """A file ``medpref/annotation/<name>.py`` that registers ``<name>``: no other edit."""
    import medpref.annotation

    name = "registry_test_strategy"
    (tmp_path / f"{name}.py").write_text(
        "from medpref.annotation.strategies import register_strategy\n\n\n"
        f"@register_strategy({name!r})\n"
        "def strategy(inputs):\n    return []\n")
    monkeypatch.setattr(medpref.annotation, "__path__",
                        [*medpref.annotation.__path__, str(tmp_path)])
    try:
        fn = registry.STRATEGIES.get(name)
        assert fn.__module__ == f"medpref.annotation.{name}" and fn(None) == []
    finally:
        registry.STRATEGIES.unregister(name)
        sys.modules.pop(f"medpref.annotation.{name}", None)


def test_a_strategy_name_taken_twice_or_unknown_is_refused(throwaway):
    from medpref.annotation.stage import strategy_plan
    from medpref.annotation.strategies import register_strategy

    @register_strategy("registry_test_twice")
    def first(inputs):
        return []
    throwaway.append((registry.STRATEGIES, "registry_test_twice"))
    with pytest.raises(ValueError, match="annotation strategy 'registry_test_twice' is "
                                         "registered twice"):
        @register_strategy("registry_test_twice")
        def second(inputs):
            return []
    with pytest.raises(ValueError, match=r"^annotation.strategies: no annotation strategy "
                                         r"'no_such' \(known: ") as err:
        strategy_plan(["gpt4_rank", "no_such"])
    known = str(err.value).partition("(known: ")[2].rstrip(")").split(", ")
    assert known == sorted(known)   # every strategy the package registers, and the user's
    assert {"agent", "cai_avg", "cai_dep", "control_process", "gpt4_rank",
            "registry_test_twice"} <= set(known)
    with pytest.raises(ValueError, match="control=False but CONTROLS lists it"):
        register_strategy("control_process")


# -- graders --------------------------------------------------------------------------------

def test_a_user_grader_registers_validates_and_builds(throwaway):
    from medpref.registry import register_grader
    from medpref.simulation.config import GraderParams
    from medpref.simulation.graders import GraderContext, build_grader, check_names

    @register_grader("registry_test_grader")
    class PassesNothing:
        def __init__(self, ctx):
            self.ctx = ctx

        def grade(self, consults, cases):
            return []
    throwaway.append((registry.GRADERS, "registry_test_grader"))

    p = GraderParams(mode="registry_test_grader", compare=["registry_test_grader"])
    grader = build_grader(p.mode, GraderContext(p, setup=None))
    assert isinstance(grader, PassesNothing) and grader.name == "registry_test_grader"
    with pytest.raises(ValueError, match="grader 'echo_aware' is registered twice"):
        register_grader("echo_aware")(PassesNothing)
    with pytest.raises(ValueError, match=r"simulation.grader.mode: no grader 'nope' \(known: "
                                         r"echo_aware, embedding, generate, options, "
                                         r"registry_test_grader\)"):
        check_names(GraderParams(mode="nope"))
    with pytest.raises(ValueError, match=r"simulation.grader.compare: no grader 'nope'"):
        check_names(GraderParams(compare=["nope"]))


# -- patients -------------------------------------------------------------------------------

def test_a_user_patient_registers_validates_and_builds(throwaway):
    from medpref.registry import register_patient
    from medpref.simulation.config import PatientParams
    from medpref.simulation.patients import PatientContext, PatientReply, build_patient

    @register_patient("registry_test_patient")
    class Silent:
        def __init__(self, ctx):
            self.ctx = ctx

        def reply(self, consults):
            return [PatientReply("") for _ in consults]
    throwaway.append((registry.PATIENTS, "registry_test_patient"))

    p = PatientParams(kind="registry_test_patient")
    patient = build_patient(p.kind, PatientContext(p, {}, {}, encode=None))
    assert isinstance(patient, Silent) and patient.reply([1, 2])[1].text == ""
    with pytest.raises(ValueError, match="patient 'extractive' is registered twice"):
        register_patient("extractive")(Silent)
    with pytest.raises(ValueError, match=r"simulation.patient.kind: no patient 'nope' \(known: "
                                         r"extractive, llm, registry_test_patient\)"):
        PatientParams(kind="nope")


# -- control doctors ------------------------------------------------------------------------

def test_a_control_doctor_name_taken_twice_or_unknown_is_refused():
    """(A user's control doctor registered and run: test_sp_controls.)"""
    from medpref.simulation import controls
    from medpref.simulation.config import SimulationParams

    assert controls.CONTROLS is registry.CONTROL_DOCTORS
    assert controls.register_control is not None
    with pytest.raises(ValueError, match="control doctor 'control_echo' is registered twice"):
        registry.register_control("control_echo")(controls.ReciterControl)
    with pytest.raises(ValueError, match=r"simulation.controls: no control doctor 'control_x' "
                                         r"\(known: control_echo, control_lecture, "
                                         r"control_reciter, control_script, "
                                         r"control_testlist\)"):
        SimulationParams(controls=["control_x"])


# -- REM scorer modes -----------------------------------------------------------------------

def test_a_user_rem_scorer_mode_registers_validates_and_builds(throwaway):
    from medpref.llm import CallSpec
    from medpref.registry import register_rem_scorer
    from medpref.rem.config import RemScorerSettings
    from medpref.remscore.scorers import build_scorer
    from medpref.remscore.task import COMMENT_PREFIX

    seen = {}

    @register_rem_scorer("registry_test_mode")
    def constant(client, flowchart, examples, template, *, call, k, **settings):
        seen.update(client=client, template=template.name, k=k, **settings)
        return "a scorer"
    throwaway.append((registry.REM_SCORERS, "registry_test_mode"))

    assert RemScorerSettings(mode="registry_test_mode").mode == "registry_test_mode"
    call = CallSpec("rem", "rem_judge", 64, COMMENT_PREFIX)
    assert build_scorer("registry_test_mode", "client", None, [], k=3, call=call) == "a scorer"
    assert seen["client"] == "client" and seen["template"] == "rem_judge" and seen["k"] == 3
    assert set(seen) >= {"seed", "n_examples", "temperature", "comment", "detail",
                         "state_value"}
    with pytest.raises(ValueError, match="REM scorer mode 'expected' is registered twice"):
        register_rem_scorer("expected")(constant)
    with pytest.raises(ValueError, match=r"rem.scorers.<name>.mode: no REM scorer mode 'greedy' "
                                         r"\(known: encoder, expected, finetuned, length, "
                                         r"majority, registry_test_mode, sampled, surface\)"):
        RemScorerSettings(mode="greedy")


def test_the_built_in_rem_scorer_modes_are_registered_builders():
    from medpref.remscore import fitted, scorers

    assert registry.REM_SCORERS.names() == ["encoder", "expected", "finetuned", "length",
                                            "majority", "sampled", "surface"]
    assert {n: m.build.__module__ for n, m in registry.REM_SCORERS.items()} == {
        **dict.fromkeys(["sampled", "expected", "finetuned"], scorers.__name__),
        **dict.fromkeys(["majority", "length", "surface", "encoder"], fitted.__name__)}
    assert [n for n, m in registry.REM_SCORERS.items() if m.fitted] == [
        "majority", "length", "surface", "encoder"]
    # the code around the modes asks the registered mode, never which mode it is
    for path in ("remscore/scorers.py", "remscore/fitted.py", "rem/config.py",
                 "rem/build_rem.py", "rem/stage.py"):
        src = (SRC / path).read_text(encoding="utf-8")
        assert "mode ==" not in src and "mode !=" not in src, path
    assert [n for n, m in registry.REM_SCORERS.items() if m.adapter] == ["finetuned"]


def test_a_rem_mode_describes_itself_and_checks_its_settings(throwaway):
    from medpref.registry import register_rem_scorer
    from medpref.rem.config import RemScorerSettings
    from medpref.remscore.scorers import describe_settings

    def never_two(settings):
        if settings.k == 2:
            raise ValueError("registry_test_checked: k must not be 2")

    @register_rem_scorer("registry_test_plain")
    def plain(client, flowchart, examples, template, **_):
        """Reads the first score it sees.

        More text that Table 5 does not show."""
    throwaway.append((registry.REM_SCORERS, "registry_test_plain"))

    @register_rem_scorer("registry_test_checked", describe=lambda s, card: f"k={s.k}",
                         check=never_two)
    def checked(client, flowchart, examples, template, **_):
        return None
    throwaway.append((registry.REM_SCORERS, "registry_test_checked"))

    assert describe_settings(RemScorerSettings(mode="registry_test_plain")) == \
        "mode registry_test_plain: Reads the first score it sees"
    assert describe_settings(RemScorerSettings(mode="registry_test_checked", k=3)) == "k=3"
    with pytest.raises(ValueError, match="k must not be 2"):
        RemScorerSettings(mode="registry_test_checked", k=2)
    # the built-in checks moved into their modes and still hold
    with pytest.raises(ValueError, match="k applies to sampled scorers only"):
        RemScorerSettings(mode="expected", k=2)
    with pytest.raises(ValueError, match="reads its adapter's task card"):
        RemScorerSettings(mode="finetuned", n_examples=2)
    with pytest.raises(ValueError, match="leave state_value 'expected'"):
        RemScorerSettings(mode="sampled", k=2, state_value="label")
    # a builder registered again under its own name is the same registration
    register_rem_scorer("registry_test_plain")(plain)


# -- stage pieces ---------------------------------------------------------------------------

def test_a_user_piece_opener_registers_and_opens(throwaway):
    from medpref.registry import register_piece
    from medpref.stagekit import Stage, open_stage

    @register_piece("99_registry_test")
    def open_part(stage: Stage, part: str) -> Stage:
        stage.name = f"{stage.name}_{part}"
        return stage
    throwaway.append((registry.PIECES, "99_registry_test"))

    assert open_stage("99_registry_test", part="x").name == "99_registry_test_x"
    with pytest.raises(TypeError, match="stage 99_registry_test: .*'part'"):
        open_stage("99_registry_test")
    with pytest.raises(ValueError, match="stage piece opener '99_registry_test' is "
                                         "registered twice"):
        register_piece("99_registry_test")(lambda stage: stage)
    with pytest.raises(RegistryError, match=r"open_stage: no stage piece opener '01_sampling'"):
        registry.PIECES.get("01_sampling")


# -- LLM backends ---------------------------------------------------------------------------

def test_a_user_backend_registers_and_a_role_names_it(throwaway):
    from medpref.llm import LLMSession
    from medpref.llm.errors import BackendConfigError
    from medpref.llm.replay import ReplayBackend
    from medpref.params import SharedParams

    assert {"hf", "openai", "replay"} <= set(registry.BACKENDS.names())
    built = []

    @registry.register_backend("registry_test_backend")
    def echo_backend(cfg, shared):
        built.append(cfg.model)
        return ReplayBackend({"backend": "hf", "model": cfg.model})
    throwaway.append((registry.BACKENDS, "registry_test_backend"))

    shared = SharedParams(llm={"roles": {"judge": {"backend": "registry_test_backend",
                                                   "model": "my-model"}}})
    session = LLMSession("00_test", shared)
    session.backend_for(shared.llm.roles["judge"])
    assert built == ["my-model"]
    bad = SharedParams(llm={"roles": {"judge": {"backend": "opnai", "model": "gpt-4o"}}})
    with pytest.raises(BackendConfigError,
                       match=r"shared.llm.roles.judge.backend: no LLM backend 'opnai' "
                             r"\(known: hf, openai, registry_test_backend, replay\)"):
        LLMSession("00_test", bad)
