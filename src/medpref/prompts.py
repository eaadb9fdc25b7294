"""Prompts are files: ``configs/prompts/<name>.yaml`` with ``system`` and ``user`` texts.

Placeholders are ``{{name}}`` (so JSON braces in a prompt need no escaping). Rendering
fails on a missing or an unused variable, so a prompt and its caller cannot drift apart
silently. Each prompt's SHA-256 is part of the provenance of what it produced.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from medpref import REPO_ROOT

PROMPTS_DIR = REPO_ROOT / "configs" / "prompts"
_PLACEHOLDER = re.compile(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}")


@dataclass(frozen=True)
class PromptTemplate:
    name: str
    system: str
    user: str
    sha: str

    @property
    def variables(self) -> set[str]:
        return set(_PLACEHOLDER.findall(self.system)) | set(_PLACEHOLDER.findall(self.user))

    def render(self, **values: object) -> list[dict[str, str]]:
        """Chat messages with every placeholder filled."""
        missing = self.variables - values.keys()
        unused = values.keys() - self.variables
        if missing or unused:
            raise KeyError(f"prompt '{self.name}': missing {sorted(missing)}, "
                           f"unused {sorted(unused)}")

        def fill(text: str) -> str:
            return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), text)

        messages = []
        if self.system.strip():
            messages.append({"role": "system", "content": fill(self.system).strip()})
        messages.append({"role": "user", "content": fill(self.user).strip()})
        return messages


_LOADED: dict[str, str] = {}


def loaded_prompts() -> dict[str, str]:
    """name → SHA of every template loaded since ``forget_loaded_prompts`` (each stage
    opens with it): the prompts a stage's provenance records."""
    return dict(sorted(_LOADED.items()))


def forget_loaded_prompts() -> None:
    _LOADED.clear()


def load_prompt(name: str, directory: str | Path | None = None) -> PromptTemplate:
    """Load ``<directory>/<name>.yaml`` (default ``configs/prompts``); recorded for the
    provenance of the stage that loads it."""
    path = Path(directory or PROMPTS_DIR) / f"{name}.yaml"
    raw = path.read_text(encoding="utf-8")
    data = yaml.safe_load(raw) or {}
    unknown = set(data) - {"system", "user", "description"}
    if unknown or "user" not in data:
        raise ValueError(f"{path}: a prompt file has `user` (required), `system` and "
                         f"`description`; found {sorted(data)}")
    template = PromptTemplate(name, data.get("system", ""), data["user"],
                              hashlib.sha256(raw.encode()).hexdigest()[:12])
    _LOADED[name] = template.sha
    return template


def format_dialogue(turns, doctor: str = "Doctor", patient: str = "Patient") -> str:
    """Turns as ``Doctor: ...`` / ``Patient: ...`` lines (the format prompts use)."""
    names = {"doctor": doctor, "patient": patient}
    return "\n".join(f"{names[t.role]}: {t.text}" for t in turns)
