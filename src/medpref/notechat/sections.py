"""Long notes: split by SOAP part, one dialogue per part, then combine (paper §2.1).

The paper could not fit whole MTS-Dialog notes into one prompt, so it generated a chat
per SOAP section and concatenated them with a Combine prompt that removes greetings and
repeats. Here a note longer than ``long_note_words`` with headed sections is grouped
into its SOAP parts (heading words in ``configs/notechat/soap_headings.yaml``); every
part becomes a *segment* that goes through planning and role-play like a short note;
the parts' dialogues are then combined by rules (greetings after the first part and
repeated turns dropped, the seams merged) rather than by another LLM call, which a small
model would mostly garble. The combined dialogue is then polished as a whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from medpref.contracts import ClinicalNote, Turn
from medpref.metrics.text import word_count
from medpref.turns.text import merge_same_role, normalise

SOAP_PARTS = ("Subjective", "Objective", "Assessment", "Plan")
_GREETING = re.compile(r"^\s*(?:hi|hello|hey|good (?:morning|afternoon|evening)|nice to "
                       r"(?:meet|see) you|how are you(?: feeling)?(?: today)?)\b[^.?!]*[.?!]?\s*",
                       re.IGNORECASE)


@dataclass(frozen=True)
class Segment:
    """A note, or one SOAP part of a long note, that gets its own dialogue."""

    note_id: str
    part: str | None
    text: str

    @property
    def key(self) -> str:
        return self.note_id if self.part is None else f"{self.note_id}#{self.part}"


def load_soap_headings(path: str | Path) -> dict[str, list[str]]:
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    parts = data.get("parts")
    if not isinstance(parts, dict) or set(parts) != set(SOAP_PARTS):
        raise ValueError(f"{path}: `parts` must map exactly {list(SOAP_PARTS)} to word lists")
    return {p: [str(w).lower() for w in parts[p]] for p in SOAP_PARTS}


def soap_part(heading: str, headings: dict[str, list[str]]) -> str | None:
    low = heading.lower()
    for part in SOAP_PARTS:
        if any(word in low for word in headings[part]):
            return part
    return None


def group_sections(sections: dict[str, str], headings: dict[str, list[str]]) -> dict[str, str]:
    """Headed sections grouped into SOAP parts, in note order (unmatched join the last)."""
    grouped: dict[str, list[str]] = {}
    current = SOAP_PARTS[0]
    for heading, body in sections.items():
        if not body.strip():
            continue
        current = soap_part(heading, headings) or current
        grouped.setdefault(current, []).append(f"{heading}: {body.strip()}")
    return {part: "\n".join(grouped[part]) for part in SOAP_PARTS if part in grouped}


def note_segments(note: ClinicalNote, headings: dict[str, list[str]],
                  long_note_words: int) -> list[Segment]:
    """The whole note, or its SOAP parts when it is long and has headed sections."""
    long = word_count(note.note) > long_note_words
    if long and note.sections:
        parts = group_sections(note.sections, headings)
        if len(parts) > 1:
            return [Segment(note.id, part, text) for part, text in parts.items()]
    return [Segment(note.id, None, note.note)]


def combine_parts(parts: list[list[Turn]]) -> tuple[list[Turn], list[str]]:
    """Concatenate part dialogues: later parts lose greetings and repeated turns."""
    combined: list[Turn] = []
    notes: list[str] = []
    seen: set[str] = set()
    for k, turns in enumerate(parts):
        for t in turns:
            text = t.text
            if k > 0:
                stripped = _GREETING.sub("", text, count=1).strip()
                if stripped != text.strip():
                    notes.append(f"part {k + 1}: removed a greeting")
                text = stripped
            key = normalise(text)
            if not key:
                continue
            if key in seen:
                notes.append(f"part {k + 1}: dropped a repeated turn")
                continue
            seen.add(key)
            combined.append(Turn(role=t.role, text=text))
    merged = merge_same_role(combined)
    if len(merged) < len(combined):
        notes.append("merged turns of one role at the seams")
    return merged, notes
