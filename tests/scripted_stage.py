"""A stage run with scripted models and folders under tmp_path (fast stage tests)."""

from __future__ import annotations

from pathlib import Path

from medpref.llm import session as llm_session
from medpref.llm.scripted import ScriptedBackend
from medpref.llm.session import LLMSession
from medpref.params import Params, load_params
from medpref.stagekit import Stage


def scripted_stage(name: str, tmp_path: Path, monkeypatch, responder, *, section=None,
                   option_responder=None) -> Stage:
    """``open_stage(name)`` whose every hf role answers with ``responder`` (no cache), whose
    params section is ``section`` (when given) and whose folders live under ``tmp_path``."""
    params = load_params()
    if section is not None:
        params = Params({**params._sections, name.split("_", 1)[1]: section}, params.raw,
                        params.path)
    backend = ScriptedBackend(responder, option_responder=option_responder)
    monkeypatch.setitem(llm_session.BACKENDS, "hf", lambda cfg, shared: backend)
    monkeypatch.setattr(Stage, "data_dir", property(lambda self: tmp_path / "data" / self.name))
    monkeypatch.setattr(Stage, "reports_dir",
                        property(lambda self: tmp_path / "reports" / self.name))
    stage = Stage(name=name, params=params)
    stage._llm = LLMSession(name, params.shared, cache=None)
    return stage


def provenance_as_before(stage: Stage, models: dict, prompts: dict,
                         sections: tuple[str, ...] = (), **extra) -> dict:
    """What ``finish`` recorded before it took the run's models and prompts itself: the
    notebook passed the run's ``models`` and ``prompts``, laid over the session's weights
    and the loaded prompts. Call it before ``finish`` (which closes the session)."""
    from medpref.prompts import loaded_prompts
    from medpref.provenance import provenance

    return provenance(stage.params, (stage.key, *sections),
                      models={**stage._llm.model_contents(), **models},
                      prompts={**loaded_prompts(), **prompts}, seed=stage.seed,
                      stage=stage.key, roles=stage._llm.role_models(), **extra)
