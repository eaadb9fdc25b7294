"""Typed, strict validation of ``params.yaml``.

``params.yaml`` has one section per stage plus ``shared``. Each section is a pydantic
model that forbids unknown keys, so a misspelled knob is an error naming the key (with
a suggestion) rather than a silently ignored setting. Section models live beside the
code they configure; :data:`SECTIONS` says where, and is the list of known sections.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import json
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from medpref import REPO_ROOT


class StrictModel(BaseModel):
    """A params section: unknown keys and wrong types are errors. ``READ_BY``: the dvc
    stages that read a field of it with no :class:`ReadBy` of its own (a section: its
    stage; a sub-model: none, its fields are read with it, unless its field is read whole
    by none, ``ReadBy()``, and it names its fields' readers)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)
    READ_BY: ClassVar[tuple[str, ...]] = ()


@dataclass(frozen=True)
class ReadBy:
    """Which dvc stages read a params field, as ``Annotated[type, ReadBy(...)]`` metadata:
    :func:`medpref.dvcgen.section_params` derives a stage's params keys from it.

    ``stages`` read the field (in place of its model's ``READ_BY``; empty: none reads it
    whole, its sub-fields say who reads them). ``reads``: keys of other sections that a
    stage reading the field reads because of it (a scorer it names is settings there)."""

    stages: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()


#: what a stage that names a stage 03 REM scorer (a ``rem.scorers`` entry) reads of it: the
#: scorers, their calls and examples, the LoRA adapter and the fitted scorers
REM_SCORER_READS = ("rem.scorers", "rem.calls", "rem.icl_examples", "rem.train.adapter_dir",
                    "rem.fitted")


#: the embedded corpus and model: the defaults of every stage's dialogues and every role
EMBEDDED_DIALOGUES = "data/embedded/dialogues.jsonl"
EMBEDDED_LLM = "models/smollm2-135m-instruct"


class RoleConfig(StrictModel):
    """Which model plays a role (policy, judge, patient, ...) and how it decodes.

    A role has no token budget: each call's ``max_new_tokens`` lives in the params
    section of the stage that makes the call (one home per knob), and reaches the client
    in that call's :class:`medpref.llm.types.CallSpec`."""

    backend: str = "hf"              # a name in medpref.registry.BACKENDS (LLMSession checks it)
    model: str = EMBEDDED_LLM
    adapter: str | None = None
    server: str = "openai"
    replays: dict[str, str] | None = None
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    batch_size: int = Field(16, ge=1, le=512)
    device: str = "auto"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    #: this role's model costs nothing where it runs (skips the unpriced-model refusal)
    free: bool = False

    @model_validator(mode="before")
    @classmethod
    def _no_role_budget(cls, data):
        if isinstance(data, dict) and "max_new_tokens" in data:
            raise ValueError("a role has no max_new_tokens: set the budget of each call in "
                             "its stage's calls (e.g. annotation.calls.judge.max_new_tokens)")
        return data

    @model_validator(mode="after")
    def _replay_names_target(self) -> RoleConfig:
        if self.backend == "replay" and not self.replays:
            raise ValueError("a replay role needs `replays: {backend: ..., model: ...}`")
        return self


class ServerConfig(StrictModel):
    """An OpenAI-compatible server: names of the env vars that hold its URL and key.

    The defaults suit a server that answers a few requests at a time: 4 in flight, a
    generous per-attempt timeout and one total deadline per call, so a slow local server
    queues calls instead of timing them out and retrying them (a retry storm). A server
    that serves one request at a time wants ``max_concurrency: 1``.
    """

    base_url_env: str = "OPENAI_BASE_URL"
    api_key_env: str = "OPENAI_API_KEY"
    max_concurrency: int = Field(4, ge=1, le=256)
    max_retries: int = Field(3, ge=0, le=20)
    backoff_s: float = Field(2.0, ge=0.0, le=120.0)
    timeout_s: float = Field(300.0, gt=0.0, le=3600.0)    # one attempt
    deadline_s: float = Field(900.0, gt=0.0, le=86400.0)  # one call, retries and waits included
    # the server continues a final assistant message (vLLM: continue_final_message), so
    # the answer prefix ("Doctor:") is pre-filled as the hf backend does and option scoring
    # reads the token right after it; OpenAI's API, Ollama and `transformers serve` do not:
    # the model is then asked to start with the prefix (prefix_instruction) and option
    # scoring finds the prefix in a short greedy answer
    continue_prefix: bool = False
    prefix_instruction: str = 'Start your reply with "{prefix}".'
    top_logprobs: int = Field(20, ge=1, le=20)
    # the server returns log-probs (vLLM, OpenAI). `transformers serve` does not: set
    # false, and params that score answer options with a role on this server are refused
    # when they load (see option_scoring_uses), as is an option call to it
    logprobs: bool = True
    #: every model on this server costs nothing (a local server on a paid-looking URL)
    free: bool = False
    # the server takes vLLM's sampling extras (repetition_penalty, no_repeat_ngram_size) in
    # the request body. OpenAI's API and `transformers serve` do not (the latter answers
    # HTTP 422): set false, and the roles on this server decode without them, said once
    # in the log; their cached answers are keyed without them
    loop_controls: bool = True


class PriceConfig(StrictModel):
    input_per_1m: float = Field(0.0, ge=0.0)
    output_per_1m: float = Field(0.0, ge=0.0)


class LLMConfig(StrictModel):
    cache_dir: str = "data/cache/llm"
    max_cost_usd: float | None = Field(5.0, ge=0.0)
    prices: dict[str, PriceConfig] = Field(default_factory=dict)
    servers: dict[str, ServerConfig] = Field(default_factory=lambda: {"openai": ServerConfig()})
    roles: dict[str, RoleConfig] = Field(default_factory=dict)


class SharedParams(StrictModel):
    seed: int = 13
    #: the train / dev / eval split of the embedded dialogues that every stage reads
    #: (medpref.data.split)
    split: str = "data/embedded/dialogue_split.yaml"
    llm: LLMConfig = Field(default_factory=LLMConfig)


#: where the section models live: each stage package's ``config`` module
_PACKAGES = Path(__file__).resolve().parent
_SECTION_CLASS = re.compile(r'^class (\w+)\((?:[\w.]+)\):\n(?:(?:    .*)?\n)*?'
                            r'    SECTION: ClassVar\[str\] = "(\w+)"', re.MULTILINE)


def _find_sections() -> dict[str, str]:
    """section name → "module:Class": ``shared`` (here), then every class in a stage
    package's ``config.py`` that names its section (``SECTION: ClassVar[str] = "name"``),
    read from the source without importing it. A stage's section is thus declared once,
    by its own model; two models naming one section is an error."""
    found = {"shared": "medpref.params:SharedParams"}
    for path in sorted(_PACKAGES.glob("*/config.py")):
        for cls, name in _SECTION_CLASS.findall(path.read_text(encoding="utf-8")):
            where = f"medpref.{path.parent.name}.config:{cls}"
            if name in found:
                raise RuntimeError(f"params section '{name}' is declared twice: {found[name]} "
                                   f"and {where}")
            found[name] = where
    return found


#: section name → "module:Class" of its model. A section not listed is an unknown key.
SECTIONS: dict[str, str] = _find_sections()


class ParamsError(ValueError):
    """Invalid params: the message names the file and the dotted key."""


def _section_model(name: str) -> type[StrictModel]:
    module, cls = SECTIONS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def _suggest(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _unwrap(annotation: Any) -> Any:
    """The model type behind ``X | None`` or the value type of ``dict[str, X]``."""
    for arg in (*typing.get_args(annotation), annotation)[::-1]:
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return annotation


def _model_at(model: type[BaseModel], loc: list[str]) -> type[BaseModel] | None:
    """The pydantic model that holds the last key of ``loc`` (walking dicts of models)."""
    current: Any = model
    for part in loc:
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(part)
            if field is None:
                return None
            current = field.annotation
        elif typing.get_origin(current) is dict:
            current = typing.get_args(current)[1]
        else:
            return None
        if typing.get_origin(current) is not dict:
            current = _unwrap(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _explain(exc: ValidationError, section: str, model: type[BaseModel], path: str) -> str:
    err = exc.errors()[0]
    loc = [str(p) for p in err["loc"]]
    key = ".".join([section, *loc])
    if err["type"] == "extra_forbidden":
        parent = _model_at(model, loc[:-1])
        known = list(parent.model_fields) if parent is not None else []
        return f"{path}: unknown key '{key}'{_suggest(loc[-1], known)}"
    got = err.get("input")
    # a whole section (a before-validator's error) is not worth echoing
    return f"{path}: '{key}': {err['msg']}" + ("" if isinstance(got, dict) else f" (got {got!r})")


class Params:
    """Validated params: attribute access per section (``params.sampling.n_items``)."""

    def __init__(self, sections: dict[str, StrictModel], raw: dict[str, Any], path: Path):
        self._sections = sections
        self.raw = raw
        self.path = path

    def __getattr__(self, name: str) -> StrictModel:
        sections = self.__dict__.get("_sections", {})
        if name in sections:
            return sections[name]
        raise AttributeError(f"params have no section '{name}' (known: {sorted(sections)})")

    def section_hash(self, *names: str) -> str:
        """A short hash of the named sections' values (provenance)."""
        data = {n: self._sections[n].model_dump(mode="json") for n in names}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


def parse_params(raw: dict[str, Any], path: str | Path = "params.yaml") -> Params:
    """Validate a params mapping; the first problem raises :class:`ParamsError`."""
    path = Path(path)
    if not isinstance(raw, dict):
        raise ParamsError(f"{path}: expected a mapping of sections at the top level")
    sections: dict[str, StrictModel] = {}
    for name, value in raw.items():
        if name not in SECTIONS:
            raise ParamsError(f"{path}: unknown section '{name}'{_suggest(name, list(SECTIONS))}")
        model = _section_model(name)
        try:
            sections[name] = model.model_validate(value or {})
        except ValidationError as exc:
            raise ParamsError(_explain(exc, name, model, str(path))) from None
    sections.setdefault("shared", SharedParams())
    _refuse_options_without_logprobs(sections, path)
    return Params(sections, raw, path)


def option_scoring_uses(sections: dict[str, StrictModel]) -> list[tuple[str, str]]:
    """(params key, role) of every setting that scores answer options from log-probs
    with that role: what each section's ``option_scoring(sections)`` says it will do."""
    uses: list[tuple[str, str]] = []
    for section in sections.values():
        hook = getattr(section, "option_scoring", None)
        if hook is not None:
            uses += [(key, role) for key, role in hook(sections) if role]
    return uses


def _refuse_options_without_logprobs(sections: dict[str, StrictModel], path: Path) -> None:
    """Option scoring on a served role whose server says ``logprobs: false`` is refused
    here, before a stage makes any call (the backend would find it only at its first
    option call, maybe after many minutes of other calls)."""
    llm = sections["shared"].llm
    bad: dict[tuple[str, str], str] = {}          # (key, role) -> server
    for key, role in option_scoring_uses(sections):
        cfg = llm.roles.get(role)
        if cfg is None or cfg.backend != "openai" or cfg.server not in llm.servers:
            continue
        if not llm.servers[cfg.server].logprobs:
            bad[(key, role)] = cfg.server
    if bad:
        from medpref.llm.openai_backend import NO_LOGPROBS_HINT

        uses = "; ".join(f"'{key}' scores answer options with role '{role}' on server "
                         f"'{server}'" for (key, role), server in bad.items())
        servers = dict.fromkeys(bad.values())
        flags = ", ".join(f"shared.llm.servers.{s}.logprobs: false" for s in servers)
        says = "that server says" if len(servers) == 1 else "those servers say"
        raise ParamsError(f"{path}: {uses}, but {says} it returns no log-probs ({flags}); "
                          f"{NO_LOGPROBS_HINT}")


def load_params(path: str | Path | None = None) -> Params:
    """Load and validate ``params.yaml`` (default: the repository's)."""
    path = Path(path) if path is not None else REPO_ROOT / "params.yaml"
    with open(path, encoding="utf-8") as fh:
        raw = yaml.safe_load(fh) or {}
    return parse_params(raw, path)


def repo_path(p: str | Path) -> Path:
    """A params path, relative to the repository root unless absolute."""
    p = Path(p)
    return p if p.is_absolute() else REPO_ROOT / p
