"""The REM task format of PLPF §2.2.2: rule + history in, comment + score out.

Building the prompt (rule text, in-context examples as earlier chat turns, the history)
and reading the answer are kept apart: :func:`parse_judgement` is a pure function of the
raw completion, so answers stored in the cache can be re-parsed for free. An answer with
no readable score gives ``score=None`` (recorded as unparsable), never 0.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from medpref.contracts import Turn
from medpref.prompts import PromptTemplate, format_dialogue
from medpref.rules import Rule

RuleDetail = Literal["full", "short"]
AnswerOrder = Literal["comment_first", "score_first"]

#: The score options, in the order their probabilities are read (Σ k·p(k)).
SCORE_OPTIONS: tuple[str, ...] = ("0", "1", "2")
#: What precedes the score token; the tokenizer keeps the space apart from the digit.
SCORE_PREFIX = "Score: "
COMMENT_PREFIX = "Comment:"

_FORMATS: dict[str, str] = {
    "comment_first": "Comment: <one or two sentences on what the doctor did>\nScore: <0, 1 or 2>",
    "score_first": "Score: <0, 1 or 2>\nComment: <one or two sentences on what the doctor did>",
}


class Example(Protocol):
    """An annotated example (contract "REM annotation")."""

    rule: str
    history: list[Turn]
    score: int
    comment: str


def rule_text(rule: Rule, detail: RuleDetail = "full") -> str:
    """The rule as the judge reads it: always the statement; with ``full`` also the
    0/1/2 criteria and the hints (the fine-tuned REM learns those from data instead)."""
    lines = [f"Rule {rule.id} ({rule.name}): {rule.text.strip()}"]
    if detail == "full":
        lines.append("Scoring criteria:")
        lines += [f"- {s}: {rule.criteria[s].strip()}" for s in (2, 1, 0)]
        if rule.hints:
            lines.append("Notes:")
            lines += [f"- {h}" for h in rule.hints]
    return "\n".join(lines)


def format_answer(comment: str, score: int, order: AnswerOrder = "comment_first") -> str:
    """The assistant's answer in the REM format (training target, in-context example)."""
    comment = " ".join(comment.split())
    if order == "score_first":
        return f"{SCORE_PREFIX}{score}\n{COMMENT_PREFIX} {comment}"
    return f"{COMMENT_PREFIX} {comment}\n{SCORE_PREFIX}{score}"


def select_examples(examples: Sequence[Example], rule_id: str, n: int) -> list[Example]:
    """Up to ``n`` examples of one rule, covering every score before repeating one.

    Order is kept within a score; the result interleaves scores (2, 1, 0, 2, ...) so a
    small ``n`` still shows the model each level of compliance.
    """
    by_score: dict[int, list[Example]] = {2: [], 1: [], 0: []}
    for ex in examples:
        if ex.rule == rule_id:
            by_score[int(ex.score)].append(ex)
    chosen: list[Example] = []
    while len(chosen) < n and any(by_score.values()):
        for s in (2, 1, 0):
            if by_score[s] and len(chosen) < n:
                chosen.append(by_score[s].pop(0))
    return chosen


def build_messages(prompt: PromptTemplate, rule: Rule, history: Sequence[Turn],
                   examples: Sequence[Example] = (), detail: RuleDetail = "full",
                   order: AnswerOrder = "comment_first") -> list[dict[str, str]]:
    """Chat messages for one (rule, history): system rule, example turns, the question."""
    def ask(turns: Sequence[Turn]) -> list[dict[str, str]]:
        return prompt.render(rule=rule_text(rule, detail), answer_format=_FORMATS[order],
                             history=format_dialogue(turns))

    messages = ask(history)
    shots: list[dict[str, str]] = []
    for ex in examples:
        shots.append(ask(ex.history)[-1])
        shots.append({"role": "assistant", "content": format_answer(ex.comment, ex.score, order)})
    return messages[:-1] + shots + messages[-1:]


@dataclass(frozen=True)
class ParsedJudgement:
    """What could be read from a raw REM answer; ``score`` is None when unparsable."""

    comment: str
    score: int | None


_SCORE = re.compile(r"\bscore\b\s*(?:is|of|=|:)?\s*\**\s*(-?\d+(?:\.\d+)?)(\s*/\s*\d+)?",
                    re.IGNORECASE)
_COMMENT = re.compile(r"\bcomment\s*:\s*", re.IGNORECASE)


def parse_judgement(text: str) -> ParsedJudgement:
    """Read ``Comment: ... Score: N`` (either order) from a raw answer.

    The first labelled score counts (small models often go on to invent another
    example after answering); a score that is not a level 0/1/2 (``2.0`` is, ``1.5`` is
    not), a fraction other than out of 2, or no score at all is unparsable. A bare
    ``0``/``1``/``2`` answer is accepted.
    """
    text = text.strip()
    if text in SCORE_OPTIONS:
        return ParsedJudgement("", int(text))
    m = _SCORE.search(text)
    score: int | None = None
    if m:
        value, denom = m.group(1), m.group(2)
        ok_denom = denom is None or denom.replace(" ", "") == "/2"
        level = float(value)
        score = int(level) if level in (0.0, 1.0, 2.0) and ok_denom else None
    return ParsedJudgement(_comment_of(text, m), score)


def _comment_of(text: str, score_match: re.Match | None) -> str:
    labelled = _COMMENT.search(text)
    if labelled is None:
        body = text[:score_match.start()] if score_match else text
    else:
        body = text[labelled.end():]
        nxt = _SCORE.search(body)
        body = body[:nxt.start()] if nxt else body
    return " ".join(body.split())
