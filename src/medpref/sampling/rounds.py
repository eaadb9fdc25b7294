"""Trajectory prediction round by round: complete a generated future to the rounds asked.

The one-shot continuation (:mod:`medpref.sampling.trajectory`) often stops early: a small
model writes the doctor's reply and one or no further exchange. Every generated future
that falls short is continued here, one turn at a time, with the ``patient`` and
``doctor`` roles (prompts ``configs/prompts/trajectory_{patient,doctor}.yaml``; the doctor
keeps the item's style exemplar). Each step is one batched call over every item that needs
that speaker next. An unreadable turn — empty, the other speaker's, or an echo of an
earlier turn (small models repeat the conversation back) — is asked again (``retries``,
sampled with a seed); an item that still falls short keeps what it has and is reported,
never silently cut.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from medpref.contracts import Dialogue, Turn
from medpref.llm.client import LLMClient
from medpref.llm.types import CallSpec
from medpref.prompts import PromptTemplate, format_dialogue
from medpref.sampling.trajectory import _drop_repeated_sentences, _speaker_lines
from medpref.turns.text import copied_share

PREFIX = {"doctor": "Doctor:", "patient": "Patient:"}
#: Where a turn runs on into the prompt's own wording ("The patient's next message is: ...").
_SCAFFOLD = re.compile(r"\b(?:the\s+|your\s+)?(?:(?:patient|doctor)'?s?\s+)?next\s+"
                       r"(?:patient\s+|doctor\s+)?(?:message|reply|turn)\b", re.IGNORECASE)


def parse_turn(text: str, role: str, prefix: str = "", previous: Sequence[str] = (),
               max_copied: float = 1.0) -> str | None:
    """One turn of ``role`` from a raw answer (the answer was started with ``prefix``):
    the first speaker's text, cut where it echoes the prompt's wording, loops removed.
    None when it is empty, shorter than two words, spoken by the other role, or an echo:
    a share of at least ``max_copied`` of its word pairs found in one earlier turn
    (``previous``)."""
    lines = _speaker_lines(f"{prefix} {text}" if prefix else text)
    if not lines or lines[0][0] != role:
        return None
    body = lines[0][1]
    leak = _SCAFFOLD.search(body)
    body = _drop_repeated_sentences(body[:leak.start()] if leak else body).strip().strip('"')
    if len(body.split()) < 2:
        return None
    if previous and copied_share(body, list(previous)) >= max_copied:
        return None
    return body


def complete_rounds(future: Sequence[Turn]) -> int:
    """(patient, doctor) rounds at the start of a future, in order."""
    rounds = 0
    for i in range(0, len(future) - 1, 2):
        if future[i].role != "patient" or future[i + 1].role != "doctor":
            break
        rounds += 1
    return rounds


@dataclass
class Trajectory:
    """A generated candidate being completed; ``future`` grows turn by turn."""

    key: int
    history: list[Turn]
    response: str
    future: list[Turn]
    exemplar: Dialogue
    one_shot_rounds: int = 0
    failed: str | None = None

    def __post_init__(self) -> None:
        self.future = list(self.future[:2 * complete_rounds(self.future)])  # drop a tail
        self.one_shot_rounds = complete_rounds(self.future)

    @property
    def next_role(self) -> str:
        return "patient" if len(self.future) % 2 == 0 else "doctor"

    def so_far(self) -> list[Turn]:
        return [*self.history, Turn(role="doctor", text=self.response), *self.future]


@dataclass
class RoundSettings:
    """``sampling.rounds`` as the loop needs it."""

    rounds: int
    calls: dict[str, CallSpec]  # each speaker's call (sampling.rounds)
    retries: int
    retry_temperature: float
    max_copied_share: float
    history_max_turns: int
    exemplar_max_turns: int
    seed: int


@dataclass
class RoundsResult:
    trajectories: list[Trajectory]
    records: list[dict] = field(default_factory=list)


def _messages(template: PromptTemplate, t: Trajectory, s: RoundSettings) -> list[dict]:
    variables = {"history": format_dialogue(t.so_far()[-s.history_max_turns:])}
    if t.next_role == "doctor":
        variables["exemplar"] = format_dialogue(t.exemplar.turns[:s.exemplar_max_turns])
    return template.render(**variables)


def _ask_turns(batch: list[Trajectory], role: str, client: LLMClient,
               template: PromptTemplate, s: RoundSettings, records: list[dict]) -> None:
    """One speaker's next turn for every trajectory in ``batch`` (retrying unreadable
    ones); a trajectory whose turn stays unreadable is marked failed."""
    for attempt in range(s.retries + 1):
        if not batch:
            return
        sampled = {"temperature": s.retry_temperature, "seed": s.seed + attempt} \
            if attempt else {"temperature": 0.0}
        call = s.calls[role]
        answers = client.chat_many([_messages(template, t, s) for t in batch], call, **sampled)
        unread = []
        for t, comp in zip(batch, answers):
            previous = [turn.text for turn in t.so_far()]
            text = (parse_turn(comp.text, role, call.answer_prefix, previous, s.max_copied_share)
                    if comp.ok else None)
            records.append({"key": t.key, "role": role, "turn": len(t.future),
                            "attempt": attempt, "raw": comp.text, "error": comp.error,
                            "parsed": text})
            if text is None:
                unread.append(t)
            else:
                t.future.append(Turn(role=role, text=text))
        batch = unread
    for t in batch:
        t.failed = f"no readable {role} turn for future turn {len(t.future) + 1}"


def extend_trajectories(trajectories: Sequence[Trajectory], clients: dict[str, LLMClient],
                        prompts: dict[str, PromptTemplate], s: RoundSettings) -> RoundsResult:
    """Continue every trajectory to ``s.rounds`` complete future rounds, one speaker at a
    time, batching each step across trajectories."""
    records: list[dict] = []
    for _ in range(2 * s.rounds):
        active = [t for t in trajectories if t.failed is None and
                  complete_rounds(t.future) < s.rounds]
        if not active:
            break
        for role in ("patient", "doctor"):
            batch = [t for t in active if t.failed is None and t.next_role == role
                     and complete_rounds(t.future) < s.rounds]
            _ask_turns(batch, role, clients[role], prompts[role], s, records)
    return RoundsResult(list(trajectories), records)
