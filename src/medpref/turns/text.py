"""Parsing model output into dialogue turns (pure functions, golden-tested).

Role-play asks the doctor agent for one doctor turn and the patient agent for one
patient turn; polishing and the single-prompt baselines return whole dialogues. Model
output is often malformed, the more so from small models: empty, tagged as the other
speaker, both roles run together in one answer, loops, prompt scaffolding echoed back,
a patient quoting lab values. :func:`parse_turn` repairs what can be repaired and drops
the rest; either way it says what it did (``issues``), and the caller records that next
to the raw text. Nothing here raises on bad model output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from medpref.contracts import Role, Turn
from medpref.sentences import sentence_pieces

#: A speaker tag ("Doctor:", "**Patient:**", "Dr. Smith:", "The patient responds:"): at a
#: line start, or inline after the end of a sentence.
_TAG = re.compile(
    r"(?:^|(?<=[.!?:;\"'])\s+|\n)\s*[-*>#]*\s*(?:\*\*|__)?\s*(?:the\s+)?"
    r"(?P<label>doctor|physician|dr\.?(?:\s+[a-z]+)?|patient)"
    r"(?:\s+(?:says|responds|replies|asks|answers))?\s*(?:\*\*|__)?\s*[:：]\s*(?:\*\*|__)?",
    re.IGNORECASE)
#: Where an answer runs on into prompt scaffolding or commentary.
_SCAFFOLD = re.compile(
    r"^\s*(?:note|explanation|clinical note|key ?words|topics|rules?|history|conversation"
    r"|the history conversation|remember)\s*:|\n\s*#{1,6}\s|\n\s*(?:---|\*\*\*)\s*$",
    re.IGNORECASE | re.MULTILINE)
#: A sentence with a measured value (what the patient agent must not report).
_MEASURED = re.compile(
    r"\d+(?:\.\d+)?\s*(?:/\s*\d+\s*)?(?:mg/dl|mmol/l|mmhg|mg|mcg|g/dl|bpm|%|units?\b"
    r"|beats per minute|milligrams)", re.IGNORECASE)
_LETTERS = re.compile(r"[A-Za-z]")
#: Shorter repeats ("Yes, I do.") are natural; longer ones are a small model looping.
REPEAT_MIN_WORDS = 5


@dataclass
class ParsedTurn:
    """One parsed turn: ``text`` is None when the answer was dropped."""

    role: Role
    text: str | None
    issues: list[str] = field(default_factory=list)

    @property
    def dropped(self) -> bool:
        return self.text is None


def role_of_label(label: str) -> Role:
    return "patient" if label.lower().startswith("patient") else "doctor"


def normalise(text: str) -> str:
    return re.sub(r"\W+", " ", text.lower()).strip()


def sentences(text: str) -> list[str]:
    """The text's sentences (split after ``.``, ``!`` or ``?``), empty ones left out."""
    return [s for s in sentence_pieces(text) if s.strip()]


def speaker_segments(text: str, default: Role | None = None) -> list[tuple[Role | None, str]]:
    """Split text at speaker tags: ``[(role, text), ...]``.

    Text before the first tag gets ``default`` (the role the answer was prefixed with).
    """
    segments: list[tuple[Role | None, str]] = []
    pos, role = 0, default
    for m in _TAG.finditer(text):
        segments.append((role, text[pos:m.start()]))
        role, pos = role_of_label(m.group("label")), m.end()
    segments.append((role, text[pos:]))
    return [(r, s.strip()) for r, s in segments if s.strip()]


def _cut_scaffold(text: str, issues: list[str]) -> str:
    m = _SCAFFOLD.search(text)
    if m and m.start() > 0:
        issues.append("cut echoed prompt scaffolding")
        return text[:m.start()]
    if m:
        issues.append("answer is prompt scaffolding")
        return ""
    return text


def _clean(text: str) -> str:
    text = re.sub(r"[*_`#]+", "", text)
    text = re.sub(r"\s+", " ", text).strip()
    return text.strip(" \"'“”")


def _dedupe_sentences(text: str, issues: list[str]) -> str:
    seen, kept = set(), []
    for sentence in sentence_pieces(text):
        key = normalise(sentence)
        if key and key in seen:
            continue
        seen.add(key)
        kept.append(sentence)
    if len(kept) < len(sentence_pieces(text)):
        issues.append("removed repeated sentences")
    return " ".join(kept)


def _drop_measured(text: str, issues: list[str]) -> str:
    sentences = sentence_pieces(text)
    kept = [s for s in sentences if not _MEASURED.search(s)]
    if len(kept) < len(sentences):
        issues.append("removed a test result the patient reported")
    return " ".join(kept)


def _limit_words(text: str, max_words: int, issues: list[str]) -> str:
    words = text.split()
    if len(words) <= max_words:
        return text
    issues.append(f"cut to {max_words} words")
    cut = " ".join(words[:max_words])
    end = max(cut.rfind(". "), cut.rfind("? "), cut.rfind("! "))
    return cut[:end + 1] if end > len(cut) // 3 else cut


def _own_segment(segments: list[tuple[Role | None, str]], role: Role,
                 issues: list[str]) -> str | None:
    """The answer's text for ``role``: its first run of own segments, the rest cut away."""
    own = [i for i, (r, _) in enumerate(segments) if r == role]
    if not own:
        issues.append("wrong speaker: only the other role's line")
        return None
    first = own[0]
    if first > 0:
        issues.append("skipped the other role's line before its own")
    end = first
    while end + 1 < len(segments) and segments[end + 1][0] == role:
        end += 1
    if len(segments) > end + 1:
        issues.append("cut the other role's turn written after its own")
    return " ".join(text for _, text in segments[first:end + 1])


def _bigrams(text: str) -> set[tuple[str, str]]:
    words = normalise(text).split()
    return set(zip(words, words[1:]))


def copied_share(text: str, previous: list[str]) -> float:
    """The largest share of the text's word bigrams found in one earlier turn (0-1).

    Small models echo the conversation back (the patient repeats the doctor's turn, the
    doctor its own); an exact repeat scores 1.0.
    """
    mine = _bigrams(text)
    if not mine:
        return 0.0
    return max((len(mine & _bigrams(p)) / len(mine) for p in previous), default=0.0)


def parse_turn(raw: str | None, role: Role, max_words: int = 60,
               previous: list[str] | None = None, max_copied: float = 1.0) -> ParsedTurn:
    """One turn of ``role`` from a model answer that was started with ``"<Role>:"``.

    Repairs: a repeated own tag, the other role's line before or after its own,
    scaffolding echoed from the prompt, repeated sentences, over-long turns, a patient
    quoting measured values (those sentences go). Drops: empty answers, answers that
    are only the other role's line, nothing left after cleaning, and turns of at least
    :data:`REPEAT_MIN_WORDS` words that copy an earlier turn (``previous``): a share of
    their word bigrams of at least ``max_copied`` found in one earlier turn (1.0: only
    exact repeats).
    """
    issues: list[str] = []
    if raw is None or not raw.strip():
        return ParsedTurn(role, None, ["empty answer"])
    text = _cut_scaffold(raw, issues)
    text = _own_segment(speaker_segments(text, default=role), role, issues) if text else None
    if text is None:
        return ParsedTurn(role, None, issues or ["empty answer"])
    text = _dedupe_sentences(_clean(text), issues)
    if role == "patient":
        text = _drop_measured(text, issues)
    text = _limit_words(text, max_words, issues)
    if not _LETTERS.search(text):
        return ParsedTurn(role, None, issues + ["no words after cleaning"])
    if previous and len(text.split()) >= REPEAT_MIN_WORDS:
        share = copied_share(text, previous)
        if share >= max_copied:
            return ParsedTurn(role, None, issues + [f"repeats an earlier turn ({share:.0%} "
                                                    "of its word pairs)"])
    return ParsedTurn(role, text, issues)


def merge_same_role(turns: list[Turn]) -> list[Turn]:
    """Consecutive turns of one role become one turn (dialogues alternate)."""
    merged: list[Turn] = []
    for t in turns:
        if merged and merged[-1].role == t.role:
            merged[-1] = Turn(role=t.role, text=f"{merged[-1].text} {t.text}")
        else:
            merged.append(Turn(role=t.role, text=t.text))
    return merged


@dataclass
class ParsedDialogue:
    turns: list[Turn]
    issues: list[str] = field(default_factory=list)


def parse_dialogue(raw: str | None, first_role: Role = "doctor", max_words: int = 120,
                   truncated: bool = False, max_copied: float = 1.0) -> ParsedDialogue:
    """Whole-dialogue output (polish, single prompt) as alternating turns.

    Untagged text before the first tag belongs to ``first_role`` (the answer prefix);
    each segment is cleaned like a turn and dropped if too short; a last turn cut by the
    token limit (``truncated``) is dropped.
    """
    if raw is None or not raw.strip():
        return ParsedDialogue([], ["empty answer"])
    issues: list[str] = []
    text = _cut_scaffold(raw, issues)
    segments = [(r, s) for r, s in speaker_segments(text, default=first_role) if r]
    if truncated and len(segments) > 1:
        segments = segments[:-1]
        issues.append("dropped the last turn, cut by the token limit")
    turns: list[Turn] = []
    seen: list[str] = []
    for role, body in segments:
        parsed = parse_turn(body, role, max_words, previous=seen, max_copied=max_copied)
        if parsed.dropped:
            issues.append(f"dropped a {role} segment: {parsed.issues[-1]}")
            continue
        issues.extend(i for i in parsed.issues if i not in issues)
        seen.append(parsed.text)
        turns.append(Turn(role=role, text=parsed.text))
    merged = merge_same_role(turns)
    if len(merged) < len(turns):
        issues.append("merged consecutive turns of one role")
    if not merged:
        issues.append("no usable turn")
    return ParsedDialogue(merged, issues)
