"""A server's ``logprobs: false``: option scoring on it is refused when the params load
(naming the setting, the role and the server) and by the backend before any request;
the default (``true``) changes nothing."""

from __future__ import annotations

import copy

import pytest
import yaml

from medpref import REPO_ROOT
from medpref.llm.errors import BackendError
from medpref.llm.openai_backend import NO_LOGPROBS_HINT, OpenAIBackend
from medpref.params import ParamsError, ServerConfig, option_scoring_uses, parse_params

_RAW = yaml.safe_load((REPO_ROOT / "params.yaml").read_text(encoding="utf-8"))


def _raw(logprobs: bool | None, roles: dict[str, dict]) -> dict:
    """params.yaml with a `tserve` server (``logprobs`` as given, absent for None) and
    the named roles served there."""
    raw = copy.deepcopy(_RAW)
    llm = raw["shared"]["llm"]
    llm["servers"]["tserve"] = {"base_url_env": "TSERVE_URL", "api_key_env": "TSERVE_KEY",
                                "loop_controls": False,
                                **({} if logprobs is None else {"logprobs": logprobs})}
    for role, extra in roles.items():
        llm["roles"][role] = {"backend": "openai", "server": "tserve", "model": "m", **extra}
    return raw


# -- the params check ---------------------------------------------------------------------

def test_option_scoring_on_a_server_without_logprobs_is_refused_at_load():
    raw = _raw(False, {"judge": {}})
    with pytest.raises(ParamsError) as exc:
        parse_params(raw, "params.yaml")
    msg = str(exc.value)
    assert "'imapscore.relation_mode' scores answer options with role 'judge' on server " \
           "'tserve'" in msg
    assert "shared.llm.servers.tserve.logprobs: false" in msg
    assert NO_LOGPROBS_HINT in msg          # the alternative: the generating modes


def test_the_rem_settings_that_score_options_are_each_named():
    raw = _raw(False, {"rem": {}})
    raw["annotation"]["rem_scorer"] = "expected"
    raw["simulation"]["rem_scorer"] = "expected"
    with pytest.raises(ParamsError) as exc:
        parse_params(raw, "params.yaml")
    msg = str(exc.value)
    for key in ("rem.scorers.expected.mode", "rem.scorers.finetuned.mode",
                "rem.compliance_scorers", "annotation.rem_scorer", "simulation.rem_scorer"):
        assert f"'{key}' scores answer options with role 'rem' on server 'tserve'" in msg
    assert "'rem.scorers.sampled.mode'" not in msg and "'rem.scorers.encoder.mode'" not in msg


def test_generating_modes_load_on_a_server_without_logprobs():
    raw = _raw(False, {"judge": {}})
    raw["imapscore"]["relation_mode"] = "generate"
    params = parse_params(raw, "params.yaml")
    assert params.shared.llm.servers["tserve"].logprobs is False
    assert ("imapscore.relation_mode", "judge") not in option_scoring_uses(params._sections)


def test_the_grader_in_options_mode_is_named():
    raw = _raw(False, {"judge": {}})
    raw["imapscore"]["relation_mode"] = "generate"
    raw["simulation"]["grader"]["mode"] = "options"
    with pytest.raises(ParamsError, match=r"'simulation\.grader\.mode' scores answer options "
                                          r"with role 'judge' on server 'tserve'"):
        parse_params(raw, "params.yaml")


@pytest.mark.parametrize("logprobs", [None, True])
def test_by_default_a_server_is_trusted_with_option_scoring(logprobs):
    """``logprobs`` left out (or true): the same settings load as before."""
    assert ServerConfig().logprobs is True
    params = parse_params(_raw(logprobs, {"judge": {}, "rem": {}}), "params.yaml")
    assert params.shared.llm.servers["tserve"].logprobs is True
    assert ("imapscore.relation_mode", "judge") in option_scoring_uses(params._sections)


def test_only_served_roles_are_checked():
    raw = _raw(False, {})          # every role stays on the hf backend
    parse_params(raw, "params.yaml")


# -- the backend --------------------------------------------------------------------------

class _Recorder:
    """Stands in for the openai client: records every request it is sent."""

    def __init__(self):
        self.sent: list[dict] = []
        self.chat = self
        self.completions = self

    def create(self, **kwargs):
        self.sent.append(kwargs)
        raise RuntimeError("no server here")


def _backend(monkeypatch, **kw) -> tuple[OpenAIBackend, _Recorder]:
    monkeypatch.setenv("MEDPREF_TEST_URL", "http://127.0.0.1:9/v1")
    backend = OpenAIBackend("m", base_url_env="MEDPREF_TEST_URL", api_key_env="NO_KEY_VAR",
                            server="tserve", max_retries=0, **kw)
    recorder = _Recorder()
    backend._client = recorder
    return backend, recorder


def test_the_backend_refuses_an_option_call_without_a_request(monkeypatch):
    from medpref.llm.client import LLMClient
    from medpref.llm.types import GenerationParams

    backend, recorder = _backend(monkeypatch, logprobs=False)
    prompts = [[{"role": "user", "content": "rate it"}]]
    with pytest.raises(BackendError, match=r"server 'tserve' .* declares `logprobs: false` "
                                           r"\(shared\.llm\.servers\.tserve\.logprobs\)"):
        backend.score_options(prompts, ["0", "1", "2"], ["Score:"])
    with pytest.raises(BackendError, match="relation_mode: generate"):
        LLMClient("judge", backend, GenerationParams()).option_scores(prompts, ["0", "1"])
    assert recorder.sent == []
    assert backend.score_options([], ["0", "1"], []) == []   # nothing asked: nothing refused


def test_by_default_the_backend_sends_the_option_call(monkeypatch):
    backend, recorder = _backend(monkeypatch)
    assert backend.logprobs is True
    scored = backend.score_options([[{"role": "user", "content": "rate it"}]], ["0", "1"],
                                   ["Score:"])
    assert len(recorder.sent) == 1 and recorder.sent[0]["logprobs"] is True
    assert not scored[0].ok                 # the stand-in failed: recorded, as before


def test_the_session_passes_the_server_flag(monkeypatch):
    from medpref.llm.session import LLMSession
    from medpref.params import SharedParams

    monkeypatch.setenv("MEDPREF_TEST_URL", "http://127.0.0.1:9/v1")
    shared = SharedParams.model_validate({"llm": {
        "servers": {"on": {"base_url_env": "MEDPREF_TEST_URL"},
                    "off": {"base_url_env": "MEDPREF_TEST_URL", "logprobs": False}},
        "roles": {"a": {"backend": "openai", "model": "m", "server": "on"},
                  "b": {"backend": "openai", "model": "m", "server": "off"}}}})
    session = LLMSession("t", shared)
    assert session.role("a").backend.logprobs is True
    assert session.role("b").backend.logprobs is False
