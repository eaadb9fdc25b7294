"""Held-out process compliance: does a policy follow the PLPF flowchart better than SFT
on dialogues that no preference pair came from? (issue 21, item 2)

A *state* is a real dialogue up to a patient turn: the turns before one of its doctor
turns that answers the patient. Every policy writes the next doctor turn from the same
states, with the prompt the policies trained with and greedy decoding, as in the
next-turn evaluation (:mod:`medpref.simulation.nextturn`); stage 03's REM scores each
state plus that turn on every rule (0-2). Per policy and rule (and ``all``: the mean
over the rules of a state every rule scored): the mean, and the paired difference to SFT
state by state (:func:`medpref.metrics.intervals.paired_difference`): a bootstrap
interval that resamples whole dialogues (the states of one dialogue share its patient and
history), a sign-flip p-value on dialogue totals and the minimum detectable difference.

Held out means: a dialogue stage 01 never split into preference items, so no stage 04
pair and no stage 05 DPO run holds a turn of it. The states are drawn from those
dialogues, seeded, several per dialogue. SFT reads every dialogue file listed in
``training.sft.dialogues`` (the embedded file among them), so ``heldout_states.csv`` says
per state whether its dialogue is in SFT's corpus.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from medpref.contracts import Dialogue, Turn, read_jsonl, write_jsonl
from medpref.llm.types import CallSpec
from medpref.metrics.intervals import paired_difference
from medpref.params import repo_path
from medpref.prompts import PromptTemplate
from medpref.simulation.consult import doctor_messages, parse_doctor_answer
from medpref.simulation.doctors import grid_cell
from medpref.simulation.nextturn import cut_points
from medpref.simulation.tables import shown_mde

REFERENCE = "sft"
COLUMNS = ["policy", "n_states", "rule", "mean", "delta_vs_sft", "ci_lo", "ci_hi", "p_value",
           "mde", "verdict"]
STATE_COLUMNS = ["dialogue", "cut", "history_turns", "in_sft_corpus"]

#: Seconds on 2 CPU cores for the printed estimate, measured in the committed run's
#: ledger (reports/06_simulation/ledger.json): 342 uncached policy turns in 978 s
#: (2.9 s a turn) and 1,908 uncached REM scorings of a state on one rule in 880 s.
GEN_S_PER_TURN = 2.9
REM_S_PER_RULE = 0.46


@dataclass(frozen=True)
class HeldoutState:
    """A held-out dialogue cut before its doctor turn ``cut``: the history the policies
    answer (the last ``history_max_turns`` turns, ending with the patient's)."""

    dialogue: str
    cut: int
    history: tuple[Turn, ...]


@dataclass
class HeldoutResult:
    states: pd.DataFrame
    table: pd.DataFrame
    turns: list[dict[str, Any]] = field(default_factory=list)   # raw answers and REM scores
    note: str = ""


# -- which states --------------------------------------------------------------------------

def sampled_dialogue_ids(params, dialogues_path: str) -> set[str]:
    """Ids of the dialogues stage 01 splits into preference items, when it reads the file
    at ``dialogues_path`` (the same seeded splits it makes); none when it reads another
    source."""
    from medpref.sampling.trajectory import sample_splits

    try:
        sp = params.sampling
    except AttributeError:
        raise ValueError("simulation.heldout needs the params section 'sampling' to know "
                         "which dialogues stage 01 split") from None
    if sp.source != "embedded" or not _same_file(sp.dialogues, dialogues_path):
        return set()
    dialogues = read_jsonl(repo_path(sp.dialogues), Dialogue)
    splits = sample_splits(dialogues, sp.n_items, sp.future_rounds, sp.min_future_rounds,
                           params.shared.seed)
    return {s.dialogue_id for s in splits}


def _same_file(a: str, b: str) -> bool:
    return Path(repo_path(a)).resolve() == Path(repo_path(b)).resolve()


def sft_corpus_has(params, dialogues_path: str) -> bool | None:
    """Whether SFT trains on the file at ``dialogues_path`` (None: no training section)."""
    try:
        files = params.training.sft.dialogues
    except AttributeError:
        return None
    return any(_same_file(f, dialogues_path) for f in files)


def select_states(dialogues: Sequence[Dialogue], excluded: set[str], n_states: int,
                  per_dialogue: int, seed: int, history_max_turns: int) -> list[HeldoutState]:
    """Up to ``n_states`` states from the dialogues not in ``excluded``: the dialogues in a
    seeded order, up to ``per_dialogue`` seeded cuts each (a cut depends only on the seed
    and the dialogue id, so adding dialogues keeps the others' cuts)."""
    pool = sorted((d for d in dialogues if d.id not in excluded), key=lambda d: d.id)
    random.Random(f"{seed}:heldout").shuffle(pool)
    states: list[HeldoutState] = []
    for d in pool:
        cuts = cut_points(d, per_dialogue, random.Random(f"{seed}:heldout:{d.id}"))
        for i in cuts[:n_states - len(states)]:
            states.append(HeldoutState(d.id, i, tuple(d.turns[max(0, i - history_max_turns):i])))
        if len(states) >= n_states:
            break
    return states


def states_table(states: Sequence[HeldoutState], in_sft_corpus: bool | None) -> pd.DataFrame:
    return pd.DataFrame([{"dialogue": s.dialogue, "cut": s.cut, "history_turns": len(s.history),
                          "in_sft_corpus": in_sft_corpus} for s in states], columns=STATE_COLUMNS)


def heldout_doctors(doctors: Sequence, grid_pattern: str, include_grid: bool) -> list:
    """The doctors compared: all of them, less the PLPF Table 3 grid cells unless asked."""
    return [d for d in doctors if include_grid or grid_cell(d.name, grid_pattern) is None]


def estimated_seconds(n_states: int, n_policies: int, n_rules: int) -> tuple[float, float]:
    """(generation, REM) seconds of an uncached run on 2 CPU cores (an upper bound: REM
    calls on states two policies answered alike are made once)."""
    turns = n_states * n_policies
    return turns * GEN_S_PER_TURN, turns * n_rules * REM_S_PER_RULE


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
                     level: float = 0.95, reference: str = REFERENCE) -> pd.DataFrame:
    """Per policy and rule (``all`` first): mean REM score over the states it got one on,
    and the paired difference to ``reference`` over the states both got one on, clustered
    by dialogue."""
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
    return pd.DataFrame(rows, columns=COLUMNS)


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
    """``heldout/<policy>``: the ``all`` row (mean, difference to SFT and its interval)."""
    t = result.table
    out = {}
    for _, row in t[t["rule"] == "all"].iterrows():
        out[f"heldout/{row['policy']}"] = {
            "n_states": int(row["n_states"]),
            **{k: None if pd.isna(row[k]) else round(float(row[k]), 3)
               for k in ("mean", "delta_vs_sft", "ci_lo", "ci_hi", "p_value")}}
    return out


# -- the stage's call ----------------------------------------------------------------------

def run_heldout(stage, p, h, doctors: Sequence, client_of: Callable) -> HeldoutResult:
    """Stage 06's held-out compliance: states, every compared policy's turns, the REM's
    scores and the table; writes ``heldout_compliance``, ``heldout_states`` (reports) and
    ``heldout_turns.jsonl`` (data). Disabled, or no REM (``simulation.rem_radar`` false):
    empty tables, so the declared outputs exist."""
    hp = p.heldout
    if not hp.enabled or h.scorer is None:
        reason = "simulation.heldout.enabled is false" if not hp.enabled else "no REM scorer"
        return write_reports(stage, HeldoutResult(states_table([], None),
                                                  pd.DataFrame(columns=COLUMNS), note=reason))
    excluded = sampled_dialogue_ids(stage.params, hp.dialogues)
    states = select_states(read_jsonl(repo_path(hp.dialogues), Dialogue), excluded,
                           hp.n_states, hp.states_per_dialogue, stage.seed, hp.history_max_turns)
    policies = heldout_doctors(doctors, p.grid_pattern, hp.include_grid)
    rules = list(h.flowchart.rules)
    gen_s, rem_s = estimated_seconds(len(states), len(policies), len(rules))
    print(f"held-out compliance: {len(states)} states of "
          f"{len({s.dialogue for s in states})} dialogues (stage 01 split {len(excluded)}) "
          f"× {len(policies)} policies; uncached ≈ {gen_s:.0f} s generation + "
          f"{rem_s:.0f} s REM on 2 CPU cores")
    if len(states) < hp.n_states:
        print(f"held-out compliance: only {len(states)} of simulation.heldout.n_states "
              f"{hp.n_states} states (raise states_per_dialogue)")
    turns, records = {}, []
    for d in policies:
        client = client_of(d)
        comps = next_doctor_turns(states, client, h.templates[p.doctor_prompt],
                                  p.heldout_call(d))
        turns[d.name] = [None if c.error else parse_doctor_answer(c.text) for c in comps]
        records += [{"policy": d.name, "model_id": client.model_id, "dialogue": s.dialogue,
                     "cut": s.cut, "turn": t, "raw": c.text, "error": c.error}
                    for s, t, c in zip(states, turns[d.name], comps)]
    scores = score_turns(states, turns, h.scorer, rules)
    per_turn = scores.set_index(["policy", "dialogue", "cut", "rule"])["score"].unstack("rule")
    for r in records:
        row = per_turn.loc[(r["policy"], r["dialogue"], r["cut"])]
        r["scores"] = {k: None if pd.isna(v) else float(v) for k, v in row.items()}
    table = compliance_table(scores, [d.name for d in policies], p.grader.bootstrap_rounds,
                             stage.seed)
    result = HeldoutResult(states_table(states, sft_corpus_has(stage.params, hp.dialogues)),
                           table, records)
    return write_reports(stage, result)


def write_reports(stage, result: HeldoutResult) -> HeldoutResult:
    from medpref.reports import write_table

    write_table(result.table, stage.report("heldout_compliance"), floatfmt=".3f")
    write_table(result.states, stage.report("heldout_states"), floatfmt=".0f")
    write_jsonl(stage.data("heldout_turns.jsonl"), result.turns)
    return result
