"""Turn quality: is a generated turn something a doctor or patient would say?

Read by hand, small models' NoteChat dialogues are often not consultations: the patient
introduces itself as "Dr. John Smith", prompt text leaks into turns ("Conversation so
far:"), checklist annotations are spoken verbatim ("joint pain (absent)"), sentences loop.
Table 3's metrics reward keyword presence alone, so none of this shows there. Three
checks per turn, pure functions (no model calls):

- ``role``: the speaker claims the other role (a patient "I'm Dr. Smith" or "I'm a
  doctor"; a doctor "I'm a patient", "a medical journalist"). Naming someone else is not
  a claim: "Dr. Smith said I should rest" passes.
- ``leak``: prompt scaffolding in the turn — a heading or instruction of the NoteChat
  prompt files (:func:`prompt_markers`), a speaker label inside the turn ("Doctor:",
  "A:"), a note's section heading ("Subjective:") or a checklist annotation ("joint pain
  (absent)").
- ``repeat``: a sentence of at least :data:`~medpref.notechat.turns.REPEAT_MIN_WORDS`
  words said twice in the turn, or one of at least :data:`COPIED_MIN_WORDS` words copied
  from an earlier turn of the dialogue (at least :data:`COPIED_MIN_SHARE` of its word
  pairs in one earlier turn, by ``copied_share``).

A turn passes when it has none of the three.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import pandas as pd

from medpref.turns.text import REPEAT_MIN_WORDS, copied_share, normalise, sentences

CHECKS = ("role", "leak", "repeat")
#: The NoteChat prompt files whose headings and instructions a turn must not contain.
NOTECHAT_PROMPTS = ("notechat_doctor", "notechat_patient", "notechat_planning",
                    "notechat_polish", "notechat_single_prompt")
#: A sentence with this share of its word pairs in one earlier turn is a copy of it.
COPIED_MIN_SHARE = 0.8
#: Copies from an earlier turn count from this many words (short stock phrases recur).
COPIED_MIN_WORDS = 8
#: Instruction sentences of the prompts are matched on their first words.
INSTRUCTION_WORDS = 6

_I_AM = r"\b(?:i\s*am|i'm|im|i\s*will\s+be|i'll\s+be|my\s+name\s+is)\s+"
#: A first-person claim to be a doctor (said by a patient).
_CLAIMS_DOCTOR = re.compile(
    _I_AM + r"(?:(?:a|an|the|your)\s+)?(?:dr\b\.?|doctor\b|physician\b|medical\s+doctor\b"
    r"|medical\s+professional\b|surgeon\b|cardiologist\b|nurse\b)", re.IGNORECASE)
#: A first-person claim to be someone other than the doctor (said by a doctor); the
#: article is required, so "I'm patient with you" is no claim.
_CLAIMS_OTHER = re.compile(
    _I_AM + r"(?:a|an|the|your)\s+(?:medical\s+|health\s+)?(?:patient|journalist|reporter"
    r"|writer|author|editor|student|personal\s+trainer|trainer|blogger)\b", re.IGNORECASE)
#: A speaker label inside a turn: "Doctor:", "Patient:", "Dr. Smith:", "A:" (at the turn
#: start or after a sentence end).
_LABEL = re.compile(r"(?:^|(?<=[.!?\"'])\s+)(?:\*\*)?(?:the\s+)?(?:doctor|physician|patient"
                    r"|dr\.?\s+[a-z]+|[a-e])(?:\*\*)?\s*:\s", re.IGNORECASE)
#: A clinical note's section heading spoken as a turn ("Subjective: ...").
_NOTE_HEADING = re.compile(r"(?:^|(?<=[.!?])\s+)(?:subjective|objective|assessment|plan|hpi"
                           r"|chief\s+complaint|history\s+of\s+present\s+illness|premise\s*\d*)"
                           r"\s*:", re.IGNORECASE)
#: A checklist keyword as the doctor agent's prompt shows it (planning.Keyword.display).
_ANNOTATION = re.compile(r"\w\s*\((?:absent|present|negated)\)", re.IGNORECASE)
#: A heading line of a prompt ("Conversation so far:"; its slot already removed).
_HEADING = re.compile(r"\s*([A-Za-z][^:\n]{2,60}):\s*$")
_APOSTROPHES = str.maketrans({"’": "'", "‘": "'"})


@dataclass(frozen=True)
class TurnFlags:
    role: bool = False
    leak: bool = False
    repeat: bool = False

    @property
    def passes(self) -> bool:
        return not (self.role or self.leak or self.repeat)


def markers_from_template(user: str) -> tuple[list[str], list[str]]:
    """``(headings, instructions)`` of a prompt's user text: each ``Label:`` that opens a
    line ("Conversation so far:"), and the first words of each instruction sentence
    ("write the doctor s next turn only"), normalised. Template slots are left out."""
    text = re.sub(r"\{\{.*?\}\}", " ", user)
    headings, body = [], []
    for line in text.splitlines():
        m = _HEADING.match(line)
        if m:
            headings.append(m.group(1).strip().lower() + ":")
        else:
            body.append(line)
    instructions = []
    for sentence in sentences(re.sub(r"\s+", " ", " ".join(body))):
        words = normalise(sentence).split()
        if len(words) >= 4:
            instructions.append(" ".join(words[:INSTRUCTION_WORDS]))
    return headings, instructions


@lru_cache(maxsize=4)
def prompt_markers(names: tuple[str, ...] = NOTECHAT_PROMPTS) -> tuple[tuple[str, ...],
                                                                      tuple[str, ...]]:
    """Headings and instructions of the NoteChat prompt files (``configs/prompts``)."""
    from medpref.prompts import load_prompt

    headings, instructions = set(), set()
    for name in names:
        h, i = markers_from_template(load_prompt(name).user)
        headings.update(h)
        instructions.update(i)
    return tuple(sorted(headings)), tuple(sorted(instructions))


def claims_other_role(text: str, role: str) -> bool:
    """The speaker says it is the other role (or not a clinician at all, for a doctor)."""
    text = text.translate(_APOSTROPHES)
    return bool((_CLAIMS_DOCTOR if role == "patient" else _CLAIMS_OTHER).search(text))


def leaks_prompt(text: str, markers: tuple[Sequence[str], Sequence[str]] | None = None) -> bool:
    """Prompt headings or instructions, a speaker label or a checklist annotation."""
    headings, instructions = markers if markers is not None else prompt_markers()
    lowered = text.translate(_APOSTROPHES).lower()
    if any(h in lowered for h in headings):
        return True
    words = f" {normalise(text)} "
    if any(f" {i} " in words for i in instructions):
        return True
    return bool(_LABEL.search(text) or _NOTE_HEADING.search(text) or _ANNOTATION.search(text))


def _long(sentence: str) -> str | None:
    key = normalise(sentence)
    return key if len(key.split()) >= REPEAT_MIN_WORDS else None


def repeats_sentence(text: str, previous: Sequence[str] = ()) -> bool:
    """A long enough sentence twice in the turn, or copied from one earlier turn."""
    keys = [k for k in (_long(s) for s in sentences(text)) if k]
    if len(keys) != len(set(keys)):
        return True
    return any(copied_share(k, list(previous)) >= COPIED_MIN_SHARE for k in keys
               if len(k.split()) >= COPIED_MIN_WORDS)


def check_turn(text: str, role: str, previous: Sequence[str] = (),
               markers: tuple[Sequence[str], Sequence[str]] | None = None) -> TurnFlags:
    """The three checks of one turn; ``previous`` are the dialogue's earlier turns."""
    return TurnFlags(role=claims_other_role(text, role), leak=leaks_prompt(text, markers),
                     repeat=repeats_sentence(text, previous))


def check_dialogue(turns: Iterable, markers=None) -> list[TurnFlags]:
    """Flags of each turn (objects or dicts with ``role`` and ``text``), in order."""
    flags, seen = [], []
    for t in turns:
        role, text = (t["role"], t["text"]) if isinstance(t, dict) else (t.role, t.text)
        flags.append(check_turn(text, role, seen, markers))
        seen.append(text)
    return flags


# -- stage 02's report -----------------------------------------------------------------------

def quality_per_dialogue(systems: dict[str, dict[str, list]]) -> pd.DataFrame:
    """One row per (system, note): turns, turns flagged by each check, turns passing."""
    rows = []
    for system, dialogues in systems.items():
        for note_id, turns in dialogues.items():
            flags = check_dialogue(turns)
            rows.append({"system": system, "note_id": note_id, "turns": len(flags),
                         **{c: sum(getattr(f, c) for f in flags) for c in CHECKS},
                         "passing": sum(f.passes for f in flags)})
    return pd.DataFrame(rows, columns=["system", "note_id", "turns", *CHECKS, "passing"])


def quality_per_system(per_dialogue: pd.DataFrame) -> pd.DataFrame:
    """Per system: dialogues, turns, and the share (%) of turns each check flags and of
    turns that pass all three."""
    rows = []
    for system, part in per_dialogue.groupby("system", sort=False):
        turns = int(part["turns"].sum())
        shares = {f"{col} %": 100.0 * part[col].sum() / turns if turns else float("nan")
                  for col in (*CHECKS, "passing")}
        rows.append({"system": system, "dialogues": len(part), "turns": turns, **shares})
    return pd.DataFrame(rows, columns=["system", "dialogues", "turns",
                                       *[f"{c} %" for c in CHECKS], "passing %"])


def table3_block(per_system: pd.DataFrame) -> pd.DataFrame:
    """Turn quality as a block beside Table 3's (rows = systems)."""
    return per_system.drop(columns=["dialogues"]).rename(columns={"system": "Turn quality"})


TABLE3_NOTE = ("Turn quality (medpref.notechat.turn_quality): % of turns where the speaker "
               "claims the other role, prompt scaffolding or checklist annotations leak in, or "
               "a sentence repeats; `passing %` has none. Table 3's other blocks reward keyword "
               "presence alone and do not see these.")
