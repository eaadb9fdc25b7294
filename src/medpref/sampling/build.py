"""Stage 01's run: sample splits, predict trajectories, write the unlabeled set."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from medpref.contracts import Dialogue, UnlabeledItem, read_jsonl
from medpref.data.split import DialogueSplit
from medpref.llm.client import LLMClient
from medpref.params import repo_path
from medpref.prompts import load_prompt
from medpref.sampling.config import SamplingParams
from medpref.sampling.rounds import RoundSettings, Trajectory, extend_trajectories
from medpref.sampling.tables import candidate_records, short_rows
from medpref.sampling.trajectory import (
    ContinuationError,
    Split,
    choose_exemplar,
    continuation_messages,
    make_item,
    parse_continuation,
    sample_splits,
)


def load_source_dialogues(p: SamplingParams, split: DialogueSplit) -> list[Dialogue]:
    """The dialogues to split: the ``train`` part of the embedded corpus (``split``: the
    written split, ``shared.split``), or a real set's own ``source_split`` through its
    adapter. A development or evaluation dialogue never becomes a preference item, so no
    stage 04 pair and no DPO run holds a turn of one."""
    if p.source == "embedded":
        return split.select(read_jsonl(repo_path(p.dialogues), Dialogue), "train")
    from medpref.data import adapters

    loader = {"mts_dialog": adapters.mts_dialogues, "aci_bench": adapters.aci_dialogues}[p.source]
    return loader(split=p.source_split, limit=p.source_limit)


def load_exemplar_pool(p: SamplingParams, split: DialogueSplit) -> list[Dialogue]:
    """The style exemplars the continuation prompt shows: the ``train`` part when the
    pool is the embedded corpus (a dialogue the split does not list is an error there);
    from another file, every dialogue the split does not place in dev or eval."""
    pool = read_jsonl(repo_path(p.exemplar_pool), Dialogue)
    if same_file(p.exemplar_pool, p.dialogues):
        return split.select(pool, "train")
    return [d for d in pool if split.parts.get(d.id, "train") == "train"]


def same_file(a: str, b: str) -> bool:
    return Path(repo_path(a)).resolve() == Path(repo_path(b)).resolve()


@dataclass
class UnlabeledSet:
    items: list[UnlabeledItem]
    rejected: list[dict] = field(default_factory=list)
    prompt_sha: str = ""
    round_records: list[dict] = field(default_factory=list)  # round-by-round raw answers
    short: list[dict] = field(default_factory=list)  # items whose futures fall short
    prompt_shas: dict[str, str] = field(default_factory=dict)


def build_unlabeled(p: SamplingParams, client: LLMClient, seed: int,
                    dialogues: list[Dialogue], pool: list[Dialogue],
                    round_clients: dict[str, LLMClient] | None = None) -> UnlabeledSet:
    """Every split gets a generated candidate, or is recorded as rejected and dropped;
    generated futures shorter than ``future_rounds`` are then continued round by round
    (``round_clients``: the patient and doctor roles; default: ``client`` plays both)."""
    call = p.call("continuation")
    template = load_prompt(call.prompt)
    splits = sample_splits(dialogues, p.n_items, p.future_rounds, p.min_future_rounds, seed)
    pending: dict[int, Split] = dict(enumerate(splits))
    accepted: dict[int, tuple] = {}
    rejected: list[dict] = []
    for attempt in range(p.max_attempts):
        if not pending:
            break
        order = sorted(pending)
        exemplars = {i: choose_exemplar(pending[i], pool, attempt, seed) for i in order}
        messages = [continuation_messages(template, pending[i], exemplars[i], p.future_rounds,
                                          p.exemplar_max_turns, p.history_max_turns)
                    for i in order]
        completions = client.chat_many(messages, call)
        for i, comp in zip(order, completions):
            split = pending[i]
            try:
                if not comp.ok:
                    raise ContinuationError(f"model call failed: {comp.error}")
                cont = parse_continuation(comp.text, p.future_rounds, split.history[-1].text,
                                          truncated=comp.finish_reason == "length",
                                          prefix=call.answer_prefix)
            except ContinuationError as exc:
                rejected.append({"split": i, "dialogue_id": split.dialogue_id,
                                 "turn_index": split.turn_index, "attempt": attempt,
                                 "exemplar_id": exemplars[i].id,
                                 "generator": client.model_id, "prompt_sha": template.sha,
                                 "reason": str(exc), "raw": comp.text})
                continue
            accepted[i] = (cont, {"exemplar_id": exemplars[i].id, "attempt": attempt,
                                  "generator": client.model_id, "prompt_sha": template.sha,
                                  "parse_notes": cont.notes}, exemplars[i])
            del pending[i]
    rounds = complete_futures(p, accepted, splits, round_clients or
                              {"patient": client, "doctor": client}, seed)
    items = [make_item(n + 1, splits[i], *accepted[i][:2])
             for n, i in enumerate(sorted(accepted))]
    short = short_futures(items, p.future_rounds)
    return UnlabeledSet(items, rejected, template.sha, rounds.records, short,
                        {template.name: template.sha, **rounds.prompt_shas})


@dataclass
class CompletedFutures:
    records: list[dict] = field(default_factory=list)
    prompt_shas: dict[str, str] = field(default_factory=dict)


def complete_futures(p: SamplingParams, accepted: dict[int, tuple], splits: list[Split],
                     clients: dict[str, LLMClient], seed: int) -> CompletedFutures:
    """Continue the accepted generated futures to ``future_rounds`` complete rounds (in
    place: each continuation's future and meta are updated)."""
    trajectories = [Trajectory(i, splits[i].history, cont.response, cont.future, exemplar)
                    for i, (cont, _, exemplar) in sorted(accepted.items())]
    out = CompletedFutures()
    if p.rounds.enabled:
        calls = p.round_calls
        prompts = {role: load_prompt(call.prompt) for role, call in calls.items()}
        settings = RoundSettings(rounds=p.future_rounds, calls=calls,
                                 retries=p.rounds.retries,
                                 retry_temperature=p.rounds.retry_temperature,
                                 max_copied_share=p.rounds.max_copied_share,
                                 history_max_turns=p.history_max_turns,
                                 exemplar_max_turns=p.exemplar_max_turns, seed=seed)
        out.records = extend_trajectories(trajectories, clients, prompts, settings).records
        out.prompt_shas = {t.name: t.sha for t in prompts.values()}
    for t in trajectories:
        cont, meta, _ = accepted[t.key]
        cont.future = t.future
        meta.update(one_shot_rounds=t.one_shot_rounds,
                    round_by_round_turns=len(t.future) - 2 * t.one_shot_rounds,
                    round_by_round_failure=t.failed)
    return out


def short_futures(items: list[UnlabeledItem], rounds: int) -> list[dict]:
    """Every candidate with fewer complete future rounds than asked (kept, and reported)."""
    return short_rows(candidate_records(items), rounds)


def metrics(result: UnlabeledSet, n_requested: int, rounds: int | None = None) -> dict:
    dropped = n_requested - len(result.items)
    out = {"items_requested": n_requested, "items_written": len(result.items),
           "items_dropped": dropped, "malformed_continuations": len(result.rejected),
           "yield": round(len(result.items) / max(1, n_requested), 4)}
    if rounds is not None:
        n = max(1, len(result.items))
        short_items = {s["item_id"] for s in result.short}
        generated_short = {s["item_id"] for s in result.short if s["source"] == "generated"}
        out.update(future_rounds_requested=rounds,
                   items_with_full_futures=len(result.items) - len(short_items),
                   generated_full_rounds_share=round(1 - len(generated_short) / n, 4))
    return out
