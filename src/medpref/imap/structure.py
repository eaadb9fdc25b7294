"""The imap data structure (imapScore §4.1) and the pure parser of a judge's imap lines.

An imap is a list of medical term-value pairs in three components: **Query** (what the
question asks, value ``?``), **Constraint** (facts that condition the answer) and
**Inform** (what an answer states). The judge writes one pair per line as
``Component-term-value`` (the paper's Tables 5 and 6); the paper's own printed output
also runs several pairs into one line, which is read the same way.

:func:`parse_imap` never raises: what it cannot read is returned in ``malformed`` with
the reason, so the raw completion plus the parser reproduce every decision.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

COMPONENTS = ("Query", "Constraint", "Inform")
QUESTION_COMPONENTS = ("Query", "Constraint")
ANSWER_COMPONENTS = ("Inform",)

#: A component marker at a line start or after whitespace: "Query-", "inform -", ...
_MARKER = re.compile(r"(?:^|(?<=\s))(?:\*\*|__)?(query|constraint|inform)(?:\*\*|__)?\s*[-–—]\s*",
                     re.IGNORECASE)
#: Bullets, numbering and markdown that may precede a line's first marker.
_BULLET = re.compile(r"^\s*(?:[-*•>#]+|\(?\d+[.)]|\*\*|__)*\s*")
_EDGE_PUNCT = " \t\"'`*_;,."
_NO_VALUE = {"none", "n/a", "na", "nothing"}
#: A line that echoes the prompt's scaffolding: the model has run past its answer.
_SCAFFOLD = re.compile(r"^\W*(?:example\b|question\b|answer\b|imap\s*:|term\s*:|"
                       r"label values|response values|relations\s*:)", re.IGNORECASE)


def cut_at_scaffolding(text: str) -> tuple[str, bool]:
    """The text before the first line that echoes the prompt ("Example question:", ...)."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if _SCAFFOLD.match(line):
            return "".join(lines[:i]), True
    return text, False


@dataclass(frozen=True)
class ImapPair:
    component: str
    term: str
    value: str

    def line(self) -> str:
        return f"{self.component}-{self.term}-{self.value}"


@dataclass
class ParsedImap:
    """What a completion said: pairs, unreadable items (with reasons), an explicit None."""

    pairs: list[ImapPair] = field(default_factory=list)
    malformed: list[dict[str, str]] = field(default_factory=list)
    none: bool = False
    notes: list[str] = field(default_factory=list)

    def to_record(self) -> dict:
        return {"pairs": [[p.component, p.term, p.value] for p in self.pairs],
                "malformed": self.malformed, "none": self.none, "notes": self.notes}

    @classmethod
    def from_record(cls, row: dict) -> ParsedImap:
        """:meth:`to_record`'s inverse."""
        return cls([ImapPair(*pair) for pair in row["pairs"]],
                   [dict(m) for m in row["malformed"]], bool(row["none"]), list(row["notes"]))


def normalise_term(term: str) -> str:
    """Terms are compared case- and punctuation-insensitively ("Side effects." = "side effects")."""
    return re.sub(r"\s+", " ", re.sub(r"[^\w\s/+]", " ", term.lower())).strip()


def _clean_value(value: str) -> str:
    return re.sub(r"\s+", " ", value).strip(_EDGE_PUNCT).strip()


def _split_term_value(rest: str) -> tuple[str, str | None, str | None]:
    """(term, value, note): split at the first "-" (values keep theirs: "dose-5-10 mg"),
    else at a ":" (tolerated, noted). A hyphenated term ("x-ray") cannot be told apart."""
    for sep, note in (("-", None), (":", "read ':' as the term-value separator")):
        if sep in rest:
            term, value = rest.split(sep, 1)
            return term, value, note
    return rest, None, None


def _parse_item(component: str, rest: str, allowed: tuple[str, ...]
                ) -> tuple[ImapPair | None, str | None, str | None, bool]:
    """(pair, malformed reason, note, is_none) for one ``Component-...`` item."""
    component = component.capitalize()
    rest = rest.strip().strip(_EDGE_PUNCT)
    if component == "Inform" and rest.lower() == "none":
        return None, None, None, True
    if component not in allowed:
        return None, f"unexpected component {component}", None, False
    term, value, note = _split_term_value(rest)
    term = normalise_term(term)
    if not term:
        return None, "empty term", None, False
    value = _clean_value(value) if value is not None else ""
    if component == "Query":
        return ImapPair(component, term, value or "?"), None, note, False
    if not value:
        return None, "no value", None, False
    if component == "Inform" and value.lower() in _NO_VALUE:
        return None, None, None, True      # "Inform-diagnosis-None": nothing to inform
    if value == "?":
        return None, f"placeholder value '?' in {component}", None, False
    return ImapPair(component, term, value), None, note, False


def _items_of_line(line: str) -> tuple[str, list[tuple[str, str, str]]]:
    """(text before the first marker, [(component, rest, raw item)]) of one line."""
    body = _BULLET.sub("", line, count=1)
    marks = list(_MARKER.finditer(body))
    if not marks:
        return body.strip(), []
    ends = [m.start() for m in marks[1:]] + [len(body)]
    items = [(m.group(1), body[m.end():end], body[m.start():end].strip())
             for m, end in zip(marks, ends)]
    return body[:marks[0].start()].strip(), items


def _read_line(line: str, allowed: tuple[str, ...], out: ParsedImap,
               seen: set[tuple[str, str, str]]) -> ImapPair | None:
    """Parse one line into ``out``; returns the pair of the line's last item if kept."""
    before, items = _items_of_line(line)
    if before:
        out.malformed.append({"text": before, "reason": "no 'Query-', 'Constraint-' "
                              "or 'Inform-' marker"})
    last = None
    for component, rest, raw in items:
        last = None
        pair, reason, note, is_none = _parse_item(component, rest, allowed)
        out.none |= is_none
        if reason:
            out.malformed.append({"text": raw, "reason": reason})
        if note and note not in out.notes:
            out.notes.append(note)
        if pair is None:
            continue
        key = (pair.component, pair.term, pair.value.lower())
        if key in seen:
            if "dropped repeated pairs" not in out.notes:
                out.notes.append("dropped repeated pairs")
            continue
        seen.add(key)
        out.pairs.append(pair)
        last = pair
    return last


def parse_imap(text: str | None, allowed: Iterable[str] = COMPONENTS,
               truncated: bool = False) -> ParsedImap:
    """Read ``Component-term-value`` pairs from a judge's completion.

    ``allowed`` are the components this completion should hold (Query/Constraint for a
    question, Inform for an answer); others are malformed. Reading stops at a line that
    echoes the prompt ("Example question:", "Answer imap:"): small models run on into a
    made-up next example. ``truncated`` (the token limit cut the completion) drops the
    pair that ends the completion, which may be cut mid-value (not a complete pair
    followed by other text). Duplicate pairs (small models repeat themselves) are kept
    once. Never raises.
    """
    allowed = tuple(allowed)     # once: a one-shot iterable must serve every line
    out = ParsedImap()
    if text is None or not text.strip():
        out.notes.append("empty completion")
        return out
    text, cut = cut_at_scaffolding(text)
    if cut:
        out.notes.append("stopped at echoed prompt scaffolding")
    seen: set[tuple[str, str, str]] = set()
    last = None
    for line in text.splitlines():
        if line.strip():
            last = _read_line(line, allowed, out, seen)
    if truncated and not cut and last is not None and not text.endswith("\n"):
        out.pairs.pop()
        out.notes.append("dropped the last pair, cut by the token limit")
    return out


# -- views of an imap -------------------------------------------------------------------
def values_by_term(pairs: Iterable[ImapPair], component: str = "Inform",
                   max_values: int | None = None) -> dict[str, list[str]]:
    """``{term: [values]}`` of one component, in order, each value once (case-insensitive)."""
    out: dict[str, list[str]] = {}
    for p in pairs:
        if p.component != component:
            continue
        values = out.setdefault(p.term, [])
        if p.value.lower() not in {v.lower() for v in values} and (
                max_values is None or len(values) < max_values):
            values.append(p.value)
    return out


def query_terms(pairs: Iterable[ImapPair]) -> list[str]:
    return list(dict.fromkeys(p.term for p in pairs if p.component == "Query"))


def format_imap(pairs: Iterable[ImapPair]) -> str:
    """The pairs as the judge writes them, one ``Component-term-value`` a line."""
    return "\n".join(p.line() for p in pairs)


def imap_text(pairs: Iterable[ImapPair]) -> str:
    """An imap as plain text for text metrics (+imap): one ``term: value`` a line."""
    return "\n".join(f"{p.term}: {p.value}" for p in pairs)
