"""NoteChat's Roleplay module: a doctor agent and a patient agent, steered by the checklist.

Two agents with their own prompts and roles (paper §2.2.1, Table 12): the doctor asks,
explains results and plans, and is told which checklist keywords to bring up next; the
patient answers in lay words from what the note says about them and never reports test
results. All segments play in lock-step, so one round is one batched call per role
across every note. After each round the concepts the new turns mention leave the
checklist; a segment stops when its checklist is empty, all stop at the round limit.

A malformed answer is repaired or dropped (:func:`medpref.turns.text.parse_turn`)
and recorded; a dropped answer is asked again (``turn_attempts``) with another seed. When
the doctor's turn is still dropped the patient sits that round out, and
when the patient's is dropped the doctor's next turn joins the doctor's last one, so the
dialogue keeps alternating.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from medpref.contracts import Turn
from medpref.llm.client import LLMClient
from medpref.notechat.calls import CallLog, step_seed
from medpref.notechat.concepts import ConceptExtractor
from medpref.notechat.config import NoteChatParams
from medpref.notechat.planning import Checklist, keyword_list
from medpref.notechat.sections import Segment
from medpref.prompts import PromptTemplate, format_dialogue
from medpref.turns.text import ParsedTurn, parse_turn

METHOD = "notechat"
#: A turn ends where the model starts the other speaker's line: generation stops there
#: (the parser would cut it anyway), instead of writing the other role's reply to the
#: token limit. Inline tags ("... today? Patient: ...") count, as the parser's do.
STOP = {"doctor": ("Patient:", "patient:", "PATIENT:"),
        "patient": ("Doctor:", "doctor:", "DOCTOR:")}
_START = "(The visit is just starting.)"


@dataclass
class RolePlay:
    """One segment's role-play: its checklist, the turns so far, what went wrong."""

    segment: Segment
    checklist: Checklist
    turns: list[Turn] = field(default_factory=list)
    coverage: list[float] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    rounds: int = 0
    #: texts said since the checklist was last updated
    fresh: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.coverage:
            self.coverage = [self.checklist.coverage]

    def active(self, min_rounds: int = 0) -> bool:
        return not self.checklist.done or self.rounds < min_rounds

    def history(self, last: int) -> str:
        turns = self.turns[-last:] if last else []
        return format_dialogue(turns) if turns else _START


def doctor_messages(template: PromptTemplate, play: RolePlay, keywords_per_turn: int,
                    history_turns: int) -> list[dict[str, str]]:
    return template.render(note=play.segment.text, history=play.history(history_turns),
                           keywords=keyword_list(play.checklist.next_keywords(keywords_per_turn)))


def patient_messages(template: PromptTemplate, play: RolePlay,
                     history_turns: int) -> list[dict[str, str]]:
    return template.render(note=play.segment.text, history=play.history(history_turns))


def _apply(play: RolePlay, parsed: ParsedTurn, raw: str, round_no: int, attempt: int) -> bool:
    """Append a parsed turn (or record its drop); True when a turn was added."""
    if parsed.issues:
        play.events.append({"segment": play.segment.key, "round": round_no, "attempt": attempt,
                            "role": parsed.role, "action": "dropped" if parsed.dropped
                            else "repaired", "issues": list(parsed.issues), "raw": raw})
    if parsed.dropped:
        return False
    play.fresh.append(parsed.text)
    if play.turns and play.turns[-1].role == parsed.role:  # the reply before was dropped
        last = play.turns[-1]
        play.turns[-1] = Turn(role=last.role, text=f"{last.text} {parsed.text}")
    else:
        play.turns.append(Turn(role=parsed.role, text=parsed.text))
    return True


def _speak(plays: list[RolePlay], role: str, client: LLMClient, messages: list,
           p: NoteChatParams, seed: int, round_no: int, log: CallLog) -> list[RolePlay]:
    """Batched calls for ``role`` in every play given, answers that had to be dropped
    retried (``turn_attempts``) with another seed; returns the plays that spoke."""
    spoke: set[int] = set()
    pending = list(range(len(plays)))
    for attempt in range(p.turn_attempts):
        if not pending:
            break
        comps = log.chat_many(client, METHOD, role, [messages[i] for i in pending],
                              p.turn_calls[role], stop=STOP[role], temperature=p.temperature,
                              seed=step_seed(seed, role, round_no, attempt))
        failed = []
        for i, comp in zip(pending, comps):
            play = plays[i]
            parsed = parse_turn(comp.text if comp.ok else "", role, p.max_turn_words,
                                previous=[t.text for t in play.turns],
                                max_copied=p.max_copied_share)
            if not comp.ok:
                parsed.issues.insert(0, f"model call failed: {comp.error}")
            log.record(METHOD, role, play.segment.key, comp, round=round_no, attempt=attempt + 1,
                       text=parsed.text, issues=parsed.issues)
            if _apply(play, parsed, comp.text, round_no, attempt + 1):
                spoke.add(i)
            else:
                failed.append(i)
        pending = failed
    return [play for i, play in enumerate(plays) if i in spoke]


def update_checklists(plays: list[RolePlay], extractor: ConceptExtractor) -> None:
    """Remove the concepts the round's new turns mention; record coverage."""
    found = iter(extractor.mentions_many([t for play in plays for t in play.fresh]))
    for play in plays:
        cuis = {m.cui for _ in play.fresh for m in next(found)}
        play.checklist.remove_covered(cuis)
        play.coverage.append(play.checklist.coverage)
        play.fresh = []


def run_roleplay(plays: list[RolePlay], doctor: LLMClient, patient: LLMClient,
                 templates: dict[str, PromptTemplate], p: NoteChatParams, seed: int,
                 extractor: ConceptExtractor, log: CallLog) -> None:
    """Play every segment in lock-step until its checklist is empty (and it has played
    ``min_rounds``) or ``max_rounds`` are over."""
    for round_no in range(1, p.max_rounds + 1):
        active = [play for play in plays if play.active(p.min_rounds)]
        if not active:
            break
        msgs = [doctor_messages(templates["doctor"], play, p.keywords_per_turn,
                                p.history_turns) for play in active]
        asked = _speak(active, "doctor", doctor, msgs, p, seed, round_no, log)
        msgs = [patient_messages(templates["patient"], play, p.history_turns)
                for play in asked]
        _speak(asked, "patient", patient, msgs, p, seed, round_no, log)
        for play in active:
            play.rounds = round_no
        update_checklists(active, extractor)
