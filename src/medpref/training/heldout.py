"""Held-out implicit reward of a DPO run, by cross-fitting (beyond the papers).

A DPO policy π gives an answer y to a history x the implicit reward β·(log π(y|x) −
log π_ref(y|x)), π_ref being the SFT policy; a pair's margin is the chosen answer's reward
minus the rejected one's. On the pairs a policy trained on, a positive margin shows memory
as much as learning. Cross-fitting asks it of pairs the policy never saw: the run's pairs
are dealt into ``k`` folds; for each fold, a policy trained with the run's recipe on the
other ``k − 1`` folds scores the held-out fold against the SFT reference. Every pair is
scored once, by a policy that did not train on it. Reported: the held-out accuracy (share
of margins > 0) and mean margin, each with a bootstrap 95 % interval, overall and split
by where the chosen answer came from (``sampled``: the real dialogue's turn; ``generated``),
because a policy can learn the sampled turns' style and nothing else.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from medpref.finetune.hardware import Hardware
from medpref.finetune.recipe import Recipe
from medpref.metrics.intervals import bootstrap_ci

#: the per-pair rows of a cross-fitted run, beside its adapter
HELDOUT_ROWS = "heldout.jsonl"
#: the per-pair columns of reports/05_training/dpo/<run>/heldout.csv
ROW_COLUMNS = ["pair", "fold", "chosen_source", "margin", "correct"]
#: the held-out columns of runs.csv (see ``summarise``)
COLUMNS = ["heldout_pairs", "heldout_acc", "heldout_acc_lo", "heldout_acc_hi",
           "heldout_margin", "heldout_margin_lo", "heldout_margin_hi",
           "heldout_acc_sampled", "heldout_pairs_sampled",
           "heldout_acc_generated", "heldout_pairs_generated"]


def deal_folds(n: int, k: int, seed: int) -> list[int]:
    """The fold (0..k-1) of each of ``n`` pairs: a seeded shuffle dealt round-robin, so
    folds differ in size by at most one."""
    if not 2 <= k <= n:
        raise ValueError(f"cross-fitting needs 2 <= folds <= pairs (folds {k}, pairs {n})")
    order = list(range(n))
    random.Random(seed).shuffle(order)
    folds = [0] * n
    for rank, i in enumerate(order):
        folds[i] = rank % k
    return folds


def completion_logp(model, tok, prompt: list[dict], answer: list[dict]) -> float:
    """log p(answer | prompt): the sum over the answer's tokens, the chat template applied
    as trl applies it (the prompt with the generation prompt, then prompt + answer)."""
    import torch

    head = tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True,
                                   return_dict=True)["input_ids"]
    full = tok.apply_chat_template(prompt + answer, tokenize=True,
                                   return_dict=True)["input_ids"]
    if full[:len(head)] != head:
        raise ValueError("the chat template renders the prompt differently with an answer")
    with torch.no_grad():
        logits = model(torch.tensor([full])).logits[0, :-1].float().log_softmax(-1)
    targets = torch.tensor(full[1:])
    start = len(head) - 1
    return float(logits[start:].gather(1, targets[start:, None]).sum())


def pair_logps(model, tok, examples: Sequence[dict[str, Any]]) -> list[tuple[float, float]]:
    """(log p(chosen), log p(rejected)) of each conversational example."""
    return [(completion_logp(model, tok, ex["prompt"], ex["chosen"]),
             completion_logp(model, tok, ex["prompt"], ex["rejected"])) for ex in examples]


def margins(policy: Sequence[tuple[float, float]], reference: Sequence[tuple[float, float]],
            beta: float) -> list[float]:
    """β·[(log π(c) − log π_ref(c)) − (log π(r) − log π_ref(r))] per pair."""
    return [beta * ((pc - rc) - (pr - rr)) for (pc, pr), (rc, rr) in zip(policy, reference,
                                                                           strict=True)]


def _load(base_path: str | Path, adapter: str | Path, hardware: Hardware):
    from peft import PeftModel

    from medpref.finetune.sft import load_base

    tok, base = load_base(base_path, hardware, device="cpu")
    return tok, PeftModel.from_pretrained(base, str(adapter)).eval()


def crossfit(base_path: str | Path, sft_adapter: str | Path,
             examples: Sequence[dict[str, Any]], sources: Sequence[str | None],
             workdir: str | Path, recipe: Recipe, hardware: Hardware, *, folds: int,
             seed: int) -> list[dict[str, Any]]:
    """With the DPO ``recipe``, one row per pair that fits ``recipe.max_length``: its
    fold, the chosen answer's source and its held-out margin. Fold policies train in
    ``workdir`` (removed after)."""
    from medpref.finetune.sft import drop_too_long
    from medpref.training.dpo import train_dpo

    workdir = Path(workdir)
    tok_ref, ref = _load(base_path, sft_adapter, hardware)
    fits = {id(ex) for ex in drop_too_long(tok_ref, list(examples), recipe.max_length,
                                           ("chosen", "rejected"))[0]}
    kept = [(ex, src) for ex, src in zip(examples, sources, strict=True) if id(ex) in fits]
    assignment = deal_folds(len(kept), folds, seed)
    rows: list[dict[str, Any]] = []
    try:
        for fold in range(folds):
            train = [ex for (ex, _), f in zip(kept, assignment, strict=True) if f != fold]
            test = [(i, ex, src) for i, ((ex, src), f) in enumerate(zip(kept, assignment,
                                                                        strict=True))
                    if f == fold]
            out = workdir / f"fold{fold}"
            train_dpo(base_path, sft_adapter, train, out / "adapter", out / "ckpt", recipe,
                      hardware, seed=seed, eval_pairs=1)
            tok, policy = _load(base_path, out / "adapter", hardware)
            held = [ex for _, ex, _ in test]
            for (i, _, src), m in zip(test, margins(pair_logps(policy, tok, held),
                                                    pair_logps(ref, tok_ref, held), recipe.beta),
                                      strict=True):
                rows.append({"pair": i, "fold": fold, "chosen_source": src or "unknown",
                             "margin": m, "correct": int(m > 0)})
            del policy
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return sorted(rows, key=lambda r: r["pair"])


def summarise(rows: Sequence[dict[str, Any]], n_boot: int = 2000,
              seed: int = 0) -> dict[str, Any]:
    """The ``COLUMNS`` of runs.csv from the per-pair rows (bootstrap 95 % intervals)."""
    acc = bootstrap_ci([r["correct"] for r in rows], n_boot=n_boot, seed=seed)
    margin = bootstrap_ci([r["margin"] for r in rows], n_boot=n_boot, seed=seed)
    out = {"heldout_pairs": len(rows), "heldout_acc": acc.estimate, "heldout_acc_lo": acc.lo,
           "heldout_acc_hi": acc.hi, "heldout_margin": margin.estimate,
           "heldout_margin_lo": margin.lo, "heldout_margin_hi": margin.hi}
    for source in ("sampled", "generated"):
        part = [r["correct"] for r in rows if r["chosen_source"] == source]
        out[f"heldout_acc_{source}"] = sum(part) / len(part) if part else None
        out[f"heldout_pairs_{source}"] = len(part)
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in out.items()}
