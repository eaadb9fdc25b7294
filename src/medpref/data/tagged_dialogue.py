"""Speaker-tagged transcripts (``Doctor: ...`` lines, ``[doctor] ...`` tags) into turns."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from functools import lru_cache
from pathlib import Path

from medpref.contracts import ContractError, Role, Turn

# Normalised speaker label -> role. Labels are lower-cased, spaces become "_" and a
# trailing number is dropped first ("Guest_family_2" -> "guest_family", "Doctor_2" ->
# "doctor"). Everyone but the doctor(s) is on the patient's side: family, companions
# and, in MTS-Dialog's clinician-to-clinician consultations (59 rows with no patient),
# the guest clinician who reports on the patient. ``meta.speakers`` keeps the labels.
DEFAULT_SPEAKERS: dict[str, Role] = {
    "doctor": "doctor",
    "docotr": "doctor",            # typo in MTS-Dialog train ("Docotr_2")
    "patient": "patient",
    "guest_clinician": "patient",
    "guest_clinican": "patient",   # typo in MTS-Dialog train
    "patient_guest": "patient",    # ACI-Bench
    "guest_family": "patient",
    "gest_family": "patient",      # typo in MTS-Dialog train
    "patient's_wife": "patient",
}


def _normalise_label(label: str) -> str:
    label = re.sub(r"\s+", "_", label.strip().lower())
    return re.sub(r"_?\d+$", "", label)


@lru_cache(maxsize=16)
def _tag_pattern(labels: tuple[str, ...]) -> re.Pattern[str]:
    """Regex for speaker tags: ``[label]`` anywhere, ``Label:`` at a line start (also
    ``Label.``, seen once in MTS-Dialog), or ``Label:`` capitalised after a sentence's
    punctuation, where MTS-Dialog sometimes runs two turns into one line."""
    longest_first = sorted(labels, key=len, reverse=True)
    alts = "|".join(re.escape(k).replace("_", "[_ ]") for k in longest_first)
    label = rf"(?i:{alts})(?:[_ ]?\d+)?"
    return re.compile(
        rf"\[[ \t]*(?P<bracket>{label})[ \t]*\]"
        rf"|^[ \t\"']*(?P<line>{label})[ \t]*(?::|\.(?=\s))"
        rf"|(?<=[.?!,;])[ \t]+(?=[A-Z])(?P<inline>{label}):",
        re.MULTILINE,
    )


def _clean_text(text: str) -> str:
    return re.sub(r"\s*[\r\n]+\s*", " ", text).strip()


def _merge_turns(segments: Iterable[tuple[Role, str]]) -> list[Turn]:
    turns: list[Turn] = []
    for role, text in segments:
        if not text:
            continue
        if turns and turns[-1].role == role:
            turns[-1] = Turn(role=role, text=f"{turns[-1].text} {text}")
        else:
            turns.append(Turn(role=role, text=text))
    return turns


def _tagged_segments(text: str, speaker_map: Mapping[str, Role]) -> Iterator[tuple[str, str]]:
    """``(normalised speaker label, cleaned text)`` for each tag found in ``text``."""
    matches = list(_tag_pattern(tuple(speaker_map)).finditer(text))
    ends = [m.start() for m in matches[1:]] + [len(text)]
    for match, end in zip(matches, ends):
        label = match.group("bracket") or match.group("line") or match.group("inline")
        yield _normalise_label(label), _clean_text(text[match.end():end])


def parse_tagged_dialogue(text: str, speaker_map: Mapping[str, Role] = DEFAULT_SPEAKERS
                          ) -> list[Turn]:
    """Split a speaker-tagged transcript into turns.

    Handles ``Doctor: ...`` lines (MTS-Dialog) and ``[doctor] ...`` tags (ACI-Bench);
    ``speaker_map`` maps normalised labels to roles (see :data:`DEFAULT_SPEAKERS`), and a
    label missing from it is not a tag. Text before the first tag is dropped, line breaks
    inside a turn become spaces, empty turns are dropped and consecutive turns of the
    same role are merged, so the result alternates roles. Returns ``[]`` when no tag is
    found; callers decide whether that is an error.
    """
    return _merge_turns((speaker_map[label], body)
                        for label, body in _tagged_segments(text, speaker_map))


def speaker_labels(text: str, speaker_map: Mapping[str, Role] = DEFAULT_SPEAKERS) -> list[str]:
    """The distinct normalised speaker labels of a transcript, in order of appearance."""
    return list(dict.fromkeys(label for label, _ in _tagged_segments(text, speaker_map)))


def turns_of_field(row: Mapping[str, str], field: str, path: Path, line: int) -> list[Turn]:
    turns = parse_tagged_dialogue(row[field])
    if not turns:
        raise ContractError(path, line, field, "no speaker-tagged turns "
                            "(expected 'Doctor:'/'Patient:' or '[doctor]'/'[patient]')")
    return turns
