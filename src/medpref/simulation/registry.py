"""A name → class registry for the SP test's pluggable parts (graders, patients).

``register`` is a class decorator that records the class under a name (and sets its
``name``); ``build`` makes one from its context, with an error naming the params key
and the known names when the name is unknown.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Registry(dict[str, Callable[[Any], Any]]):
    def __init__(self, what: str, key: str):
        super().__init__()
        self.what, self.key = what, key

    def register(self, name: str):
        def deco(cls):
            cls.name = name
            self[name] = cls
            return cls
        return deco

    def build(self, name: str, ctx: Any) -> Any:
        if name not in self:
            raise KeyError(f"{self.key}: no {self.what} '{name}' (known: "
                           f"{', '.join(sorted(self))})")
        return self[name](ctx)
