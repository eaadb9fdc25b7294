"""A stage's access to models: roles from params, one cache file, one ledger.

    llm = LLMSession.for_stage("01_sampling", params)
    annotator = llm.role("annotator")          # an LLMClient
    ...
    llm.write_ledger("reports/01_sampling/ledger.json")

Backends are built by name from :data:`medpref.registry.BACKENDS` (``@register_backend(name)``
on a factory ``fn(RoleConfig, SharedParams) -> Backend`` adds one; a role names it in
``shared.llm.roles.<role>.backend``); roles
that name the same model share one backend, so a model is loaded once per stage.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from medpref.llm.base import Backend
from medpref.llm.cache import ResponseCache
from medpref.llm.client import LLMClient
from medpref.llm.errors import BackendConfigError, UnpricedModelError
from medpref.llm.ledger import Ledger, Price
from medpref.llm.types import GenerationParams
from medpref.params import RoleConfig, SharedParams, repo_path
from medpref.registry import BACKENDS, register_backend

_log = logging.getLogger(__name__)

BackendFactory = Callable[[RoleConfig, SharedParams], Backend]


#: model folders that dvc.yaml's stages depend on (``- models``): a folder elsewhere works,
#: but ``dvc status`` cannot see its weights change (the cache still can)
TRACKED_MODELS_DIR = "models"
_told_untracked: set[str] = set()


@register_backend("hf")
def _hf(cfg: RoleConfig, shared: SharedParams) -> Backend:
    from medpref.llm.hf import HFBackend

    model_path = repo_path(cfg.model)
    tracked = repo_path(TRACKED_MODELS_DIR).resolve()
    for folder in filter(None, (model_path, repo_path(cfg.adapter) if cfg.adapter else None)):
        inside = folder.resolve().is_relative_to(tracked) or \
            folder.resolve().is_relative_to(repo_path("data").resolve())
        if not inside and str(folder) not in _told_untracked:
            _told_untracked.add(str(folder))
            _log.warning("model folder %s is outside %s/ (and data/): cached answers follow "
                         "its content, but dvc.yaml does not depend on it, so `dvc status` "
                         "will not see its weights change; put it under %s/", folder,
                         TRACKED_MODELS_DIR, TRACKED_MODELS_DIR)
    return HFBackend(str(model_path), adapter=str(repo_path(cfg.adapter)) if cfg.adapter else None,
                     device=cfg.device, dtype=cfg.dtype, batch_size=cfg.batch_size,
                     model_name=Path(cfg.model).name)


@register_backend("openai")
def _openai(cfg: RoleConfig, shared: SharedParams) -> Backend:
    from medpref.llm.openai_backend import OpenAIBackend

    if cfg.server not in shared.llm.servers:
        raise BackendConfigError(f"role names server '{cfg.server}', not in shared.llm.servers")
    if cfg.adapter:  # a server cannot load it: its answers would be the base model's
        raise BackendConfigError(
            f"model '{cfg.model}' on server '{cfg.server}' cannot take the LoRA adapter "
            f"{cfg.adapter}: serve the adapted model (e.g. vLLM --lora-modules) and name it "
            f"as the role's model, or play the role with the hf backend")
    s = shared.llm.servers[cfg.server]
    backend = OpenAIBackend(cfg.model, base_url_env=s.base_url_env, api_key_env=s.api_key_env,
                            max_concurrency=s.max_concurrency, max_retries=s.max_retries,
                            backoff_s=s.backoff_s, timeout_s=s.timeout_s,
                            deadline_s=s.deadline_s, continue_prefix=s.continue_prefix,
                            prefix_instruction=s.prefix_instruction,
                            top_logprobs=s.top_logprobs, server=cfg.server,
                            loop_controls=s.loop_controls, logprobs=s.logprobs)
    backend.paid = backend.paid and not s.free
    return backend


@register_backend("replay")
def _replay(cfg: RoleConfig, shared: SharedParams) -> Backend:
    from medpref.llm.replay import ReplayBackend

    return ReplayBackend(cfg.replays or {})


def generation_defaults(cfg: RoleConfig) -> GenerationParams:
    return GenerationParams(temperature=cfg.temperature, top_p=cfg.top_p)


class LLMSession:
    def __init__(self, stage: str, shared: SharedParams, cache: ResponseCache | None = None,
                 ledger: Ledger | None = None):
        for role, cfg in shared.llm.roles.items():   # a misspelt backend fails at the start
            try:
                BACKENDS.get(cfg.backend, key=f"shared.llm.roles.{role}.backend")
            except KeyError as exc:
                raise BackendConfigError(str(exc)) from None
        self.stage = stage
        self.shared = shared
        self.cache = cache
        self.ledger = ledger or Ledger(stage, max_cost_usd=shared.llm.max_cost_usd)
        self._backends: dict[str, Backend] = {}
        self._clients: dict[str, LLMClient] = {}

    @classmethod
    def for_stage(cls, stage: str, params: Any, use_cache: bool = True) -> LLMSession:
        shared: SharedParams = params.shared
        cache = None
        if use_cache:
            cache = ResponseCache(repo_path(shared.llm.cache_dir) / f"{stage}.sqlite")
        return cls(stage, shared, cache)

    def role_config(self, name: str) -> RoleConfig:
        roles = self.shared.llm.roles
        if name not in roles:
            raise BackendConfigError(f"no role '{name}' in shared.llm.roles "
                                     f"(known: {sorted(roles)})")
        return roles[name]

    def backend_for(self, cfg: RoleConfig) -> Backend:
        ident = cfg.model_dump(include={"backend", "model", "adapter", "server", "replays",
                                        "device", "dtype", "batch_size"})
        key = json.dumps(ident, sort_keys=True)
        if key not in self._backends:
            try:
                factory = BACKENDS.get(cfg.backend)
            except KeyError as exc:
                raise BackendConfigError(str(exc)) from None
            self._backends[key] = factory(cfg, self.shared)
        return self._backends[key]

    def role(self, name: str, **overrides: Any) -> LLMClient:
        """The client for a role; ``overrides`` change its config for this stage only (a
        call's token budget and answer prefix are no role settings: see ``CallSpec``)."""
        unknown = sorted(set(overrides) - set(RoleConfig.model_fields))
        if unknown:
            raise BackendConfigError(f"role '{name}': {unknown} are not role settings "
                                     f"(known: {sorted(RoleConfig.model_fields)})")
        key = name + json.dumps(overrides, sort_keys=True)
        if key not in self._clients:
            cfg = self.role_config(name).model_copy(update=overrides)
            backend = self.backend_for(cfg)
            price = self.price_for(name, cfg, backend)
            self._clients[key] = LLMClient(name, backend, generation_defaults(cfg),
                                           cache=self.cache, ledger=self.ledger, price=price)
        return self._clients[key]

    def price_for(self, role: str, cfg: RoleConfig, backend: Backend) -> Price:
        """The model's price; a paid server's model without one is refused (the budget
        guard could not count it) unless the role or the server is marked ``free``."""
        model = backend.model_label()
        price = self.shared.llm.prices.get(model)
        if price is not None:
            return Price(**price.model_dump())
        if backend.paid and not cfg.free:
            raise UnpricedModelError(
                f"role '{role}': model '{model}' on {backend.describe()} has no price in "
                f"shared.llm.prices, so the budget guard cannot count what it spends; add "
                f"`{model}: {{input_per_1m: ..., output_per_1m: ...}}` there, or set "
                f"`free: true` on the role (or its server) if it costs nothing")
        return Price()

    def model_contents(self) -> dict[str, str]:
        """Model id → content identity of its weights, for every client of a local model
        (:func:`medpref.identity.content_id`; the adapter's is part of the id)."""
        return {c.model_id: c.identity["weights"] for c in self._clients.values()
                if "weights" in c.identity}

    def role_models(self) -> dict[str, str | list[str]]:
        """Every role this session's ledger counted (calls and cache hits), with the model
        id(s) its clients used: one id, or a sorted list when a role ran several models
        (e.g. the policy role with each trained adapter). What a stage's provenance says
        about its models comes from here, not from the stage's code."""
        ids: dict[str, set[str]] = {}
        for client in self._clients.values():
            ids.setdefault(client.role, set()).add(client.model_id)
        out: dict[str, str | list[str]] = {}
        for role in self.ledger.totals()["roles"]:
            found = sorted(ids.get(role, ()))
            if not found:
                raise RuntimeError(f"role '{role}' is in the ledger of stage {self.stage} "
                                   "but no client of this session made its calls")
            out[role] = found[0] if len(found) == 1 else found
        return out

    def write_ledger(self, path: str | Path) -> dict:
        return self.ledger.write(path)

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()
