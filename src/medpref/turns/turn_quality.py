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
- ``repeat``: a sentence of at least :data:`~medpref.turns.text.REPEAT_MIN_WORDS`
  words said twice in the turn, or one of at least :data:`COPIED_MIN_WORDS` words copied
  from an earlier turn of the dialogue (at least :data:`COPIED_MIN_SHARE` of its word
  pairs in one earlier turn, by ``copied_share``).

- ``empty``: a doctor turn that is only an acknowledgement ("Yes.", "Alright, no
  problem."), any turn that is only a name or title ("Dr. Alex, the doctor.") or is cut
  off after a greeting ("Good morning,"), a patient's small talk about the doctor's day:
  it neither asks, explains nor answers anything about the visit.

``role`` also flags a speaker who talks as someone else than the two people in the
room: a doctor who speaks of "the patient" in the third person to the patient ("tell me
about the patient's situation"), greets or addresses another doctor ("Hello Dr. Smith."),
or narrates itself ("the doctor says"); a patient who speaks of "the patient", plays the
host ("I'm glad to have you here") or narrates itself. ``leak`` also flags a stage
direction in brackets ("(The patient nods").

A turn passes when it has none of the four.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import pandas as pd

from medpref.turns.text import REPEAT_MIN_WORDS, copied_share, normalise, sentences

CHECKS = ("role", "leak", "repeat", "empty")
#: The NoteChat prompt files whose headings and instructions a turn must not contain.
NOTECHAT_PROMPTS = ("notechat_doctor", "notechat_patient", "notechat_planning",
                    "notechat_polish", "notechat_single_prompt")
#: A sentence with this share of its word pairs in one earlier turn is a copy of it.
COPIED_MIN_SHARE = 0.8
#: Copies from an earlier turn count from this many words (short stock phrases recur).
COPIED_MIN_WORDS = 8
#: Instruction sentences of the prompts are matched on their first words.
INSTRUCTION_WORDS = 6
#: A turn with this share of its word pairs in one earlier turn copies it (stage 02's own
#: echo threshold, ``notechat.max_copied_share``), counted from as many words as a copied
#: sentence.
TURN_COPIED_MIN_SHARE = 0.6
TURN_COPIED_MIN_WORDS = COPIED_MIN_WORDS   # short stock phrases recur
#: A phrase of 2 to 4 words said this many times in a row is a loop ("cardiovascular
#: disease cardiovascular disease cardiovascular disease").
LOOP_MIN_TIMES = 3
#: A run of this many words with no punctuation mark is not speech (a keyword list, word
#: salad); the longest such run of a human reference turn of the embedded notes is 25.
RUN_MAX_WORDS = 40
#: A span of this many words copied verbatim from the source note is the note read aloud;
#: a human doctor explaining the plan repeats up to 9 of the note's words ("aspirin 81 mg
#: daily and ticagrelor 90 mg twice"), so the span is longer than the rubric's "about 8".
NOTE_SPAN_WORDS = 12

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
_LABEL = re.compile(r"(?:^|(?<=[.!?\"'])\s+)(?:\*\*)?(?:the\s+)?(doctor|physician|patient"
                    r"|dr\.?\s+[a-z]+|[a-e]|you)(?:\*\*)?\s*:\s", re.IGNORECASE)
#: A writing instruction spoken as a turn: "Please tell the patient about symptoms", "do
#: not provide a detailed diagnosis" (nobody in the room says either to the other).
_INSTRUCTION = re.compile(r"\b(?:tell|ask)\s+the\s+patient\b|\b(?:do\s+not|don't)\s+(?:provide"
                          r"|write)\b", re.IGNORECASE)
#: A clinical note's section heading spoken as a turn ("Subjective: ...").
_NOTE_HEADING = re.compile(r"(?:^|(?<=[.!?])\s+)(?:subjective|objective|assessment|plan|hpi"
                           r"|chief\s+complaint|history\s+of\s+present\s+illness|premise\s*\d*)"
                           r"\s*:", re.IGNORECASE)
#: A checklist keyword as the doctor agent's prompt shows it (planning.Keyword.display).
_ANNOTATION = re.compile(r"\w\s*\((?:absent|present|negated)\)", re.IGNORECASE)
#: A heading line of a prompt ("Conversation so far:"; its slot already removed).
_HEADING = re.compile(r"\s*([A-Za-z][^:\n]{2,60}):\s*$")
_APOSTROPHES = str.maketrans({"’": "'", "‘": "'"})
#: "the patient" spoken of in the third person (by a doctor: followed by what the patient
#: is, has or does; "the patient portal" is no person). A patient never says it of itself.
_THE_PATIENT_THIRD = re.compile(
    r"\bthe\s+patient(?:'s|s'|\s+(?:who|is|was|has|had|feels|felt|seems|says|said|will"
    r"|would|should|needs|wants|in|with|here|there)\b)", re.IGNORECASE)
_THE_PATIENT = re.compile(r"\bthe\s+patient\b(?!\s+portal)", re.IGNORECASE)
#: A doctor greeting or addressing another doctor: "Hello Dr. Smith.", "Dr. Johnson, ..."
#: at a sentence start ("Hello, I'm Dr. Smith" introduces the speaker and passes).
_ADDRESSES_DOCTOR = re.compile(
    r"(?:^|(?<=[.!?])\s+)(?:(?:hello|hi|dear|good\s+(?:morning|afternoon|evening)|thanks"
    r"|thank\s+you)[,!]?\s+dr\b\.?\s+[a-z]+\s*[,.!]|dr\b\.?\s+[a-z]+\s*,)", re.IGNORECASE)
#: A speaker narrating itself in the third person ("the doctor says", "the patient asks").
_NARRATES = {role: re.compile(rf"\bthe\s+{role}\s+(?:says|asks|replies|answers|nods|smiles"
                              r"|pauses|continues|explains)\b", re.IGNORECASE)
             for role in ("doctor", "patient")}
#: A patient playing the host of the visit.
_HOSTS = re.compile(r"\b(?:glad|happy|pleased|nice)\s+to\s+have\s+you\b|\bhow\s+can\s+i\s+help"
                    r"\s+you\b|\bwhat\s+brings\s+you\b|\bthank(?:s|\s+you)\s+for\s+coming\b",
                    re.IGNORECASE)
#: A doctor who speaks as if not the doctor: tells the patient "you are a doctor", asks
#: "your medical specialty", goes to "find a doctor", or is anxious or confused himself.
_DOCTOR_NOT_DOCTOR = re.compile(
    r"\byou(?:'re|\s+are)\s+(?:a|the)\s+(?:doctor|physician)\b|\byour\s+(?:medical\s+)?specialty\b"
    r"|\b(?:find|take\s+\w+\s+to|go\s+to|gone\s+to)\s+(?:a|the)\s+doctor\b"
    r"|\bi(?:'m|\s+am)\s+(?:(?:a\s+)?little\s+(?:bit\s+)?|so\s+|very\s+|really\s+)?"
    r"(?:anxious|confused|nervous|scared)\b", re.IGNORECASE)
#: A patient who speaks as the clinician: "your child's ear", or asks the doctor about
#: their symptoms ("did you feel any pain").
_PATIENT_AS_CLINICIAN = re.compile(
    r"\byour\s+(?:child|son|daughter|baby|kid)\b|\b(?:did|do|have|are)\s+you\s+(?:feel|felt|had"
    r"|have|experienced?|noticed?)\s+any\s+(?:pain|symptoms?|fever|nausea)\b"
    r"(?!\s*(?:medicine|killers?|relief|pills?|tablets?))", re.IGNORECASE)
#: A self-introduction's name ("I'm Dr. John Smith" -> {"john", "smith"}).
_INTRO_NAME = re.compile(r"\b(?i:i'm|i\s+am|my\s+name\s+is)\s+(?i:dr\b\.?\s+)?"
                         r"([A-Z][a-z]+(?:\s+[A-Z][a-z]+)?)")
#: A stage direction in brackets: "(The patient nods", "(pauses)", "(Dr. Smith smiles".
_STAGE_DIRECTION = re.compile(r"\(\s*(?:the\s+)?(?:patient|doctor|physician|dr\b|he\b|she\b"
                              r"|pauses?|smiles?|nods?|laughs?|sighs?)", re.IGNORECASE)
#: A turn cut off after a greeting or a title ("Good morning,", "Hey, Alex,", "I'm Dr.").
_CUT_OFF = re.compile(r",\s*$|^\W*(?:i'm|i\s+am)\s+dr\b\.?\W*$", re.IGNORECASE)
#: A patient's small talk about the doctor's day: "How are your day going, Doctor?"
_SMALL_TALK = re.compile(r"\bhow(?:'s|\s+is|\s+are|\s+was)?\s+your\s+day\b"
                         r"|\bwhat\s+your\s+experience\s+is\s+like\b", re.IGNORECASE)
#: Words that only acknowledge: a doctor turn of these alone says nothing.
_ACK_WORDS = frozenset("""yes yeah yep ok okay alright all right sure no problem fine good
great thanks thank you i see understood of course mm hmm uh huh well then got it""".split())
ACK_MAX_WORDS = 5
#: A turn that is only a name or title: "Dr. Alex, the doctor."
_ONLY_NAME = re.compile(r"^\W*(?:(?:dr\b\.?\s+[a-z]+|(?:the\s+)?doctor|(?:the\s+)?patient)\W*)+$",
                        re.IGNORECASE)


@dataclass(frozen=True)
class TurnFlags:
    role: bool = False
    leak: bool = False
    repeat: bool = False
    empty: bool = False

    @property
    def passes(self) -> bool:
        return not (self.role or self.leak or self.repeat or self.empty)


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


def speaks_out_of_role(text: str, role: str) -> bool:
    """The speaker is not one of the two people in the room talking to the other: it
    claims the other role, narrates itself ("the doctor says"), and as a doctor speaks of
    "the patient" in the third person or addresses another doctor, as a patient speaks of
    "the patient" or plays the host."""
    text = text.translate(_APOSTROPHES)
    if claims_other_role(text, role) or _NARRATES[role].search(text) or two_names(text):
        return True
    if speaks_both_parts(text, role):
        return True
    if role == "doctor":
        return bool(_THE_PATIENT_THIRD.search(text) or _ADDRESSES_DOCTOR.search(text)
                    or _DOCTOR_NOT_DOCTOR.search(text))
    return bool(_THE_PATIENT.search(text) or _HOSTS.search(text)
                or _PATIENT_AS_CLINICIAN.search(text))


def speaks_both_parts(text: str, role: str) -> bool:
    """The turn writes both parts of a dialogue: speaker labels of two speakers ("A: ...
    B: ...", "E: ... A: ...") or a label of the other role ("Dr. Alex: ..." in a patient's
    turn, "Patient: ..." in a doctor's)."""
    labels = {re.sub(r"\W+", " ", m.lower()).strip() for m in _LABEL.findall(text)}
    if len(labels) >= 2:
        return True
    other = {"patient"} if role == "doctor" else {"doctor", "physician"}
    return any(lab in other or (role == "patient" and lab.startswith("dr ")) for lab in labels)


def two_names(text: str) -> bool:
    """The speaker introduces itself by two names that share no word ("I'm Dr. Smith. ...
    I'm Dr. Johnson")."""
    names = [frozenset(m.lower().split()) for m in _INTRO_NAME.findall(text)]
    return any(not a & b for i, a in enumerate(names) for b in names[i + 1:])


def says_nothing(text: str, role: str) -> bool:
    """A doctor turn that only acknowledges ("Yes.", "Alright, no problem."), or any turn
    that is only a name or title ("Dr. Alex, the doctor."), is cut off after a greeting
    ("Good morning,", "I'm Dr."), or is a patient's small talk about the doctor's day ("How
    are your day going, Doctor?"; a doctor's "How's your day?" may open a visit)."""
    text = text.translate(_APOSTROPHES)
    if _ONLY_NAME.match(text.strip()) or _CUT_OFF.search(text) or runs_on(text):
        return True
    if role == "patient" and _SMALL_TALK.search(text):   # a doctor may open with it
        return True
    words = normalise(text).split()
    return role == "doctor" and 0 < len(words) <= ACK_MAX_WORDS and set(words) <= _ACK_WORDS


def runs_on(text: str) -> bool:
    """A run of at least :data:`RUN_MAX_WORDS` words with no punctuation mark (``, ; : .
    ! ?``): a keyword list or word salad, not speech."""
    return any(len(normalise(run).split()) >= RUN_MAX_WORDS
               for run in re.split(r"[,;:.!?]", text))


def reads_note(text: str, note: str | None) -> bool:
    """The turn copies a span of :data:`NOTE_SPAN_WORDS` words verbatim from the source
    note (the note read aloud)."""
    if not note:
        return False
    words = normalise(text).split()
    if len(words) < NOTE_SPAN_WORDS:
        return False
    source = f" {normalise(note)} "
    return any(f" {' '.join(words[i:i + NOTE_SPAN_WORDS])} " in source
               for i in range(len(words) - NOTE_SPAN_WORDS + 1))


def leaks_prompt(text: str, markers: tuple[Sequence[str], Sequence[str]] | None = None) -> bool:
    """Prompt headings or instructions, a writing instruction, a speaker label, a note
    heading, a checklist annotation or a stage direction."""
    headings, instructions = markers if markers is not None else prompt_markers()
    lowered = text.translate(_APOSTROPHES).lower()
    if any(h in lowered for h in headings):
        return True
    words = f" {normalise(text)} "
    if any(f" {i} " in words for i in instructions):
        return True
    return bool(_LABEL.search(text) or _NOTE_HEADING.search(text) or _ANNOTATION.search(text)
                or _STAGE_DIRECTION.search(text) or _INSTRUCTION.search(text))


def _long(sentence: str) -> str | None:
    key = normalise(sentence)
    return key if len(key.split()) >= REPEAT_MIN_WORDS else None


def _clauses(text: str) -> list[str]:
    return [k for k in (_long(c) for c in re.split(r"[,;:.!?]", text)) if k]


def loops(text: str) -> bool:
    """A phrase of two to four words said :data:`LOOP_MIN_TIMES` times in a row."""
    return bool(re.search(rf"\b(\w+(?: \w+){{1,3}})(?: \1\b){{{LOOP_MIN_TIMES - 1},}}",
                          normalise(text)))


def repeats_sentence(text: str, previous: Sequence[str] = ()) -> bool:
    """A long enough sentence or clause twice in the turn (or a sentence whose word pairs
    another one of the turn holds), a loop of a short phrase, a sentence copied from one
    earlier turn, or the whole turn copied from one (:data:`TURN_COPIED_MIN_SHARE`)."""
    keys = [k for k in (_long(s) for s in sentences(text)) if k]
    clauses = _clauses(text)
    if len(keys) != len(set(keys)) or len(clauses) != len(set(clauses)) or loops(text):
        return True
    if any(copied_share(a, [b]) >= COPIED_MIN_SHARE for i, a in enumerate(keys)
           for b in keys[i + 1:] + keys[:i]):
        return True
    if len(normalise(text).split()) >= TURN_COPIED_MIN_WORDS and \
            copied_share(normalise(text), list(previous)) >= TURN_COPIED_MIN_SHARE:
        return True
    return any(copied_share(k, list(previous)) >= COPIED_MIN_SHARE for k in keys
               if len(k.split()) >= COPIED_MIN_WORDS)


def check_turn(text: str, role: str, previous: Sequence[str] = (),
               markers: tuple[Sequence[str], Sequence[str]] | None = None,
               note: str | None = None) -> TurnFlags:
    """The four checks of one turn; ``previous`` are the dialogue's earlier turns, ``note``
    the source note (when given, a turn that reads a span of it aloud leaks)."""
    return TurnFlags(role=speaks_out_of_role(text, role),
                     leak=leaks_prompt(text, markers) or reads_note(text, note),
                     repeat=repeats_sentence(text, previous), empty=says_nothing(text, role))


def check_dialogue(turns: Iterable, markers=None, note: str | None = None) -> list[TurnFlags]:
    """Flags of each turn (objects or dicts with ``role`` and ``text``), in order."""
    flags, seen = [], []
    for t in turns:
        role, text = (t["role"], t["text"]) if isinstance(t, dict) else (t.role, t.text)
        flags.append(check_turn(text, role, seen, markers, note))
        seen.append(text)
    return flags


# -- stage 02's report -----------------------------------------------------------------------

def quality_per_dialogue(systems: dict[str, dict[str, list]],
                         notes: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per (system, note): turns, turns flagged by each check, turns passing;
    ``notes`` (note id -> text) lets the checks see a note read aloud."""
    rows = []
    for system, dialogues in systems.items():
        for note_id, turns in dialogues.items():
            flags = check_dialogue(turns, note=(notes or {}).get(note_id))
            rows.append({"system": system, "note_id": note_id, "turns": len(flags),
                         **{c: sum(getattr(f, c) for f in flags) for c in CHECKS},
                         "passing": sum(f.passes for f in flags)})
    return pd.DataFrame(rows, columns=["system", "note_id", "turns", *CHECKS, "passing"])


def quality_per_system(per_dialogue: pd.DataFrame) -> pd.DataFrame:
    """Per system: dialogues, turns, and the share (%) of turns each check flags and of
    turns that pass every check."""
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


TABLE3_NOTE = ("Turn quality (medpref.turns.turn_quality): % of turns where the speaker "
               "speaks out of role (claims the other role, talks of the patient in the third "
               "person, addresses another doctor), prompt scaffolding, stage directions or "
               "checklist annotations leak in, a sentence repeats, or a doctor turn only "
               "acknowledges (`empty`); `passing %` has none. Table 3's other blocks reward "
               "keyword presence alone and do not see these.")
