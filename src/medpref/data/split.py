"""The one written train / development / evaluation split of a dialogue corpus.

Every stage that reads dialogues asks this split which part a dialogue belongs to
(``shared.split`` names the file): SFT trains on ``train`` and measures its loss on
``dev``; stage 01 samples, and so stage 04 annotates and stage 05 trains DPO, on
``train`` only; the held-out evaluations (held-out compliance, next turn) draw their
states from ``eval`` only. A dialogue the file does not list belongs to no part: asking
for it is an error, so a new dialogue cannot slip into training unseen.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

import yaml

from medpref.contracts import ContractError

Part = Literal["train", "dev", "eval"]
PARTS: tuple[Part, ...] = ("train", "dev", "eval")
T = TypeVar("T")


@dataclass(frozen=True)
class DialogueSplit:
    """Dialogue id → part, read from one file (``path`` names it in errors)."""

    parts: dict[str, Part]
    path: str = "<split>"

    def part(self, dialogue_id: str) -> Part:
        try:
            return self.parts[dialogue_id]
        except KeyError:
            raise KeyError(f"{self.path}: dialogue {dialogue_id!r} is in no part of the split "
                           f"(add it to train, dev or eval)") from None

    def ids(self, part: Part) -> list[str]:
        return [i for i, p in self.parts.items() if p == part]

    def select(self, items: Iterable[T], part: Part | Sequence[Part], key=lambda d: d.id
               ) -> list[T]:
        """The items whose dialogue is in ``part`` (or any of several), in input order;
        an item of an unlisted dialogue is an error."""
        wanted = {part} if isinstance(part, str) else set(part)
        return [x for x in items if self.part(key(x)) in wanted]


def load_split(path: str | Path) -> DialogueSplit:
    """Read a split file: a mapping of ``train``, ``dev``, ``eval`` to lists of dialogue
    ids. An unknown part, a non-list, or an id listed twice is a ContractError naming the
    file, the line and the part."""
    path = Path(path)
    with open(path, encoding="utf-8") as fh:
        root = yaml.compose(fh)
    if root is None or not isinstance(root, yaml.MappingNode):
        raise ContractError(path, 1, "(top level)", "expected a mapping of train, dev and eval")
    parts: dict[str, Part] = {}
    for key, value in root.value:
        name, line = key.value, key.start_mark.line + 1
        if name not in PARTS:
            raise ContractError(path, line, name, f"unknown part (expected {', '.join(PARTS)})")
        if not isinstance(value, yaml.SequenceNode) or not all(
                isinstance(n, yaml.ScalarNode) for n in value.value):
            raise ContractError(path, line, name, "must be a list of dialogue ids")
        for node in value.value:
            if node.value in parts:
                raise ContractError(path, node.start_mark.line + 1, name,
                                    f"dialogue {node.value!r} is also in '{parts[node.value]}'")
            parts[node.value] = name
    return DialogueSplit(parts, str(path))
