"""NoteChat's Planning module: keywords → draft → ordered checklist (paper §2.2.1).

The note's concepts (CUIs found by QuickUMLS) are the keywords. An LLM drafts a whole
dialogue around them; the checklist is the note's concepts **in the order the draft
first mentions them**, which carries the draft's high-level plan (symptoms, history,
tests, conclusion) into the role-play. After every role-play round the concepts the new
turns mention are removed, so each round is steered to what is still missing.

Two decisions of ours: concepts the draft mentions but the note does not are left out
(the checklist stays grounded in the note), and note concepts the draft forgot are
appended in note order (``keep_missing``), since a small drafting model forgets many.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from medpref.notechat.concepts import Mention


@dataclass(frozen=True)
class Keyword:
    """A checklist entry: a concept and the words the note uses for it."""

    cui: str
    text: str
    negated: bool = False

    def display(self) -> str:
        """How the keyword is shown in prompts: negated ones as '<finding> (absent)'
        (not 'no <finding>', which a lexicon may hold as another concept, e.g. afebrile)."""
        return f"{self.text} (absent)" if self.negated else self.text


def note_keywords(mentions: Sequence[Mention]) -> list[Keyword]:
    """One keyword per CUI, in order of first mention, with that mention's words."""
    seen: dict[str, Keyword] = {}
    for m in mentions:
        if m.cui not in seen:
            seen[m.cui] = Keyword(m.cui, m.text.lower(), m.negated)
    return list(seen.values())


@dataclass
class Checklist:
    """The concepts still to cover, in plan order; ``initial`` is the full plan."""

    initial: list[Keyword]
    remaining: list[Keyword] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.remaining:
            self.remaining = list(self.initial)

    @property
    def done(self) -> bool:
        return not self.remaining

    @property
    def coverage(self) -> float:
        """Share of the initial checklist covered so far (1.0 for an empty plan)."""
        if not self.initial:
            return 1.0
        return 1.0 - len(self.remaining) / len(self.initial)

    def next_keywords(self, k: int) -> list[Keyword]:
        return self.remaining[:k]

    def remove_covered(self, cuis: Iterable[str]) -> list[Keyword]:
        """Drop the concepts just mentioned; returns what was removed."""
        covered = set(cuis)
        removed = [kw for kw in self.remaining if kw.cui in covered]
        self.remaining = [kw for kw in self.remaining if kw.cui not in covered]
        return removed


def checklist_from_draft(draft_mentions: Sequence[Mention], keywords: Sequence[Keyword],
                         keep_missing: bool = True) -> Checklist:
    """The note's keywords ordered by first mention in the draft (then the rest)."""
    by_cui = {kw.cui: kw for kw in keywords}
    ordered = list(dict.fromkeys(m.cui for m in draft_mentions if m.cui in by_cui))
    if keep_missing:
        ordered += [kw.cui for kw in keywords if kw.cui not in ordered]
    return Checklist([by_cui[c] for c in ordered])


def keyword_list(keywords: Sequence[Keyword], limit: int | None = None) -> str:
    """Keywords as a comma-separated prompt string."""
    shown = keywords[:limit] if limit else keywords
    return ", ".join(kw.display() for kw in shown) or "(none)"
