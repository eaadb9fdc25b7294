"""params.yaml's values that the code defaults, written from the section models.

Every knob is typed once. A field with a default in a section model (``*/config.py``)
has its value there, and ``medpref params-yaml`` (``make params-yaml``) writes it into
params.yaml; a field without one (the roles, servers and prices the pipeline names, the
training recipes) is typed in params.yaml alone. The file's comments, key order and
hand-typed values are kept (a round trip through ruamel.yaml); what the generator owns is
every value a default gives. ``medpref params-yaml --check`` (and tests/test_params.py)
fails when params.yaml holds another value for a defaulted field, so the two cannot
drift: change a default in the code and regenerate, as for dvc.yaml.

An experiment that sets a value (``dvc exp run -S key=value``) is not a default: it
changes params.yaml in the experiment's workspace only.
"""

from __future__ import annotations

import difflib
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

#: keys whose values the pipeline names and the code has none of (roles, prices, servers)
TYPED_IN_PARAMS = ("shared.llm.roles", "shared.llm.prices", "shared.llm.servers")
_NONE = object()


def plain(value: Any) -> Any:
    """A value as params.yaml holds it (models dumped, tuples as lists, paths as text)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, Path):
        return value.as_posix()
    return value


def _field_default(field) -> Any:
    if field.default_factory is not None:
        return field.default_factory()
    return _NONE if field.default is PydanticUndefined else field.default


def defaulted(value: Any, default: Any = _NONE, path: tuple[str, ...] = ()
              ) -> Iterator[tuple[tuple[str, ...], Any, Any]]:
    """(key path, the code's default, the value params.yaml gives) of every field with a
    default, walking a validated section: a sub-section is walked field by field (against
    its default instance, if any); a list or mapping is one value."""
    if not isinstance(value, BaseModel):
        if default is not _NONE:
            yield path, plain(default), plain(value)
        return
    for name, field in type(value).model_fields.items():
        sub = getattr(default, name) if isinstance(default, BaseModel) else _field_default(field)
        yield from defaulted(getattr(value, name), sub, (*path, name))


def generated_values(sections: dict[str, BaseModel]) -> list[tuple[tuple[str, ...], Any, Any]]:
    """Every (path, default, current) the generator owns, over all sections."""
    out = []
    for name, section in sections.items():
        for path, default, current in defaulted(section, _NONE, (name,)):
            if not ".".join(path).startswith(TYPED_IN_PARAMS):
                out.append((path, default, current))
    return out


def _yaml():
    from ruamel.yaml import YAML

    y = YAML()
    y.preserve_quotes = True
    y.width = 4096                       # a long value stays on its line
    y.indent(mapping=2, sequence=4, offset=2)
    y.representer.add_representer(
        type(None), lambda r, _: r.represent_scalar("tag:yaml.org,2002:null", "null"))
    return y


def _node(new: Any, old: Any) -> Any:
    """``new`` as a ruamel node, in ``old``'s style (flow or block) where it had one, its
    comments kept for the keys both hold."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    if isinstance(new, dict):
        if isinstance(old, CommentedMap):
            for k in [k for k in old if k not in new]:
                del old[k]
            for k, v in new.items():
                if k not in old or plain(old[k]) != v:
                    old[k] = _node(v, old.get(k))
            return old
        node = CommentedMap((k, _node(v, None)) for k, v in new.items())
        node.fa.set_flow_style()
        return node
    if isinstance(new, list):
        node = CommentedSeq(_node(v, None) for v in new)
        if not isinstance(old, CommentedSeq) or old.fa.flow_style():
            node.fa.set_flow_style()
        return node
    return new


def render(text: str, sections: dict[str, BaseModel]) -> str:
    """params.yaml's text with every defaulted value set from the code: a value that
    differs is replaced (in its old style), a missing key added at the end of its
    mapping; everything else as it was."""
    y = _yaml()
    doc = y.load(text)
    for path, default, current in generated_values(sections):
        parent = doc
        for key in path[:-1]:
            if key not in parent:
                parent[key] = _node({}, None)
            parent = parent[key]
        key = path[-1]
        if key not in parent or default != current:
            parent[key] = _node(default, parent.get(key))
    out = io.StringIO()
    y.dump(doc, out)
    return out.getvalue()


def _sections_of(path: Path) -> dict[str, BaseModel]:
    from medpref.params import load_params

    return load_params(path)._sections


def differences(path: Path) -> list[str]:
    """A unified diff from params.yaml to what the generator writes ([] when equal)."""
    text = path.read_text(encoding="utf-8")
    new = render(text, _sections_of(path))
    return list(difflib.unified_diff(text.splitlines(keepends=True),
                                     new.splitlines(keepends=True),
                                     f"{path.name} (committed)", f"{path.name} (generated)"))


def write(path: Path) -> Path:
    """Write the defaulted values into params.yaml (atomically)."""
    from medpref.contracts import atomic_write_text

    text = path.read_text(encoding="utf-8")
    atomic_write_text(path, render(text, _sections_of(path)))
    return path
