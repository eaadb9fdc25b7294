"""``control_process``: a planted process preference, the DPO control (issue 32).

Before an annotation strategy's null result can be read, the same DPO recipe must move a
policy when the preference is unambiguous (a training control: chosen and rejected differ
in the one behaviour the method is about; docs/training.md).
This strategy calls no model. From the training part of the written split
(``shared.split``) of ``annotation.control.dialogues``, for every state before a
dialogue's diagnosis (a patient turn before ``meta.diagnosis_turn``, the first doctor
turn that names the diagnosis or gives the plan) whose real next doctor turn asks — a
question or a test request — and does not name the diagnosis:

- chosen = that real doctor turn (it takes the history or asks for tests);
- rejected = the dialogue's own diagnosis turn ``turns[meta.diagnosis_turn]``, placed
  there prematurely: a real turn of the same dialogue and style that names the
  diagnosis or a treatment and asks nothing.

A dialogue whose diagnosis turn does not name its diagnosis (``meta.diagnosis``) or a
treatment, or asks a question (some give a test plan there: a rejected test request
would teach the opposite of the control), gives no pair; the result says how many.
The pairs are a seeded subset of at most ``annotation.control.max_pairs``. The strategy
is registered as a control: its DPO run trains like the strategies' runs, the runs table
marks it, and the paper tables leave it out.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from medpref.annotation.strategies import StrategyResult, register_strategy
from medpref.contracts import ContractError, Dialogue, PreferencePair, read_jsonl
from medpref.data.split import DialogueSplit, load_split
from medpref.echo import speech_act
from medpref.params import repo_path
from medpref.sentences import split_sentences

NAME = "control_process"
CHOSEN_SOURCE = "sampled"                 # the real dialogue's next doctor turn
REJECTED_SOURCE = "premature_diagnosis"   # the dialogue's later diagnosis turn

_WORD = re.compile(r"[a-z][a-z'-]+")
#: words of a diagnosis that do not name it on their own
_GENERIC = frozenset("""acute chronic disease disorder syndrome infection pain type with
without and of the mild moderate severe primary secondary benign simple common""".split())
#: a sentence that asks for a test or an examination (with a recommendation's form)
_TEST = re.compile(
    r"\b(?:tests?|testing|blood|bloods|scan|x-?rays?|ecg|ekg|echo\w*|ultrasound|mri|ct|"
    r"urine|urinalysis|swabs?|cultures?|biopsy|examin\w*|check|checks|measure\w*|monitor\w*|"
    r"samples?|levels?|counts?|spirometry|peak flow|endoscopy|colonoscopy|smear|"
    r"temperature|pressure|listen|look at|feel your|weigh\w*)\b", re.IGNORECASE)
#: the form of a request (with a test word: a test request)
_REQUEST = re.compile(
    r"\b(?:i'?d like|i would like|i want|let'?s|let me|we'?ll|we will|i'?ll|i will|we need|"
    r"you need|we should|you should|please|arrange|order|book|send (?:you|off))\b",
    re.IGNORECASE)
#: a turn that gives a treatment
_TREATMENT = re.compile(
    r"\b(?:prescrib\w*|prescription|start (?:you on|a|an|some)|tablets?|capsules?|creams?|"
    r"ointments?|sprays?|inhalers?|antibiotics?|steroids?|doses?|\d+ ?mg|medicines?|"
    r"medications?|physiotherapy|surgery|operation|therapy|treatments?|treat\w*|drops|"
    r"injections?|refer\w*|paracetamol|ibuprofen|naproxen|antihistamines?)\b", re.IGNORECASE)


def diagnosis_words(diagnosis: str) -> set[str]:
    """The words of a diagnosis that name it (generic ones like "acute" left out)."""
    return {w for w in _WORD.findall(diagnosis.lower()) if w not in _GENERIC and len(w) > 3}


def names_diagnosis(text: str, diagnosis: str) -> bool:
    """The text says every naming word of the diagnosis (``meta.diagnosis``): "heart
    failure" needs both words ("how well the heart pumps" does not name it)."""
    naming = diagnosis_words(diagnosis)
    return bool(naming) and naming <= set(_WORD.findall(text.lower()))


def names_treatment(text: str) -> bool:
    return bool(_TREATMENT.search(text))


def asks_question(text: str) -> bool:
    """One of the text's sentences is a question: the SP test's speech-act check (as
    ``medpref.simulation.nextturn.asks_question``)."""
    return any(speech_act(s) == "question" for s in split_sentences(text))


def requests_test(text: str) -> bool:
    """A sentence of the text asks for a test or an examination: a test word in a
    sentence with the SP test's recommendation form or a plain request ("I'd like blood
    tests")."""
    return any(_TEST.search(s) and (speech_act(s) == "recommendation" or _REQUEST.search(s))
               for s in split_sentences(text))


def asks(text: str) -> bool:
    """The turn asks: one of its sentences is a question, or it asks for a test or an
    examination."""
    return asks_question(text) or requests_test(text)


def diagnosis_turn(dialogue: Dialogue, path: str, line: int) -> int:
    """``meta.diagnosis_turn`` of a dialogue: the index of a doctor turn; anything else is
    a ContractError naming the file, the line and the field."""
    k = dialogue.meta.get("diagnosis_turn")
    if not isinstance(k, int) or isinstance(k, bool) or not 0 < k < len(dialogue.turns) \
            or dialogue.turns[k].role != "doctor":
        raise ContractError(path, line, "meta.diagnosis_turn",
                            f"{dialogue.id}: expected the index of a doctor turn, got {k!r}")
    if not isinstance(dialogue.meta.get("diagnosis"), str):
        raise ContractError(path, line, "meta.diagnosis", f"{dialogue.id}: missing")
    return k


@dataclass
class ControlPairs:
    pairs: list[PreferencePair]
    dialogues: int                       # training dialogues read
    states: int                          # states before the diagnosis that asked
    skipped: list[str] = field(default_factory=list)   # dialogues whose diagnosis turn fails


def rejected_ok(text: str, diagnosis: str) -> bool:
    """A rejected turn names the diagnosis or a treatment first: no question anywhere,
    and a sentence naming the diagnosis or a treatment before any test request."""
    if asks_question(text):
        return False
    for sentence in split_sentences(text):
        if names_diagnosis(sentence, diagnosis) or names_treatment(sentence):
            return True
        if requests_test(sentence):
            return False
    return False


def control_pairs(dialogues: Sequence[Dialogue], split: DialogueSplit, max_pairs: int | None,
                  seed: int, path: str = "<dialogues>") -> ControlPairs:
    """The control's pairs from the split's training dialogues only (see the module)."""
    lines = {d.id: i for i, d in enumerate(dialogues, start=1)}
    train = split.select(dialogues, "train")
    pairs, skipped, states = [], [], 0
    for d in train:
        k = diagnosis_turn(d, path, lines[d.id])
        diagnosis, rejected = d.meta["diagnosis"], d.turns[k].text
        if not rejected_ok(rejected, diagnosis):
            skipped.append(d.id)
            continue
        for j in range(1, k):
            turn = d.turns[j]
            if turn.role != "doctor" or d.turns[j - 1].role != "patient":
                continue
            if not asks(turn.text) or names_diagnosis(turn.text, diagnosis):
                continue
            states += 1
            pairs.append(PreferencePair(
                id=f"p-{NAME}-{d.id}@{j}", prompt=list(d.turns[:j]), chosen=turn.text,
                rejected=rejected, strategy=NAME, chosen_source=CHOSEN_SOURCE,
                rejected_source=REJECTED_SOURCE,
                meta={"dialogue": d.id, "turn": j, "diagnosis_turn": k,
                      "diagnosis": diagnosis}))
    if max_pairs is not None and len(pairs) > max_pairs:
        keep = set(random.Random(seed).sample(range(len(pairs)), max_pairs))
        pairs = [p for i, p in enumerate(pairs) if i in keep]
    return ControlPairs(pairs, len(train), states, skipped)


def build(params, seed: int) -> ControlPairs:
    """The control's pairs as the params configure them (``annotation.control``,
    ``shared.split``)."""
    cfg = params.annotation.control
    path = repo_path(cfg.dialogues)
    return control_pairs(read_jsonl(path, Dialogue), load_split(repo_path(params.shared.split)),
                         cfg.max_pairs, seed, str(path))


@register_strategy(NAME, control=True)
def control_process(inputs) -> list[StrategyResult]:
    """Stage 04's entry: the pairs (no model call, no decision on the stage's items)."""
    with inputs.stage.step(NAME):
        built = build(inputs.stage.params, inputs.stage.seed)
    return [StrategyResult(NAME, [], built.pairs)]
