"""Dialogues → supervised fine-tuning examples for the policy (the doctor).

NoteChat's extrinsic use is a medical chat assistant fine-tuned on synthetic dialogues
with only the physician's utterances as training labels (paper §3.2). Each doctor turn
becomes one example: the turns before it are the context (patient = ``user``, doctor =
``assistant``) and the doctor turn is the final ``assistant`` message, the target.

A doctor turn with no patient turn before it (a dialogue's opening line) has nothing to
answer, so it is kept as context for later examples but is not a target of its own.
Consecutive turns of one role are joined, so roles alternate as chat templates expect.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from medpref.contracts import Dialogue, parse_record

CHAT_ROLE = {"patient": "user", "doctor": "assistant"}


def _as_dialogue(d: Dialogue | dict[str, Any], index: int) -> Dialogue:
    return d if isinstance(d, Dialogue) else parse_record(Dialogue, d, "<dialogues>", index)


def _chat_messages(dialogue: Dialogue) -> list[dict[str, str]]:
    """The dialogue as alternating chat messages (same-role turns joined)."""
    messages: list[dict[str, str]] = []
    for turn in dialogue.turns:
        text = turn.text.strip()
        if not text:
            continue
        role = CHAT_ROLE[turn.role]
        if messages and messages[-1]["role"] == role:
            messages[-1] = {"role": role, "content": f"{messages[-1]['content']} {text}"}
        else:
            messages.append({"role": role, "content": text})
    return messages


def turns_to_chat(turns: Iterable[Any]) -> list[dict[str, str]]:
    """Contract turns (patient/doctor) as alternating chat messages (user/assistant), e.g.
    the history of a preference pair as the prompt a DPO trainer sees."""
    return _chat_messages(Dialogue(id="-", turns=list(turns)))


def dialogues_to_sft_examples(dialogues: Iterable[Dialogue | dict[str, Any]],
                              system_prompt: str) -> list[dict[str, list[dict[str, str]]]]:
    """One ``{"messages": [system, ..., assistant target]}`` per answering doctor turn.

    ``dialogues`` are contract Dialogue records (or dicts of that shape; a dict that
    breaks the contract raises ContractError naming its position). The system prompt is
    left out when empty.
    """
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    examples = []
    for index, raw in enumerate(dialogues, start=1):
        messages = _chat_messages(_as_dialogue(raw, index))
        for i, message in enumerate(messages):
            if message["role"] == "assistant" and any(m["role"] == "user" for m in messages[:i]):
                examples.append({"messages": system + messages[:i + 1]})
    return examples


def split_target(example: dict[str, list[dict[str, str]]]) -> tuple[list[dict[str, str]], str]:
    """``(context messages, target doctor turn)`` of an example: the prompt/completion pair
    a trainer that masks the loss to the answer needs (trl's prompt-completion examples)."""
    messages = example["messages"]
    if not messages or messages[-1]["role"] != "assistant":
        raise ValueError("an SFT example ends with the assistant's target turn")
    return list(messages[:-1]), messages[-1]["content"]
