"""Stage 01's pure parts: the unlabeled preference set D = ⟨H, C1, F1, C2, F2⟩ (PLPF §2.3.2).

Two ways to get a candidate response with its future trajectory:

* **sampling** — split a real dialogue at a random doctor turn: the turns before are the
  history H, that doctor turn is candidate C1 and up to ``future_rounds`` later rounds
  are its trajectory F1;
* **trajectory prediction** — a model continues the same history in the style of
  another dialogue (a one-shot style exemplar), giving C2 and F2.

Continuations are parsed by a pure function; malformed ones are recorded with the reason
and the raw text, retried with another exemplar, and dropped if they stay malformed; the stage
fails only when too few items come out (its ``guard``).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from medpref.contracts import Candidate, Dialogue, Turn, UnlabeledItem
from medpref.prompts import PromptTemplate, format_dialogue
from medpref.sentences import sentence_pieces


@dataclass(frozen=True)
class Split:
    """A dialogue cut at a doctor turn."""

    dialogue_id: str
    turn_index: int
    history: list[Turn]
    response: str
    future: list[Turn]
    style: str | None = None


def split_points(dialogue: Dialogue, min_future_rounds: int = 0) -> list[int]:
    """Indices of doctor turns that answer a patient turn and leave enough future."""
    turns = dialogue.turns
    return [i for i, t in enumerate(turns)
            if t.role == "doctor" and i >= 1 and turns[i - 1].role == "patient"
            and (len(turns) - i - 1) // 2 >= min_future_rounds]


def split_at(dialogue: Dialogue, index: int, future_rounds: int) -> Split:
    turns = dialogue.turns
    if turns[index].role != "doctor" or index == 0 or turns[index - 1].role != "patient":
        raise ValueError(f"{dialogue.id}: turn {index} is not a doctor reply to a patient")
    return Split(dialogue.id, index, list(turns[:index]), turns[index].text,
                 list(turns[index + 1:index + 1 + 2 * future_rounds]),
                 (dialogue.meta or {}).get("style"))


def sample_splits(dialogues: list[Dialogue], n_items: int, future_rounds: int,
                  min_future_rounds: int, seed: int) -> list[Split]:
    """``n_items`` splits: dialogues in a seeded order (cycled), a seeded doctor turn each.

    A dialogue's cut point depends only on the seed, the dialogue id and how many times
    the dialogue was used, so changing ``n_items`` keeps the earlier items the same.
    """
    usable = [d for d in dialogues if split_points(d, min_future_rounds)]
    if not usable:
        raise ValueError("no dialogue has a doctor turn with enough future to split at")
    order = sorted(usable, key=lambda d: d.id)
    random.Random(seed).shuffle(order)
    splits = []
    for k in range(n_items):
        d = order[k % len(order)]
        rng = random.Random(f"{seed}:{d.id}:{k // len(order)}")
        splits.append(split_at(d, rng.choice(split_points(d, min_future_rounds)),
                               future_rounds))
    return splits


def choose_exemplar(split: Split, pool: list[Dialogue], attempt: int, seed: int) -> Dialogue:
    """A style exemplar: another dialogue, of another doctor style when styles are known."""
    others = [d for d in pool if d.id != split.dialogue_id]
    contrast = [d for d in others if split.style and (d.meta or {}).get("style")
                and d.meta["style"] != split.style]
    candidates = sorted(contrast or others, key=lambda d: d.id)
    if not candidates:
        raise ValueError("the exemplar pool needs a dialogue other than the one being split")
    rng = random.Random(f"{seed}:{split.dialogue_id}:{split.turn_index}:exemplar")
    start = rng.randrange(len(candidates))
    return candidates[(start + attempt) % len(candidates)]


def continuation_messages(template: PromptTemplate, split: Split, exemplar: Dialogue,
                          rounds: int, exemplar_max_turns: int,
                          history_max_turns: int) -> list[dict[str, str]]:
    history = split.history[-history_max_turns:]
    return template.render(exemplar=format_dialogue(exemplar.turns[:exemplar_max_turns]),
                           history=format_dialogue(history), rounds=rounds)


# -- parsing model continuations (pure) --------------------------------------------------
class ContinuationError(ValueError):
    """A continuation that cannot be used; the message is the recorded reason."""


_SPEAKER = re.compile(
    r"^\s*[-*>#\s]*(?:\*\*|__)?\s*(doctor|physician|dr\.?|patient)\s*(?:\*\*|__)?\s*[:：]"
    r"\s*(?:\*\*|__)?\s*(.*)$", re.IGNORECASE)


@dataclass
class Continuation:
    response: str
    future: list[Turn]
    notes: list[str] = field(default_factory=list)


_INLINE_TAG = re.compile(r"(?<=\S)\s+(?=(?:Doctor|Patient|Physician)\s*:)")
#: Where a continuation runs past the dialogue into echoing the prompt's scaffolding.
_LEAK = re.compile(r"\b(?:Consultation|Dialogue|Conversation) [AB]\b|^\s*(?:Note|Explanation)\s*:",
                   re.IGNORECASE | re.MULTILINE)


def _strip_leaks(text: str) -> str:
    m = _LEAK.search(text)
    return text[:m.start()] if m else text


def _drop_repeated_sentences(text: str) -> str:
    """Small models loop: keep each sentence of a turn once."""
    seen, kept = set(), []
    for sentence in sentence_pieces(text):
        key = _normalise(sentence)
        if key and key not in seen:
            seen.add(key)
            kept.append(sentence)
    return " ".join(kept)


def _speaker_lines(text: str) -> list[tuple[str, str]]:
    """(role, text) per speaker tag; untagged lines continue the previous turn."""
    turns: list[tuple[str, str]] = []
    for line in _INLINE_TAG.sub("\n", _strip_leaks(text)).splitlines():
        m = _SPEAKER.match(line)
        if m:
            role = "patient" if m.group(1).lower() == "patient" else "doctor"
            turns.append((role, m.group(2).strip()))
        elif turns and line.strip():
            turns[-1] = (turns[-1][0], f"{turns[-1][1]} {line.strip()}".strip())
    return turns


def _merge_same_role(turns: list[tuple[str, str]]) -> list[tuple[str, str]]:
    merged: list[tuple[str, str]] = []
    for role, text in turns:
        text = _drop_repeated_sentences(text)
        if not text:
            continue
        if merged and merged[-1][0] == role:
            merged[-1] = (role, f"{merged[-1][1]} {text}")
        else:
            merged.append((role, text))
    return merged


def _normalise(text: str) -> str:
    return re.sub(r"\W+", " ", text.lower()).strip()


def parse_continuation(text: str, rounds: int, last_patient_turn: str | None = None,
                       truncated: bool = False, prefix: str = "") -> Continuation:
    """Doctor reply + future rounds from a model's continuation, or ContinuationError.

    ``prefix`` is what the answer was started with (e.g. ``"Doctor:"``); it is put back
    in front of the text before parsing.
    """
    if not text or not text.strip():
        raise ContinuationError("empty continuation")
    text = f"{prefix} {text}" if prefix else text
    turns = _merge_same_role(_speaker_lines(text))
    notes = []
    if not turns:
        raise ContinuationError("no 'Doctor:' or 'Patient:' line")
    if turns[0][0] == "patient" and last_patient_turn is not None and \
            _normalise(turns[0][1]) == _normalise(last_patient_turn):
        turns = turns[1:]
        notes.append("dropped a repeat of the last patient turn")
    if not turns or turns[0][0] != "doctor":
        raise ContinuationError("continuation does not start with the doctor")
    if truncated and len(turns) > 1:
        turns = turns[:-1]
        notes.append("dropped the last turn, cut by the token limit")
    response = turns[0][1]
    if len(response.split()) < 2:
        raise ContinuationError("doctor reply shorter than two words")
    future = [Turn(role=r, text=t) for r, t in turns[1:1 + 2 * rounds]]
    return Continuation(response, future, notes)


def make_item(index: int, split: Split, generated: Continuation, meta: dict) -> UnlabeledItem:
    return UnlabeledItem(
        id=f"u-{index:04d}", history=split.history,
        candidates=[Candidate(response=split.response, future=split.future, source="sampled"),
                    Candidate(response=generated.response, future=generated.future,
                              source="generated")],
        meta={"dialogue_id": split.dialogue_id, "split_turn": split.turn_index, **meta})
