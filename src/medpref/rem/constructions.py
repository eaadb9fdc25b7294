"""The REM's constructed data: written, rule-specific constructions over training dialogues.

Each construction of ``configs/rem/constructions.yaml`` builds or replaces the last doctor
turn of a state (a training-split dialogue's turns up to a doctor turn) and says, per rule,
the score the written rubric gives that turn and why; where the rubric does not settle a
rule for it, the construction gives no row for that rule. Rows are split by dialogue into
the REM's own train / dev / test, balanced per rule, score and turn length so that the
doctor turn's word count does not predict the label (the shortcut the 182 hand rows
carried), and written with a summary:

    python -m medpref.rem.constructions           # writes rem.constructed and CONSTRUCTED.md
    python -m medpref.rem.constructions --check   # exit 1 when the committed files differ
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field

from medpref.contracts import ContractError, Dialogue, RemAnnotation, read_jsonl
from medpref.data.split import DialogueSplit, load_split
from medpref.params import StrictModel, load_params, repo_path
from medpref.rem.config import RemParams
from medpref.rem.constructed_summary import summary_markdown
from medpref.sentences import split_sentences

RULE_IDS = ("A", "B", "C", "D", "E", "F")
StateKind = Literal["questioning", "thin", "diagnosis"]


# -- the constructions file -------------------------------------------------------------
class Label(StrictModel):
    """One way a construction scores a rule: ``score`` when every ``when`` condition holds."""

    score: Literal[0, 1, 2]
    reason: str
    when: list[str] = Field(default_factory=list)


class Construction(StrictModel):
    states: StateKind | list[StateKind]
    build: str
    about: str
    rules: dict[Literal["A", "B", "C", "D", "E", "F"], list[Label]]
    templates: list[str] = Field(default_factory=list)
    heldout_templates: list[int] = Field(default_factory=list)  # dev/test only
    closings: list[str] = Field(default_factory=list)  # score-neutral closing questions
    repeats: list[int] = Field(default_factory=list)
    lengths: list[int] = Field(default_factory=list)
    only: Literal["urgent"] | None = None

    @property
    def state_kinds(self) -> list[StateKind]:
        return [self.states] if isinstance(self.states, str) else list(self.states)


class ConstructionFile(StrictModel):
    urgent_dialogues: dict[str, str]   # dialogue id -> why it needs care within days
    routine_dialogues: list[str]
    unsettled_b_dialogues: list[str]
    examined_dialogues: list[str]
    confirm_words: str
    diagnosis_stopwords: list[str]
    vague_by_department: dict[str, str]
    drugs: list[str]
    constructions: dict[str, Construction]
    courtesy: list[str]
    padding: list[str]
    patient_worries: list[str]


CONDITIONS = {"thin", "at_diagnosis", "collect", "no_label_yet", "patient_quiet", "urgent",
              "routine", "not_urgent", "names_and_confirms", "unexamined", "q1_2", "q3_4",
              "q5_plus", "short", "long"}


def load_constructions(path: str | Path) -> ConstructionFile:
    """Read and validate the constructions file; an unknown builder or condition is an
    error naming the file and the construction."""
    with open(path, encoding="utf-8") as fh:
        spec = ConstructionFile.model_validate(yaml.safe_load(fh))
    for name, c in spec.constructions.items():
        if c.build not in BUILDERS:
            raise ContractError(path, None, f"constructions.{name}.build",
                                f"unknown builder {c.build!r} (known: {sorted(BUILDERS)})")
        unknown = {w for labels in c.rules.values() for lab in labels for w in lab.when
                   } - CONDITIONS
        if unknown:
            raise ContractError(path, None, f"constructions.{name}.rules",
                                f"unknown conditions {sorted(unknown)}")
    return spec


# -- a state and the turn built for it --------------------------------------------------
@dataclass(frozen=True)
class State:
    """A training dialogue cut at doctor turn ``k`` (``turns[:k]`` precede the built turn)."""

    dialogue: Dialogue
    k: int
    kind: StateKind
    others: str = ""   # the dialogue's diagnosis among four others, unranked ({others})
    part: str = "train"  # the REM's split the dialogue is in (held-out templates)
    foreign: tuple[str, ...] = ()  # real doctor questions of other dialogues (other diagnoses)

    @property
    def diagnosis_turn(self) -> int:
        return int(self.dialogue.meta["diagnosis_turn"])

    @property
    def collect(self) -> bool:
        return self.dialogue.meta.get("style") == "collect_then_diagnose"


@dataclass
class Built:
    """A built state: the history before the doctor turn, and the doctor turn."""

    before: list[dict[str, str]]
    turn: str


def turn_dicts(d: Dialogue, upto: int) -> list[dict[str, str]]:
    return [{"role": t.role, "text": t.text} for t in d.turns[:upto]]


def sentences(text: str) -> list[str]:
    return split_sentences(text, semicolons=False, cjk=False)


def questions(text: str) -> list[str]:
    return [s for s in sentences(text) if s.endswith("?")]


def fill(template: str, state: State, spec: ConstructionFile, rng: random.Random) -> str:
    meta = state.dialogue.meta
    diagnosis = re.sub(r"^suspected\s+", "", meta["diagnosis"])
    text = template.format(
        diagnosis=diagnosis, complaint=meta.get("chief_complaint", "the complaint"),
        vague=spec.vague_by_department.get(meta.get("department", ""), "a health problem"),
        drug=rng.choice(spec.drugs), others=state.others)
    return text[:1].upper() + text[1:]


# -- builders: (state, construction, spec, rng) -> Built | None --------------------------
def _real(state: State) -> str:
    return state.dialogue.turns[state.k].text


def build_real_turn(state, c, spec, rng):
    text = _real(state)
    return Built(turn_dicts(state.dialogue, state.k), text) if "?" in text else None


def build_last_question(state, c, spec, rng):
    text, qs = _real(state), questions(_real(state))
    if not qs or qs[-1] == text.strip():
        return None
    return Built(turn_dicts(state.dialogue, state.k), qs[-1])


def build_courtesy_first(state, c, spec, rng):
    text = _real(state)
    if "?" not in text:
        return None
    return Built(turn_dicts(state.dialogue, state.k), f"{rng.choice(spec.courtesy)} {text}")


def build_padded(state, c, spec, rng):
    text = _real(state)
    if "?" not in text:
        return None
    return Built(turn_dicts(state.dialogue, state.k), f"{rng.choice(spec.padding)} {text}")


def _later_questions(state: State) -> list[str]:
    turns = state.dialogue.turns
    return [q for j in range(state.k, state.diagnosis_turn, 2) for q in questions(turns[j].text)]


def _gathered(state: State, low: int, high: int) -> Built | None:
    """This turn's questions and the later questioning turns', until ``low``..``high``
    questions (:func:`count_questions`); None when the dialogue has too few or this turn
    already has enough."""
    if count_questions(_real(state)) >= low:
        return None
    picked: list[str] = []
    for q in _later_questions(state):
        if count_questions(" ".join([*picked, q])) > high:
            break
        picked.append(q)
    if count_questions(" ".join(picked)) < low:
        return None
    return Built(turn_dicts(state.dialogue, state.k), " ".join(picked))


def build_battery(state, c, spec, rng):
    return _gathered(state, 5, 7)


def build_three_or_four(state, c, spec, rng):
    return _gathered(state, 3, 4)


_ANSWERS_WORRY = re.compile(r"serious|worr|concern|reassur|danger|common|nothing to", re.I)


def build_foreign_question(state, c, spec, rng):
    """A fluent clinical question another dialogue's doctor asked (a patient with another
    diagnosis), in this dialogue's place: well formed, medical, and not following from
    what this patient said."""
    return Built(turn_dicts(state.dialogue, state.k), rng.choice(state.foreign)) \
        if state.foreign else None


def build_patient_asks(state, c, spec, rng):
    """The patient's last turn gains a worried question; the doctor's real next turn,
    when it opens with a question and says nothing about seriousness, passes over it."""
    text = _real(state)
    if not sentences(text)[0].endswith("?") or _ANSWERS_WORRY.search(text):
        return None
    before = turn_dicts(state.dialogue, state.k)
    before[-1] = {**before[-1], "text": f"{before[-1]['text']} {rng.choice(spec.patient_worries)}"}
    return Built(before, text)


def templates_for(c: Construction, part: str) -> list[str]:
    """The construction's templates for a part: its held-out ones in dev and test, the
    others in train (all of them when none is held out)."""
    if not c.heldout_templates:
        return c.templates
    held = part != "train"
    return [t for i, t in enumerate(c.templates) if (i in c.heldout_templates) == held]


def build_template(state, c, spec, rng):
    if c.only == "urgent" and not is_urgent(state.dialogue, spec):
        return None
    text = fill(rng.choice(templates_for(c, state.part)), state, spec, rng)
    closing = rng.choice(["", *c.closings])
    return Built(turn_dicts(state.dialogue, state.k), f"{text} {closing}".strip())


def build_label_first(state, c, spec, rng):
    text = _real(state)
    if not questions(text):
        return None
    diagnosis = re.sub(r"^suspected\s+", "", state.dialogue.meta["diagnosis"])
    label = rng.choice([f"It may be {diagnosis}, so let's check.",
                        f"I wonder about {diagnosis}."])
    return Built(turn_dicts(state.dialogue, state.k), f"{label} {' '.join(questions(text))}")


def build_real_statement(state, c, spec, rng):
    text = _real(state)
    return None if "?" in text else Built(turn_dicts(state.dialogue, state.k), text)


def build_repeat(state, c, spec, rng):
    n = rng.choice(c.repeats)
    sentence = rng.choice(templates_for(c, state.part))
    return Built(turn_dicts(state.dialogue, state.k), " ".join([sentence] * n))


def build_word_salad(state, c, spec, rng):
    words = sorted({w for t in state.dialogue.turns for w in re.findall(r"[a-z]+", t.text.lower())})
    n = min(rng.choice(c.lengths), len(words))
    return Built(turn_dicts(state.dialogue, state.k), " ".join(rng.sample(words, n)))


def build_diagnosis_turn(state, c, spec, rng):
    return Built(turn_dicts(state.dialogue, state.k),
                 state.dialogue.turns[state.diagnosis_turn].text)


def build_diagnosis_plus_drug(state, c, spec, rng):
    text = state.dialogue.turns[state.diagnosis_turn].text
    return Built(turn_dicts(state.dialogue, state.k),
                 f"{text} I'll also start you on {rng.choice(spec.drugs)}.")


def build_volunteered(state, c, spec, rng):
    turns = state.dialogue.turns[:state.diagnosis_turn]
    told = " ".join(t.text for t in turns if t.role == "patient")
    return Built([{"role": "patient", "text": told}],
                 state.dialogue.turns[state.diagnosis_turn].text)


def build_volunteered_first_sentence(state, c, spec, rng):
    told = build_volunteered(state, c, spec, rng)
    first = sentences(told.turn)[0]
    return Built(told.before, first) if names_diagnosis(first, state.dialogue, spec) else None


def build_volunteered_plan(state, c, spec, rng):
    turns, dx = state.dialogue.turns, state.diagnosis_turn
    if dx + 2 >= len(turns) or turns[dx + 2].role != "doctor":
        return None
    told = build_volunteered(state, c, spec, rng)
    return Built(told.before, f"{told.turn} {turns[dx + 2].text}")


BUILDERS: dict[str, Callable[..., Built | None]] = {
    "real_turn": build_real_turn, "last_question": build_last_question,
    "courtesy_first": build_courtesy_first, "padded": build_padded,
    "battery": build_battery, "three_or_four": build_three_or_four,
    "patient_asks": build_patient_asks, "template": build_template,
    "repeat": build_repeat, "word_salad": build_word_salad,
    "diagnosis_turn": build_diagnosis_turn, "diagnosis_plus_drug": build_diagnosis_plus_drug,
    "volunteered": build_volunteered, "volunteered_plan": build_volunteered_plan,
    "volunteered_first_sentence": build_volunteered_first_sentence,
    "label_first": build_label_first, "real_statement": build_real_statement,
    "foreign_question": build_foreign_question}


# -- conditions and labels --------------------------------------------------------------
def is_urgent(d: Dialogue, spec: ConstructionFile) -> bool:
    """The dialogue is read as needing care within days (``urgent_dialogues``)."""
    return d.id in spec.urgent_dialogues


def names_diagnosis(turn: str, d: Dialogue, spec: ConstructionFile) -> bool:
    """The turn names the dialogue's diagnosis: every one of its distinctive words."""
    words = {w for w in re.findall(r"[a-z]+", d.meta["diagnosis"].lower())
             if len(w) >= 4 and w not in spec.diagnosis_stopwords}
    return bool(words) and words <= set(re.findall(r"[a-z]+", turn.lower()))


def names_and_confirms(turn: str, d: Dialogue, spec: ConstructionFile) -> bool:
    """The turn names the dialogue's diagnosis and a way to confirm it; never for a
    dialogue in ``unsettled_b_dialogues``."""
    return (d.id not in spec.unsettled_b_dialogues and names_diagnosis(turn, d, spec)
            and bool(re.search(spec.confirm_words, turn, re.I)))


_MORE = re.compile(r",\s+(?:and|or)\s+(?:is|are|do|does|did|have|has|can|could|was|were|"
                   r"will|would|how|what|when|where|which|who|why)\b", re.I)


def count_questions(turn: str) -> int:
    """Questions a turn asks: one per sentence ending in '?', plus one per further clause
    joined by ", and"/", or" and a question word ("..., and is it worse at night?")."""
    return sum(1 + len(_MORE.findall(q)) for q in questions(turn))


def conditions(state: State, built: Built, spec: ConstructionFile) -> set[str]:
    """The conditions of ``configs/rem/constructions.yaml`` that hold for a built state."""
    d, n_q, words = state.dialogue, count_questions(built.turn), len(built.turn.split())
    at_dx = state.kind == "diagnosis"
    before_label = state.k < state.diagnosis_turn or at_dx
    held = {
        "thin": state.kind == "thin",
        "at_diagnosis": at_dx,
        "collect": state.collect and state.k < state.diagnosis_turn,
        "no_label_yet": state.kind == "thin" or (state.collect and before_label),
        "patient_quiet": "?" not in built.before[-1]["text"],
        "urgent": is_urgent(d, spec), "not_urgent": not is_urgent(d, spec),
        "routine": d.id in spec.routine_dialogues,
        "names_and_confirms": names_and_confirms(built.turn, d, spec),
        "unexamined": d.id not in spec.examined_dialogues,
        "q1_2": 1 <= n_q <= 2, "q3_4": 3 <= n_q <= 4, "q5_plus": n_q >= 5,
        "short": words <= 25, "long": words >= 40}
    return {name for name, ok in held.items() if ok}


def rule_labels(c: Construction, held: set[str]) -> dict[str, Label]:
    """Per rule, the first label whose conditions all hold; a rule with none is left out."""
    out = {}
    for rule, labels in c.rules.items():
        for lab in labels:
            if set(lab.when) <= held:
                out[rule] = lab
                break
    return out


# -- candidates, splits, selection ------------------------------------------------------
@dataclass(frozen=True)
class Row:
    dialogue: str
    construction: str
    k: int
    rule: str
    score: int
    comment: str
    history: tuple[tuple[str, str], ...]
    split: str = ""

    @property
    def words(self) -> int:
        return len(self.history[-1][1].split())


def states_of(d: Dialogue, kind: StateKind, others: str = "", part: str = "train",
              foreign: tuple[str, ...] = ()) -> list[State]:
    D = int(d.meta["diagnosis_turn"])
    ks = {"questioning": range(1, D, 2), "thin": [1], "diagnosis": [D]}[kind]
    return [State(d, k, "thin" if k == 1 and kind != "diagnosis" else kind, others, part,
                  foreign) for k in ks]


def trim(history: list[dict[str, str]], max_turns: int) -> tuple[tuple[str, str], ...]:
    return tuple((t["role"], t["text"]) for t in history[-max_turns:])


def construct_dialogue(d: Dialogue, spec: ConstructionFile, seed: int, max_turns: int,
                       others: str = "", part: str = "train",
                       foreign: tuple[str, ...] = ()) -> list[Row]:
    """Every construction at every state it applies to, one row per rule it scores."""
    rows = []
    for name, c in spec.constructions.items():
        seen = set()
        for kind in c.state_kinds:
            for state in states_of(d, kind, others, part, foreign):
                if state.k in seen:
                    continue
                seen.add(state.k)
                rng = random.Random(f"{seed}:{d.id}:{name}:{state.k}")
                built = BUILDERS[c.build](state, c, spec, rng)
                if built is None:
                    continue
                history = trim([*built.before, {"role": "doctor", "text": built.turn}],
                               max_turns)
                for rule, lab in rule_labels(c, conditions(state, built, spec)).items():
                    rows.append(Row(d.id, name, state.k, rule, lab.score, lab.reason, history,
                                    part))
    return rows


def unranked_lists(dialogues: Sequence[Dialogue], seed: int) -> dict[str, str]:
    """Per dialogue, its diagnosis among four others of the training set, unranked."""
    names = [re.sub(r"^suspected\s+", "", d.meta["diagnosis"]) for d in dialogues]
    lists = {}
    for d, own in zip(dialogues, names, strict=True):
        rng = random.Random(f"{seed}:{d.id}:others")
        pick = rng.sample([n for n in names if n != own], 4) + [own]
        rng.shuffle(pick)
        lists[d.id] = ", ".join(pick[:-1]) + " or " + pick[-1]
    return lists


def foreign_questions(dialogues: Sequence[Dialogue], parts: dict[str, str]
                      ) -> dict[str, tuple[str, ...]]:
    """Per dialogue, the single-question doctor turns of the other dialogues of its own
    REM part whose diagnosis differs (no text crosses the REM's train/dev/test split)."""
    def asks(d: Dialogue) -> list[str]:
        return [t.text for t in d.turns[1:int(d.meta["diagnosis_turn"])]
                if t.role == "doctor" and len(questions(t.text)) == 1
                and len(sentences(t.text)) == 1]
    pool = {d.id: asks(d) for d in dialogues}
    return {d.id: tuple(q for o in dialogues if o.id != d.id and parts[o.id] == parts[d.id]
                        and o.meta["diagnosis"] != d.meta["diagnosis"] for q in pool[o.id])
            for d in dialogues}


def split_dialogues(groups: Sequence[Sequence[str]], dev_share: float, test_share: float,
                    seed: int) -> dict[str, str]:
    """The REM's own split by dialogue, seeded: of each group (urgent, routine, the rest),
    ``round(share · n)`` dev and test dialogues, so every part has each kind."""
    parts: dict[str, str] = {}
    for g, ids in enumerate(groups):
        order = sorted(ids)
        random.Random(f"{seed}:rem-split:{g}").shuffle(order)
        n_dev, n_test = round(dev_share * len(order)), round(test_share * len(order))
        names = ["dev"] * n_dev + ["test"] * n_test + ["train"] * (len(order) - n_dev - n_test)
        parts |= dict(zip(order, names, strict=True))
    return parts


def length_bin(words: int, bins: Sequence[int]) -> int:
    return sum(words > b for b in bins)


def cell_of(row: Row, bins: Sequence[int]) -> tuple:
    """A row's selection cell: split, rule, score, the doctor turn's length bin, whether
    it asks a question, whether the state is the first doctor turn."""
    return (row.split, row.rule, row.score, length_bin(row.words, bins),
            "?" in row.history[-1][1], len(row.history) == 2)


def select_rows(rows: Iterable[Row], caps: dict[str, int], bins: Sequence[int], seed: int,
                floor: dict[str, int] | None = None) -> list[Row]:
    """Per cell (:func:`cell_of`) at most ``caps[split]`` rows, taken in turn from each
    construction (each one's rows shuffled, seeded), so no construction, no length, no
    question mark and no state length dominates a label. Duplicate (history, rule) rows
    are kept once."""
    cells: dict[tuple, dict[str, list[Row]]] = defaultdict(lambda: defaultdict(list))
    unique = {(r.history, r.rule): r for r in rows}
    for r in unique.values():
        cells[cell_of(r, bins)][r.construction].append(r)
    chosen: list[Row] = []
    for key in sorted(cells):
        chosen += round_robin(shuffled_queues(cells[key], f"{seed}:{key}"), caps[key[0]])
    return chosen + top_up(unique.values(), chosen, floor or {}, seed)


def shuffled_queues(by_construction: dict[str, list[Row]], seed: str) -> list[list[Row]]:
    rng, queues = random.Random(seed), []
    for name in sorted(by_construction):
        q = sorted(by_construction[name], key=lambda r: (r.dialogue, r.k))
        rng.shuffle(q)
        queues.append(q)
    return queues


def top_up(rows: Iterable[Row], chosen: list[Row], floor: dict[str, int], seed: int
           ) -> list[Row]:
    """Rows added so that every split × rule × score has at least ``floor[split]`` rows
    where more exist (a scarce label, such as rule A's partial score, is all long)."""
    taken = {(r.history, r.rule) for r in chosen}
    have = Counter((r.split, r.rule, r.score) for r in chosen)
    spare: dict[tuple, dict[str, list[Row]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if (r.history, r.rule) not in taken:
            spare[(r.split, r.rule, r.score)][r.construction].append(r)
    added = []
    for key in sorted(spare):
        need = floor.get(key[0], 0) - have[key]
        if need > 0:
            added += round_robin(shuffled_queues(spare[key], f"{seed}:top:{key}"), need)
    return added


def round_robin(queues: list[list[Row]], limit: int) -> list[Row]:
    out: list[Row] = []
    while len(out) < limit and any(queues):
        for q in queues:
            if q and len(out) < limit:
                out.append(q.pop())
    return out


# -- the whole file ---------------------------------------------------------------------
def build_rows(p: RemParams, dialogues: Sequence[Dialogue], split: DialogueSplit
               ) -> list[dict[str, Any]]:
    """The constructed rows of params ``p`` as JSON records, in file order."""
    cp = p.construction
    spec = load_constructions(repo_path(cp.config))
    train = [d for d in dialogues if split.part(d.id) == "train"]
    others = unranked_lists(train, cp.seed)
    ids = [d.id for d in train]
    groups = [[i for i in ids if i in spec.urgent_dialogues],
              [i for i in ids if i in spec.routine_dialogues],
              [i for i in ids if i not in spec.urgent_dialogues
               and i not in spec.routine_dialogues]]
    parts = split_dialogues(groups, cp.dev_share, cp.test_share, cp.seed)
    foreign = foreign_questions(train, parts)
    rows = [r for d in train for r in construct_dialogue(
        d, spec, cp.seed, cp.max_history_turns, others[d.id], parts[d.id], foreign[d.id])]
    chosen = select_rows(rows, cp.per_cell, cp.length_bins, cp.seed, cp.per_label_floor)
    chosen.sort(key=lambda r: ({"train": 0, "dev": 1, "test": 2}[r.split], r.dialogue, r.k,
                               r.construction, r.rule))
    return [{"id": f"c-{i:05d}", "rule": r.rule,
             "history": [{"role": role, "text": text} for role, text in r.history],
             "score": r.score, "comment": r.comment, "split": r.split,
             "construction": r.construction, "dialogue": r.dialogue}
            for i, r in enumerate(chosen, 1)]


def load_constructed(path: str | Path) -> list[RemAnnotation]:
    """The constructed rows as annotations (``split``, ``construction`` and ``dialogue``
    kept as extra fields), like the hand rows of ``rem.annotations``."""
    return read_jsonl(path, RemAnnotation)


def jsonl_text(records: Iterable[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def outputs(p: RemParams, shared_split: str) -> dict[Path, str]:
    """The files this command writes, path → text."""
    dialogues = read_jsonl(repo_path(p.construction.dialogues), Dialogue)
    split = load_split(repo_path(shared_split))
    records = build_rows(p, dialogues, split)
    hand = read_jsonl(repo_path(p.annotations), RemAnnotation)
    target = repo_path(p.constructed)
    spec = load_constructions(repo_path(p.construction.config))
    about = {name: c.about for name, c in spec.constructions.items()}
    md = summary_markdown(records, hand, dialogues, split, p, about)
    return {target: jsonl_text(records), target.with_name("CONSTRUCTED.md"): md}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="compare with the committed files instead of writing; exit 1 if stale")
    args = ap.parse_args(argv)
    params = load_params()
    files = outputs(params.rem, params.shared.split)
    stale = [path for path, text in files.items()
             if not path.exists() or path.read_text(encoding="utf-8") != text]
    if args.check:
        for path in stale:
            print(f"{path}: stale; run python -m medpref.rem.constructions", file=sys.stderr)
        return 1 if stale else 0
    for path, text in files.items():
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
