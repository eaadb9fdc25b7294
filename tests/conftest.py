"""Shared fixtures. Tests run offline on CPU; the embedded models come from `make setup`."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from medpref import REPO_ROOT
from medpref.llm.cache import ResponseCache
from medpref.llm.client import LLMClient
from medpref.llm.ledger import Ledger
from medpref.llm.scripted import ScriptedBackend
from medpref.llm.types import GenerationParams

EMBEDDED_LLM = REPO_ROOT / "models" / "smollm2-135m-instruct"


def pytest_configure(config):
    """The hash memo of model files (medpref.identity) goes to a folder of the run, for the
    tests and the notebooks they start: a test's temporary adapters never enter the
    user's data/cache/fingerprints.json."""
    import os
    import tempfile

    if "MEDPREF_FINGERPRINTS" not in os.environ:
        memo = Path(tempfile.mkdtemp(prefix="medpref-fingerprints-")) / "fingerprints.json"
        os.environ["MEDPREF_FINGERPRINTS"] = str(memo)


@pytest.fixture
def cache(tmp_path):
    c = ResponseCache(tmp_path / "cache" / "test.sqlite")
    yield c
    c.close()


@pytest.fixture
def scripted_client(cache):
    """A client over a backend that answers 'echo: <last message>' and counts requests."""

    def make(responder=None, role="judge", **defaults):
        backend = ScriptedBackend(responder or (lambda r: "echo: " + r.messages[-1]["content"]))
        return LLMClient(role, backend, GenerationParams(**defaults), cache=cache,
                         ledger=Ledger("test"))

    return make


@pytest.fixture(scope="session")
def embedded_llm_path():
    if not (EMBEDDED_LLM / "model.safetensors").exists():
        pytest.fail("the embedded model is missing: run `make setup` (it prepares models/)")
    return EMBEDDED_LLM


def with_budgets(section, **budgets: int):
    """``section`` (a params section with a ``calls`` mapping) with these calls' token
    budgets; a call the section does not make is a KeyError, so a stale name cannot pass
    silently (``model_copy`` does not validate)."""
    unknown = sorted(set(budgets) - set(section.calls))
    if unknown:
        raise KeyError(f"{type(section).__name__} makes no call {unknown} "
                       f"(its calls: {sorted(section.calls)})")
    calls = {name: c.model_copy(update={"max_new_tokens": budgets[name]}) if name in budgets
             else c for name, c in section.calls.items()}
    return section.model_copy(update={"calls": calls})


def stage01_on_server(tmp_path, monkeypatch, model: str, url_env: str, key_env: str,
                      n_items: int = 4, guard=None, max_new_tokens: int = 64,
                      rounds: bool = True, **server_kw):
    """Stage 01 with its annotator on an OpenAI-compatible server, folders under tmp_path.
    ``rounds=False``: a future the annotator leaves short stays short (no round-by-round
    continuation by the local patient and doctor roles, which generate with the embedded
    model: minutes on 2 cores for tests whose subject is the annotator's server)."""
    from medpref.llm.session import LLMSession
    from medpref.params import RoleConfig, ServerConfig, load_params
    from medpref.stagekit import Stage

    monkeypatch.setattr(Stage, "data_dir", property(lambda self: tmp_path / "data"))
    monkeypatch.setattr(Stage, "reports_dir", property(lambda self: tmp_path / "reports"))
    params = load_params()
    llm = params.shared.llm
    llm.servers["test"] = ServerConfig(base_url_env=url_env, api_key_env=key_env, **server_kw)
    llm.roles["annotator"] = RoleConfig(backend="openai", model=model, server="test")
    update = {"n_items": n_items, "future_rounds": 2}
    if not rounds:
        update["rounds"] = params.sampling.rounds.model_copy(update={"enabled": False})
    if guard is not None:
        update["guard"] = guard
    params._sections["sampling"] = with_budgets(params.sampling.model_copy(update=update),
                                                continuation=max_new_tokens)
    stage = Stage(name="01_sampling", params=params)
    stage._llm = LLMSession("01_sampling", params.shared,
                            cache=ResponseCache(tmp_path / "cache" / "01_sampling.sqlite"))
    return stage


def run_stage01(stage):
    from medpref.sampling import stage as sampling_stage

    return sampling_stage.run(stage)


EMBEDDED_TOKENIZER = REPO_ROOT / "models" / "smollm2-135m-instruct"


def make_tiny_llama(path, tokenizer, max_positions: int = 512):
    """A randomly initialised (seed 0) 2-layer llama with the embedded tokenizer, saved to
    ``path``: seconds to train, for tests of training and generation code."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=max_positions,
                         pad_token_id=tokenizer.pad_token_id)
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@contextlib.contextmanager
def serving(model_dir: str | Path, tmp_path_factory):
    """(base URL, model id) of ``transformers serve`` serving ``model_dir``, its log in a
    temporary folder: what a module fixture of the served tests yields."""
    model = str(Path(model_dir).resolve())
    with transformers_serve(model, tmp_path_factory.mktemp("serve") / "serve.log") as url:
        yield url, model


@contextlib.contextmanager
def transformers_serve(model: str, log: Path):
    """``transformers serve`` of the model folder on a free 127.0.0.1 port, stopped on
    exit; yields the base URL (``…/v1``). Fails the test with the server's log when it
    does not come up within 5 min."""
    import os
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cli = Path(sys.executable).with_name("transformers")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    with open(log, "w") as fh:
        proc = subprocess.Popen([str(cli), "serve", model, "--host", "127.0.0.1", "--port",
                                 str(port), "--device", "cpu"], stdout=fh, stderr=fh, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=5) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"transformers serve did not start: {log.read_text()[-2000:]}")
            time.sleep(1)
        yield f"{base}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def configured_grader_with_minilm():
    """The SP grader as params configure it, reading with the embedded MiniLM (memoized);
    the calling test is skipped when the model is not set up."""
    from medpref.embedding import load_encoder, memoized
    from medpref.params import load_params, repo_path
    from medpref.prompts import load_prompt
    from medpref.simulation.graders import GraderContext, build_grader
    from medpref.simulation.grading import GradingSetup

    p = load_params().simulation
    model = repo_path(p.embedding_model)
    if not (model / "modules.json").exists():
        pytest.skip(f"no MiniLM at {model}")
    g = p.grader
    setup = GradingSetup(judge=None, templates=[load_prompt(n) for n in g.prompts],
                         count_template=load_prompt(g.count_prompt),
                         encode=memoized(load_encoder(model)), max_candidates=g.max_candidates,
                         embedding_threshold=g.embedding_threshold)
    return build_grader(g.mode, GraderContext(g, setup))
