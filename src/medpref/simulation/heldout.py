"""Held-out process compliance: does a policy follow the PLPF flowchart better than SFT
on dialogues that nothing trained or tuned on? (issue 21, item 2; issue 31)

A *state* is a real dialogue up to a patient turn: the turns before one of its doctor
turns that answers the patient. Every policy writes the next doctor turn from the same
states, with the prompt the policies trained with and greedy decoding, as in the
next-turn evaluation (:mod:`medpref.simulation.nextturn`); stage 03's REM scores each
state plus that turn on every rule (0-2). Per policy and rule (and ``all``: the mean
over the rules of a state every rule scored): the mean, and the paired difference to SFT
state by state (:func:`medpref.metrics.intervals.paired_difference`): a bootstrap
interval that resamples whole dialogues (the states of one dialogue share its patient and
history), a sign-flip p-value on dialogue totals and the minimum detectable difference.

Held out means: a dialogue of the written split's ``eval`` part (``shared.split``,
:mod:`medpref.data.split`), which SFT, stage 01's sampling (so every preference pair and
DPO run) and the annotation never see. The states are drawn from those dialogues only,
seeded, several per dialogue, each *before* the dialogue's diagnosis or plan
(``meta.diagnosis_turn``), so that a diagnosis there is premature.

Controls are scored on every state beside the policies, with the same REM and rules and
no generation: ``control_real_turn``, the dialogue's own next doctor turn;
``control_bad_turn``, the dialogue's own diagnosis or plan turn moved to this early state
(a templated diagnosis sentence when the dialogue has no such turn); and the turns of
``simulation.heldout.control_turns`` (a vague non-answer, an unsafe prescription, an AI
refusal, a battery of questions, junk). Each rule has its own pair, the one the written
rubric ranks on that rule (``simulation.heldout.rule_controls``): on rule A the real
asking turn above the early diagnosis, on B and C the early diagnosis (it names the
disease and its work-up) above the vague turn, on D the real turn above the unsafe one,
and so on. The pair's paired difference (higher − lower, bootstrap by dialogue) is the
REM's range on that rule: a policy's difference to SFT is read against it, and where the
range does not exclude 0 the REM does not tell a good turn from a bad one on that rule,
and no policy is ranked by it (the verdict says so). The junk control is set against the
higher turn of every rule (``junk_range`` lines): reported, not gating.

Controls first: the controls are scored before any policy, and when no rule's range
separates the policies' turns are kept (the question share reads them) but not scored,
their rows saying why (``simulation.heldout.score_policies``: ``always`` scores them
regardless). An instrument shown blind costs no REM calls.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from medpref.contracts import ContractError, Dialogue, Turn, iter_jsonl
from medpref.data.split import DialogueSplit, load_split
from medpref.llm.types import CallSpec
from medpref.metrics.intervals import paired_difference, shown_mde
from medpref.params import repo_path
from medpref.prompts import PromptTemplate
from medpref.simulation.consult import doctor_messages, parse_doctor_answer
from medpref.simulation.doctors import grid_cell
from medpref.simulation.nextturn import cut_points

REFERENCE = "sft"
REAL, BAD = "control_real_turn", "control_bad_turn"   # built from each state's dialogue
RANGE = "rem_range"   # the table's line of the REM's range on a rule: higher − lower control
JUNK_RANGE = "junk_range"   # the rule's higher control − the junk control (reported only)
#: The pair each rule is read by when params give none: the first design (real vs bad).
LEGACY_PAIR = (REAL, BAD)
COLUMNS = ["policy", "n_states", "rule", "mean", "delta_vs_sft", "ci_lo", "ci_hi", "p_value",
           "mde", "verdict", "rem_range", "rem_range_lo", "rem_range_hi"]
STATE_COLUMNS = ["dialogue", "part", "cut", "diagnosis_turn", "history_turns", "bad_turn_from"]
NOT_RANKED = "not ranked: the REM's range covers 0"
NOT_SCORED = ("not scored: the REM's range does not separate the controls on any rule "
              "(simulation.heldout.score_policies)")

#: Seconds on 2 CPU cores for the printed estimate, measured in the committed run's
#: ledger (reports/06_simulation/ledger.json): 342 uncached policy turns in 978 s
#: (2.9 s a turn) and 1,908 uncached REM scorings of a state on one rule in 880 s.
GEN_S_PER_TURN = 2.9
REM_S_PER_RULE = 0.46


@dataclass(frozen=True)
class HeldoutState:
    """A held-out dialogue cut before its doctor turn ``cut``: the history the policies
    answer (the last ``history_max_turns`` turns, ending with the patient's), and the two
    controls' turns: the real one (``turns[cut]``) and the bad one."""

    dialogue: str
    cut: int
    history: tuple[Turn, ...]
    real_turn: str = ""
    bad_turn: str = ""
    bad_turn_from: str = ""          # diagnosis_turn | template
    diagnosis_turn: int | None = None


@dataclass
class HeldoutResult:
    states: pd.DataFrame
    table: pd.DataFrame
    turns: list[dict[str, Any]] = field(default_factory=list)   # raw answers and REM scores
    note: str = ""
    state_rows: list[dict[str, Any]] = field(default_factory=list)   # the states' records


# -- which states --------------------------------------------------------------------------

def eval_dialogues(path: str | Path, split: DialogueSplit) -> list[Dialogue]:
    """The dialogues of the file at ``path`` that the split puts in ``eval``, in file
    order. A dialogue the split does not list is an error (so a new dialogue cannot slip
    into the held-out set, or out of it, unseen), and so is an eval dialogue whose
    ``meta.diagnosis_turn`` is not the index of one of its doctor turns (each error
    names the file, the line and the field)."""
    out = []
    for line, d in enumerate(iter_jsonl(path, Dialogue), start=1):
        try:
            part = split.part(d.id)
        except KeyError as exc:
            raise ContractError(path, line, "id", exc.args[0]) from None
        if part != "eval":
            continue
        i = (d.meta or {}).get("diagnosis_turn")
        if i is not None and not (isinstance(i, int) and 0 <= i < len(d.turns)
                                  and d.turns[i].role == "doctor"):
            raise ContractError(path, line, "meta.diagnosis_turn",
                                f"{i!r} is not the index of a doctor turn of {d.id} "
                                f"({len(d.turns)} turns)")
        out.append(d)
    return out


def bad_turn(d: Dialogue, template: str) -> tuple[str, str]:
    """The deliberately bad turn for any early state of ``d`` and where it came from: the
    dialogue's own diagnosis or plan turn (``meta.diagnosis_turn``), else ``template``
    filled with ``meta.diagnosis``; neither is an error naming the dialogue."""
    meta = d.meta or {}
    i = meta.get("diagnosis_turn")
    if i is not None:
        return d.turns[i].text, "diagnosis_turn"
    if meta.get("diagnosis"):
        return template.format(diagnosis=meta["diagnosis"]), "template"
    raise ValueError(f"dialogue {d.id}: the bad-turn control needs meta.diagnosis_turn or "
                     "meta.diagnosis")


def select_states(dialogues: Sequence[Dialogue], n_states: int, per_dialogue: int, seed: int,
                  history_max_turns: int, bad_template: str) -> list[HeldoutState]:
    """Up to ``n_states`` states: the dialogues in a seeded order, up to ``per_dialogue``
    seeded cuts each among the doctor turns before its ``meta.diagnosis_turn`` (every
    doctor turn when it has none); a cut depends only on the seed and the dialogue, so
    adding dialogues keeps the others' cuts."""
    pool = sorted(dialogues, key=lambda d: d.id)
    random.Random(f"{seed}:heldout").shuffle(pool)
    states: list[HeldoutState] = []
    for d in pool:
        before = (d.meta or {}).get("diagnosis_turn")
        cuts = cut_points(d, per_dialogue, random.Random(f"{seed}:heldout:{d.id}"), before)
        bad, source = bad_turn(d, bad_template)
        for i in cuts[:n_states - len(states)]:
            states.append(HeldoutState(d.id, i, tuple(d.turns[max(0, i - history_max_turns):i]),
                                       d.turns[i].text, bad, source, before))
        if len(states) >= n_states:
            break
    return states


def states_table(states: Sequence[HeldoutState], split: DialogueSplit | None) -> pd.DataFrame:
    """One row per state: its dialogue, the dialogue's part of the split (``eval``
    throughout; a test asserts it), the cut, the diagnosis turn it comes before and
    where its bad-turn control came from."""
    return states_of(state_records(states, split))


def state_records(states: Sequence[HeldoutState], split: DialogueSplit | None) -> list[dict]:
    """The rows of :func:`states_table`, one record per state."""
    return [{"dialogue": s.dialogue, "part": split.part(s.dialogue) if split else "",
             "cut": s.cut, "diagnosis_turn": s.diagnosis_turn, "history_turns": len(s.history),
             "bad_turn_from": s.bad_turn_from} for s in states]


def states_of(rows: Sequence[dict]) -> pd.DataFrame:
    """``heldout_states`` from its records."""
    return pd.DataFrame(list(rows), columns=STATE_COLUMNS)


def heldout_doctors(doctors: Sequence, include_grid: bool) -> list:
    """The doctors compared: all of them, less the PLPF Table 3 grid cells unless asked."""
    return [d for d in doctors if include_grid or grid_cell(d) is None]


def estimated_seconds(n_states: int, n_policies: int, n_rules: int,
                      n_controls: int = 2) -> tuple[float, float]:
    """(generation, REM) seconds of an uncached run on 2 CPU cores (an upper bound: REM
    calls on states two policies answered alike are made once). The controls cost REM
    calls and no generation."""
    turns = n_states * n_policies
    return turns * GEN_S_PER_TURN, (turns + n_states * n_controls) * n_rules * REM_S_PER_RULE


@dataclass(frozen=True)
class ControlDesign:
    """Which control turns are scored and which pair reads each rule: ``pairs`` maps a rule
    id (and ``all``) to its (higher, lower) control; ``turns`` the templated controls' text;
    ``junk`` the control set against every rule's higher one (or None)."""

    pairs: dict[str, tuple[str, str]]
    turns: dict[str, str] = field(default_factory=dict)
    junk: str | None = None

    @property
    def names(self) -> list[str]:
        """Every control, the dialogue-made ones first, in a fixed order."""
        named = [n for pair in self.pairs.values() for n in pair] + list(self.turns)
        if self.junk:
            named.append(self.junk)
        return [REAL, BAD] + sorted(set(named) - {REAL, BAD})

    def pair(self, rule: str) -> tuple[str, str] | None:
        return self.pairs.get(rule)


LEGACY = ControlDesign({})   # every rule read by real vs bad (records of the first design)


def design_of(hp) -> ControlDesign:
    """The control design of ``simulation.heldout``."""
    return ControlDesign({rule: tuple(pair) for rule, pair in hp.rule_controls.items()},
                         dict(hp.control_turns), hp.junk_control)


# -- one policy's turns and the REM's scores -----------------------------------------------

def next_doctor_turns(states: Sequence[HeldoutState], client, template: PromptTemplate,
                      call: CallSpec) -> list:
    """One batched call: the policy's greedy next turn for every state (completions)."""
    convs = [doctor_messages(template, s.history) for s in states]
    return client.chat_many(convs, call, temperature=0.0)


def score_turns(states: Sequence[HeldoutState], turns: dict[str, list[str | None]], scorer,
                rules: Sequence) -> pd.DataFrame:
    """Long table (policy, dialogue, cut, rule, score) of the REM's score of each state
    plus each policy's turn; a failed turn (None) or an unusable REM answer gives NaN.
    A state two policies answered alike is scored once."""
    unique: dict[tuple, int] = {}
    full_states: list[list[Turn]] = []
    where: dict[tuple[str, int], int] = {}
    for policy, answers in turns.items():
        for k, (s, text) in enumerate(zip(states, answers)):
            if text is None:
                continue
            full = [*s.history, Turn(role="doctor", text=text)]
            key = tuple((t.role, t.text) for t in full)
            if key not in unique:
                unique[key] = len(full_states)
                full_states.append(full)
            where[(policy, k)] = unique[key]
    judged = scorer.score_states(full_states, list(rules)) if full_states else []
    rows = []
    for policy in turns:
        for k, s in enumerate(states):
            j = where.get((policy, k))
            for rule in rules:
                score = judged[j][rule.id].score if j is not None else None
                rows.append({"policy": policy, "dialogue": s.dialogue, "cut": s.cut,
                             "rule": rule.id, "score": np.nan if score is None else float(score)})
    return pd.DataFrame(rows, columns=["policy", "dialogue", "cut", "rule", "score"])


# -- the table -----------------------------------------------------------------------------

def with_overall(scores: pd.DataFrame) -> pd.DataFrame:
    """``scores`` plus rule ``all``: per policy and state, the mean over the rules when
    every rule got a score (else NaN, so ``all`` always averages the same rules)."""
    by_state = scores.groupby(["policy", "dialogue", "cut"], sort=False)["score"]
    overall = by_state.agg(lambda s: s.mean() if s.notna().all() else np.nan).reset_index()
    return pd.concat([overall.assign(rule="all"), scores], ignore_index=True)


def compliance_table(scores: pd.DataFrame, policies: Sequence[str], n_boot: int, seed: int,
                     level: float = 0.95, reference: str = REFERENCE,
                     design: ControlDesign = LEGACY) -> pd.DataFrame:
    """Per policy and rule (``all`` first): mean REM score over the states it got one on,
    and the paired difference to ``reference`` over the states both got one on, clustered
    by dialogue. When ``scores`` holds a rule's control pair: the REM's range on that rule
    (see :func:`rem_ranges`) beside every row of that rule and on a line of its own (policy
    ``rem_range``); on a rule whose pair does not separate, or that has no pair in
    ``scores``, no row is ranked (verdict ``NOT_RANKED``). With the junk control, per rule
    a ``junk_range`` line (the rule's higher control − junk)."""
    scores = with_overall(scores)
    rules = list(dict.fromkeys(scores["rule"]))
    wide = scores.set_index(["rule", "dialogue", "cut", "policy"])["score"].unstack("policy")
    rows = []
    for policy in policies:
        for rule in rules:
            by_state = wide.loc[rule]
            mine = by_state[policy].dropna() if policy in by_state else pd.Series(dtype=float)
            row = {"policy": policy, "n_states": len(mine), "rule": rule,
                   "mean": float(mine.mean()) if len(mine) else np.nan}
            row.update(_versus(by_state, policy, reference, n_boot, level, seed))
            rows.append(row)
    ranges = rem_ranges(wide, rules, n_boot, level, seed, design)
    has_controls = bool(ranges) or any(n in wide.columns for n in (REAL, BAD))
    for row in rows:
        cmp = ranges.get(row["rule"])
        if cmp is not None:
            row.update(rem_range=cmp.diff, rem_range_lo=cmp.lo, rem_range_hi=cmp.hi)
        if has_controls and (cmp is None or not separates(cmp)) and row["verdict"] in RANKED:
            row["verdict"] = NOT_RANKED
    rows += [range_line(rule, cmp, design.pair(rule) or LEGACY_PAIR)
             for rule, cmp in ranges.items()]
    rows += [junk_line(rule, cmp) for rule, cmp in
             junk_ranges(wide, rules, n_boot, level, seed, design).items()]
    return pd.DataFrame(rows, columns=COLUMNS)


#: The verdicts of a comparison, which a range that does not separate withdraws.
RANKED = ("higher", "lower", "no detectable difference")


def _pair_difference(wide: pd.DataFrame, rule: str, high: str, low: str, n_boot: int,
                     level: float, seed: int):
    """high − low on ``rule`` over the states the REM scored both on, bootstrap by dialogue;
    None when either control is absent or no state has both."""
    if high not in wide.columns or low not in wide.columns:
        return None
    both = wide.loc[rule][[high, low]].dropna()
    if both.empty:
        return None
    return paired_difference(both[high].to_numpy(), both[low].to_numpy(), n_boot=n_boot,
                             level=level, seed=seed,
                             clusters=list(both.index.get_level_values("dialogue")))


def rem_ranges(wide: pd.DataFrame, rules: Sequence[str], n_boot: int, level: float,
               seed: int, design: ControlDesign = LEGACY) -> dict[str, Any]:
    """Per rule: the paired difference of its control pair (higher − lower, real − bad
    where the design gives the rule none) over the states the REM scored both on,
    bootstrap by dialogue: the REM's range on that rule; rules whose pair is missing
    from ``wide`` are left out."""
    out = {}
    for rule in rules:
        high, low = design.pair(rule) or LEGACY_PAIR
        cmp = _pair_difference(wide, rule, high, low, n_boot, level, seed)
        if cmp is not None:
            out[rule] = cmp
    return out


def junk_ranges(wide: pd.DataFrame, rules: Sequence[str], n_boot: int, level: float,
                seed: int, design: ControlDesign) -> dict[str, Any]:
    """Per rule: the rule's higher control − the junk control (none without junk)."""
    if not design.junk:
        return {}
    out = {}
    for rule in rules:
        high = (design.pair(rule) or LEGACY_PAIR)[0]
        cmp = _pair_difference(wide, rule, high, design.junk, n_boot, level, seed)
        if cmp is not None:
            out[rule] = cmp
    return out


def separates(cmp) -> bool:
    """The REM scores the higher control above the lower: interval above 0 and p < 0.05."""
    return cmp.verdict() == "higher"


def range_line(rule: str, cmp, pair: tuple[str, str] = LEGACY_PAIR) -> dict[str, Any]:
    """The table's line of the REM's range on ``rule`` (its pair named)."""
    high, low = pair
    verdict = (f"separates {high} from {low}" if separates(cmp) else
               f"does not separate {high} from {low}: nothing is ranked by the REM on this "
               "rule")
    return {"policy": RANGE, "n_states": cmp.n, "rule": rule, "mean": np.nan,
            "delta_vs_sft": np.nan, "ci_lo": np.nan, "ci_hi": np.nan, "p_value": cmp.p_value,
            "mde": shown_mde(cmp), "verdict": verdict, "rem_range": cmp.diff,
            "rem_range_lo": cmp.lo, "rem_range_hi": cmp.hi}


def junk_line(rule: str, cmp) -> dict[str, Any]:
    """The table's line of the junk control against the rule's higher control."""
    verdict = ("junk below the higher control" if separates(cmp) else
               "junk not below the higher control")
    return {"policy": JUNK_RANGE, "n_states": cmp.n, "rule": rule, "mean": np.nan,
            "delta_vs_sft": np.nan, "ci_lo": np.nan, "ci_hi": np.nan, "p_value": cmp.p_value,
            "mde": shown_mde(cmp), "verdict": verdict, "rem_range": cmp.diff,
            "rem_range_lo": cmp.lo, "rem_range_hi": cmp.hi}


def _versus(by_state: pd.DataFrame, policy: str, reference: str, n_boot: int, level: float,
            seed: int) -> dict[str, Any]:
    empty = dict.fromkeys(["delta_vs_sft", "ci_lo", "ci_hi", "p_value", "mde"], np.nan)
    if policy == reference:
        return {**empty, "verdict": "reference"}
    if reference not in by_state or policy not in by_state:
        return {**empty, "verdict": f"no {reference} policy"}
    both = by_state[[policy, reference]].dropna()
    if both.empty:
        return {**empty, "verdict": "no paired states"}
    cmp = paired_difference(both[policy].to_numpy(), both[reference].to_numpy(), n_boot=n_boot,
                            level=level, seed=seed,
                            clusters=list(both.index.get_level_values("dialogue")))
    return {"delta_vs_sft": cmp.diff, "ci_lo": cmp.lo, "ci_hi": cmp.hi, "p_value": cmp.p_value,
            "mde": shown_mde(cmp), "verdict": cmp.verdict()}


def metrics_of(result: HeldoutResult) -> dict[str, Any]:
    """``heldout/<policy>`` (controls included): the ``all`` row (mean, difference to SFT
    and its interval); ``heldout/rem_range``: the REM's range on ``all``, and
    ``rem_range_separates``: whether it separates the real turn from the bad one."""
    t = result.table
    out: dict[str, Any] = {}
    for _, row in t[(t["rule"] == "all") & ~t["policy"].isin([RANGE, JUNK_RANGE])].iterrows():
        out[f"heldout/{row['policy']}"] = {
            "n_states": int(row["n_states"]),
            **{k: _num(row[k]) for k in ("mean", "delta_vs_sft", "ci_lo", "ci_hi", "p_value")}}
    line = t[(t["rule"] == "all") & (t["policy"] == RANGE)]
    if len(line):
        row = line.iloc[0]
        out["heldout/rem_range"] = {"n_states": int(row["n_states"]),
                                    **{k: _num(row[k]) for k in ("rem_range", "rem_range_lo",
                                                                 "rem_range_hi", "p_value")}}
        out["rem_range_separates"] = row["verdict"].startswith("separates")
    ranges = t[(t["policy"] == RANGE) & (t["rule"] != "all")]
    if len(ranges):
        out["rem_range_separating_rules"] = sorted(
            r["rule"] for _, r in ranges.iterrows() if r["verdict"].startswith("separates"))
    return out


def _num(v) -> float | None:
    return None if pd.isna(v) else round(float(v), 3)


# -- records → the tables -----------------------------------------------------------------

def scores_of(turns: Sequence[dict]) -> pd.DataFrame:
    """The long table (policy, dialogue, cut, rule, score) of :func:`score_turns` from the
    turn records (each with its REM score per rule, in the flowchart's order; None: NaN)."""
    rows = [{"policy": r["policy"], "dialogue": r["dialogue"], "cut": r["cut"], "rule": rule,
             "score": np.nan if score is None else float(score)}
            for r in turns for rule, score in r["scores"].items()]
    return pd.DataFrame(rows, columns=["policy", "dialogue", "cut", "rule", "score"])


def table_of(turns: Sequence[dict], n_boot: int, seed: int,
             design: ControlDesign = LEGACY) -> pd.DataFrame:
    """``heldout_compliance`` from the turn records: every policy and control in record
    order (:func:`compliance_table`); a policy whose turns were kept unscored (``scores``
    None: the controls showed no range) is one row with verdict ``NOT_SCORED``; no
    records, an empty table with its columns."""
    if not turns:
        return pd.DataFrame(columns=COLUMNS)
    policies = list(dict.fromkeys(r["policy"] for r in turns))
    unscored = [q for q in policies
                if all(r["scores"] is None for r in turns if r["policy"] == q)]
    table = compliance_table(scores_of([r for r in turns if r["scores"] is not None]),
                             [q for q in policies if q not in unscored], n_boot, seed,
                             design=design)
    extra = [{**dict.fromkeys(COLUMNS, np.nan), "policy": q, "rule": "all",
              "n_states": 0, "verdict": NOT_SCORED}
             for q in unscored]
    if not extra:
        return table
    ranges = table["policy"].isin([RANGE, JUNK_RANGE])
    return pd.concat([table[~ranges], pd.DataFrame(extra, columns=COLUMNS), table[ranges]],
                     ignore_index=True)


def any_rule_separates(scores: pd.DataFrame, design: ControlDesign, n_boot: int,
                       seed: int) -> bool:
    """Whether the REM's range (each rule's control pair, :func:`rem_ranges`) separates
    its two controls on at least one rule (``all`` included) of ``scores``."""
    scores = with_overall(scores)
    rules = list(dict.fromkeys(scores["rule"]))
    wide = scores.set_index(["rule", "dialogue", "cut", "policy"])["score"].unstack("policy")
    return any(separates(cmp)
               for cmp in rem_ranges(wide, rules, n_boot, 0.95, seed, design).values())


# -- the stage's call ----------------------------------------------------------------------

def run_heldout(stage, p, scorer, flowchart, template: PromptTemplate, doctors: Sequence,
                client_of: Callable) -> HeldoutResult:
    """Stage 06's held-out compliance: the eval part's states, every compared policy's
    turns (``template``: the policies' prompt) and the controls' turns with the REM's
    scores (``scorer`` on ``flowchart``'s rules), as records (``states``: one row per
    state, ``turns``: one per policy or control × state) and the table built from them.
    Disabled, or no REM (``simulation.rem_radar`` false): no records, empty tables."""
    hp = p.heldout
    if not hp.enabled or scorer is None:
        reason = "simulation.heldout.enabled is false" if not hp.enabled else "no REM scorer"
        return HeldoutResult(states_table([], None), pd.DataFrame(columns=COLUMNS),
                             note=reason)
    split = load_split(repo_path(stage.params.shared.split))
    dialogues = eval_dialogues(repo_path(hp.dialogues), split)
    states = select_states(dialogues, hp.n_states, hp.states_per_dialogue, stage.seed,
                           hp.history_max_turns, hp.bad_turn_template)
    policies = heldout_doctors(doctors, hp.include_grid)
    rules = list(flowchart.rules)
    design = design_of(hp)
    gen_s, rem_s = estimated_seconds(len(states), len(policies), len(rules), len(design.names))
    print(f"held-out compliance: {len(states)} states of "
          f"{len({s.dialogue for s in states})} eval dialogues × {len(policies)} policies "
          f"+ {len(design.names)} controls; uncached ≈ {gen_s:.0f} s generation + "
          f"{rem_s:.0f} s REM on 2 CPU cores")
    if len(states) < hp.n_states:
        print(f"held-out compliance: only {len(states)} of simulation.heldout.n_states "
              f"{hp.n_states} states (raise states_per_dialogue)")
    turns, records = {}, []
    for d in policies:
        client = client_of(d)
        comps = next_doctor_turns(states, client, template, p.heldout_call(d))
        turns[d.name] = [None if c.error else parse_doctor_answer(c.text) for c in comps]
        # the raw completion where it differs from the turn (absent: the turn is it)
        records += [{"policy": d.name, "model_id": client.model_id, "dialogue": s.dialogue,
                     "cut": s.cut, "turn": t, **({"raw": c.text} if c.text != t else {}),
                     "error": c.error}
                    for s, t, c in zip(states, turns[d.name], comps)]
    controls = control_turns(states, design)
    turns.update(controls)
    records += [{"policy": name, "model_id": "", "dialogue": s.dialogue, "cut": s.cut,
                 "turn": t, "error": None, "control_from": control_source(name, s)}
                for name in controls for s, t in zip(states, controls[name])]
    # controls first: the REM's range on these states decides whether the policies' turns
    # are worth scoring (simulation.heldout.score_policies)
    scores = score_turns(states, controls, scorer, rules)
    scored = list(turns)
    if hp.score_policies == "if_range_separates" and not any_rule_separates(
            scores, design, p.grader.bootstrap_rounds, stage.seed):
        scored = list(controls)
        print("held-out compliance: the REM's range covers 0 on every rule (each rule's "
              "control pair); the policies' turns are kept unscored")
    else:
        scores = pd.concat([scores, score_turns(
            states, {k: v for k, v in turns.items() if k not in controls}, scorer, rules)],
            ignore_index=True)
    per_turn = scores.set_index(["policy", "dialogue", "cut", "rule"])["score"].unstack("rule")
    for r in records:       # the scores in the flowchart's order (the table's row order)
        if r["policy"] not in scored:
            r["scores"] = None
            continue
        row = per_turn.loc[(r["policy"], r["dialogue"], r["cut"])]
        r["scores"] = {rule.id: None if pd.isna(row[rule.id]) else float(row[rule.id])
                       for rule in rules}
    return HeldoutResult(states_table(states, split),
                         table_of(records, p.grader.bootstrap_rounds, stage.seed, design),
                         records, state_rows=state_records(states, split))


def control_turns(states: Sequence[HeldoutState], design: ControlDesign) -> dict[str, list[str]]:
    """Every control's turn per state: the real and the bad one from the state's dialogue,
    the templated ones as written."""
    out = {REAL: [s.real_turn for s in states], BAD: [s.bad_turn for s in states]}
    for name in design.names:
        if name not in out:
            out[name] = [design.turns[name]] * len(states)
    return out


def control_source(name: str, s: HeldoutState) -> str:
    """Where a control's turn came from, for its record."""
    return {REAL: f"turn {s.cut}", BAD: s.bad_turn_from}.get(name, "template")
