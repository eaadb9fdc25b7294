"""NoteChat's Polish module: rewrite the role-played dialogue by the ten expert rules.

The paper gives the LLM one more pass of self-correction after role-play, with a prompt
built from ten rules physicians wrote (§2.2.1, Appendix A.4; two iterations). Ours are
in ``configs/notechat/polish_rules.yaml``, in our own words. The dialogue is rewritten
in windows of ``polish_window_turns`` turns (0 = whole dialogue), so that each call is
short enough for a small model; odd iterations shift the windows by half a window so
the seams move. A rewritten window replaces the original only if it keeps the same
first and last speaker (so the dialogue still alternates), at least
``polish_min_turn_ratio`` of the turns, and every concept the window mentioned (rule 9);
otherwise the original is kept. Every decision is recorded.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from medpref.contracts import Turn
from medpref.llm.client import LLMClient
from medpref.notechat.calls import CallLog, step_seed
from medpref.notechat.concepts import ConceptExtractor
from medpref.notechat.config import NoteChatParams
from medpref.notechat.planning import keyword_list, note_keywords
from medpref.prompts import PromptTemplate, format_dialogue
from medpref.turns.text import parse_dialogue

METHOD = "notechat"


@dataclass(frozen=True)
class Rubric:
    rules: tuple[dict, ...]
    sha: str

    def render(self) -> str:
        return "\n".join(f"{r['id']}. {r['text']}" for r in self.rules)


def load_rubric(path: str | Path) -> Rubric:
    """The polish rules: a list of ``{id, name, text}``; ids unique."""
    raw = Path(path).read_text(encoding="utf-8")
    data = yaml.safe_load(raw) or {}
    rules = data.get("rules")
    if not isinstance(rules, list) or not rules:
        raise ValueError(f"{path}: expected a non-empty `rules` list")
    for i, rule in enumerate(rules):
        missing = {"id", "name", "text"} - set(rule or {})
        if missing:
            raise ValueError(f"{path}: rules[{i}] lacks {sorted(missing)}")
    ids = [r["id"] for r in rules]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: rule ids repeat: {ids}")
    return Rubric(tuple(rules), hashlib.sha256(raw.encode()).hexdigest()[:12])


def windows(n_turns: int, size: int, offset: int = 0) -> list[tuple[int, int]]:
    """``[start, end)`` spans covering ``n_turns``; the first is ``offset`` long if set."""
    if size <= 0 or n_turns <= size and offset == 0:
        return [(0, n_turns)] if n_turns else []
    cuts = sorted({0, n_turns, *range(offset or size, n_turns, size)})
    return list(zip(cuts, cuts[1:]))


def polish_messages(template: PromptTemplate, note: str, rubric: Rubric,
                    keywords: str, turns: list[Turn]) -> list[dict[str, str]]:
    return template.render(note=note, rules=rubric.render(), keywords=keywords,
                           dialogue=format_dialogue(turns))


def judge_window(original: list[Turn], rewritten: list[Turn], required: set[str],
                 found: set[str], min_ratio: float) -> str | None:
    """Why a rewritten window is rejected, or None to accept it (pure)."""
    if not rewritten:
        return "no usable turn"
    if rewritten[0].role != original[0].role or rewritten[-1].role != original[-1].role:
        return "speakers at the window's ends changed"
    if len(rewritten) < math.ceil(min_ratio * len(original)):
        return f"{len(rewritten)} turns for {len(original)}"
    lost = required - found
    if lost:
        return f"lost {len(lost)} concept(s) of the window"
    return None


@dataclass
class _Window:
    item: int
    span: tuple[int, int]
    required: set[str]
    messages: list[dict[str, str]]


def _plan_windows(dialogues: list[list[Turn]], notes: list[str], template: PromptTemplate,
                  rubric: Rubric, size: int, offset: int,
                  extractor: ConceptExtractor) -> list[_Window]:
    plan = []
    for i, (turns, note) in enumerate(zip(dialogues, notes)):
        for start, end in windows(len(turns), size, offset):
            part = turns[start:end]
            if len(part) < 2:
                continue
            mentions = [m for ms in extractor.mentions_many([t.text for t in part]) for m in ms]
            kws = note_keywords(mentions)
            plan.append(_Window(i, (start, end), {k.cui for k in kws},
                                polish_messages(template, note, rubric, keyword_list(kws), part)))
    return plan


def polish_dialogues(dialogues: list[list[Turn]], notes: list[str], keys: list[str],
                     client: LLMClient, template: PromptTemplate, rubric: Rubric,
                     p: NoteChatParams,
                     seed: int, extractor: ConceptExtractor,
                     log: CallLog) -> tuple[list[list[Turn]], list[dict[str, Any]]]:
    """``polish_iterations`` passes over every dialogue; one batched call per pass."""
    current = [list(d) for d in dialogues]
    events: list[dict[str, Any]] = []
    size = p.polish_window_turns
    for it in range(p.polish_iterations):
        offset = (size // 2) if (it % 2 and size >= 4) else 0
        plan = _plan_windows(current, notes, template, rubric, size, offset, extractor)
        speakers = ["doctor" if current[w.item][w.span[0]].role == "doctor" else "patient"
                    for w in plan]
        comps = []
        for speaker, call in p.polish_calls.items():  # a batch shares its answer prefix
            idx = [k for k, s in enumerate(speakers) if s == speaker]
            got = log.chat_many(client, METHOD, "polish", [plan[k].messages for k in idx],
                                call, temperature=p.temperature,
                                seed=step_seed(seed, "polish", it))
            comps += list(zip(idx, got))
        replaced: dict[int, dict[tuple[int, int], list[Turn]]] = {}
        for k, comp in sorted(comps):
            w = plan[k]
            original = current[w.item][w.span[0]:w.span[1]]
            parsed = parse_dialogue(comp.text if comp.ok else "", original[0].role,
                                    p.max_turn_words, truncated=comp.finish_reason == "length",
                                    max_copied=p.max_copied_share)
            found = {m.cui for ms in extractor.mentions_many([t.text for t in parsed.turns])
                     for m in ms}
            reason = judge_window(original, parsed.turns, w.required, found,
                                  p.polish_min_turn_ratio)
            if reason is None:
                replaced.setdefault(w.item, {})[w.span] = parsed.turns
            events.append({"segment": keys[w.item], "iteration": it + 1, "window": list(w.span),
                           "action": "accepted" if reason is None else "kept original",
                           "issues": ([reason] if reason else []) + parsed.issues,
                           "raw": comp.text})
            log.record(METHOD, "polish", keys[w.item], comp, iteration=it + 1,
                       window=list(w.span), accepted=reason is None, issues=parsed.issues)
        current = [_splice(turns, replaced.get(i, {})) for i, turns in enumerate(current)]
    return current, events


def _splice(turns: list[Turn], replaced: dict[tuple[int, int], list[Turn]]) -> list[Turn]:
    out: list[Turn] = []
    pos = 0
    for (start, end), new in sorted(replaced.items()):
        out += turns[pos:start] + new
        pos = end
    return out + turns[pos:]
