"""A joint reader for the REM, tried on the development set only (issue 40): the embedded
sentence encoder (all-MiniLM-L6-v2) fine-tuned as a cross-encoder that reads the history's
last turns and the doctor turn as one sequence ("[history tail] [SEP] [doctor turn]"),
mean-pooled, with a 3-way head per rule (a state's rules without a label are left out of
the loss). It trains on stage 03's training rows and is scored on ``rem.select_on``'s set
(``turns_dev``) after each half epoch; the independent draws are never read.

    python scripts/rem_cross_encoder.py [--epochs 2] [--turn-only] [--balanced] [--out DIR]
        [--turns-file FILE ...] [--dev-only]
    python scripts/rem_cross_encoder.py --score DIR [DIR ...]

It prints the development exact agreement at each evaluation, overall, on rule A, and on
rule A over the development turns a model wrote (the policies' turns and the generated
ones: ``MODEL_WRITTEN``; the human turns are all gold 2 on rule A, which a length rule
gets right), the half epoch that last figure chooses (ties: the overall figure, then the
earlier), and the training seconds; ``--out`` keeps every
evaluation's class probabilities per (state, rule) and the run's settings (JSON lines and
JSON). ``--turn-only`` is the ablation: the doctor turn alone, no history. ``--balanced``
weighs each rule's labels by the inverse of their training frequency (a rule's rare
score counts as much as its common one: without it, rule A's 1 is lost after an epoch).
``--turns-file`` adds labelled-turn files beside ``rem.turns.files`` (their ``train`` rows
train, their ``dev`` rows join the development set; ``--dev-only``: only the latter, the
control run for the same development set); ``scripts/rem_sp_turns.py`` draws one. Each run
also fits two baselines on the same training states and keeps their development
probabilities beside its own: each rule's majority label and a per-rule logistic fit on the
doctor turn's log word count (the ``length`` scorer's feature). ``--score`` reads runs' output
folders again, takes the gold from the labelled-turn files as they are now (a development
row labelled after the run is scored), and prints rule A on the model-written development
turns at the chosen step against both baselines, with a paired bootstrap interval by state.
Not a stage: a
scorer chosen here becomes a stage-03 scorer (``rem.scorers``) before any blind draw
scores it.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from medpref.rem.constructions import RULE_IDS

ROLE_NAMES = {"patient": "Patient", "doctor": "Doctor"}
N_LABELS = 3
IGNORE = -100


@dataclass
class Settings:
    """The cross-encoder's input and training settings (the defaults: issue 40's run)."""

    history_turns: int = 4
    max_tokens: int = 256
    turn_tokens: int = 128
    epochs: int = 2
    batch: int = 16
    lr_encoder: float = 5e-5
    lr_head: float = 1e-3
    evals_per_epoch: int = 2
    turn_only: bool = False
    balanced: bool = False      # per-rule label weights: inverse training frequency
    seed: int = 0


@dataclass
class State:
    """One history (ending with the doctor turn judged) and its gold score per rule."""

    key: str
    history: list
    gold: dict[str, int] = field(default_factory=dict)
    ids: list[str] = field(default_factory=list)    # the rows' ids ("tt-0001:A", …)

    @property
    def turn_id(self) -> str:
        """The labelled turn's id (``tt-0001``), or the first row's id for a constructed
        state."""
        return self.ids[0].split(":")[0]


#: the labelled-turn files' source kinds of a turn a model wrote (rem.turns: the policies'
#: turns, and the generated candidates among the real-turn rows); ``ri-`` rows are turns
#: of the trained policies too
MODEL_WRITTEN = frozenset({"model_train", "generated", "model_heldout", "model_sp"})


def model_written_ids(paths) -> frozenset[str]:
    """The row-id stems (``tt-0001``) of every labelled turn a model wrote, in the
    labelled-turn files ``paths`` (``rem.turns.files`` and ``rem.independent``)."""
    out = set()
    for path in paths:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if (row.get("source") or {}).get("kind") in MODEL_WRITTEN:
                out.add(row["id"])
    return frozenset(out)


def is_model_written(state: State, stems: frozenset[str]) -> bool:
    return any(i.split(":")[0] in stems for i in state.ids)


def states_of(rows) -> list[State]:
    """Rows of (history, rule, score) grouped by their history, in first-seen order."""
    by: dict[str, State] = {}
    for row in rows:
        key = json.dumps([[t.role, t.text] for t in row.history], ensure_ascii=False)
        st = by.setdefault(key, State(key, list(row.history)))
        st.gold[row.rule] = row.score
        st.ids.append(row.id)
    return list(by.values())


def encode(tok, history, s: Settings) -> tuple[list[int], list[int]]:
    """Token ids and segment ids of "[CLS] history tail [SEP] doctor turn [SEP]": the
    turn cut to ``turn_tokens``, the history (its last ``history_turns`` turns) cut from
    the left to what ``max_tokens`` leaves."""
    turn = tok(history[-1].text, add_special_tokens=False)["input_ids"][:s.turn_tokens]
    before = history[:-1][-s.history_turns:]
    text = " ".join(f"{ROLE_NAMES.get(t.role, t.role)}: {t.text}" for t in before)
    hist = [] if s.turn_only else tok(text or "(start of consultation)",
                                      add_special_tokens=False)["input_ids"]
    room = s.max_tokens - 3 - len(turn)
    hist = hist[-room:] if room > 0 else []
    ids = [tok.cls_token_id, *hist, tok.sep_token_id, *turn, tok.sep_token_id]
    return ids, [0] * (len(hist) + 2) + [1] * (len(turn) + 1)


def examples(tok, states: list[State], s: Settings) -> list[tuple]:
    return [(*encode(tok, st.history, s), [st.gold.get(r, IGNORE) for r in RULE_IDS])
            for st in states]


def collate(batch):
    import torch

    width = max(len(b[0]) for b in batch)
    ids = torch.zeros(len(batch), width, dtype=torch.long)
    seg, mask = torch.zeros_like(ids), torch.zeros_like(ids)
    for i, (a, t, _) in enumerate(batch):
        ids[i, :len(a)], seg[i, :len(t)], mask[i, :len(a)] = (
            torch.tensor(a), torch.tensor(t), 1)
    return ids, seg, mask, torch.tensor([b[2] for b in batch])


def build_model(encoder_dir: str):
    import torch
    from transformers import AutoModel

    class CrossEncoderREM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = AutoModel.from_pretrained(encoder_dir)
            self.drop = torch.nn.Dropout(0.1)
            self.head = torch.nn.Linear(self.encoder.config.hidden_size,
                                        len(RULE_IDS) * N_LABELS)

        def forward(self, ids, seg, mask):
            h = self.encoder(input_ids=ids, token_type_ids=seg,
                             attention_mask=mask).last_hidden_state
            m = mask.unsqueeze(-1).float()
            pooled = (h * m).sum(1) / m.sum(1)   # mean pooling, as the sentence encoder
            return self.head(self.drop(pooled)).view(-1, len(RULE_IDS), N_LABELS)

    return CrossEncoderREM()


def batches(data: list, size: int, rng: random.Random | None) -> list[list[int]]:
    """Batches of similar length: shuffled in chunks of fifty batches (``rng``), or in
    length order for prediction."""
    order = list(range(len(data)))
    if rng is None:
        order.sort(key=lambda j: len(data[j][0]))
        return [order[i:i + size] for i in range(0, len(order), size)]
    rng.shuffle(order)
    chunks = [sorted(order[i:i + size * 50], key=lambda j: len(data[j][0]))
              for i in range(0, len(order), size * 50)]
    out = [c[i:i + size] for c in chunks for i in range(0, len(c), size)]
    rng.shuffle(out)
    return out


def predict(model, data: list) -> np.ndarray:
    """Class probabilities, (examples, rules, labels)."""
    import torch

    model.eval()
    probs = np.zeros((len(data), len(RULE_IDS), N_LABELS))
    with torch.no_grad():
        for b in batches(data, 64, None):
            ids, seg, mask, _ = collate([data[i] for i in b])
            probs[b] = torch.softmax(model(ids, seg, mask), -1).numpy()
    model.train()
    return probs


def exact(probs: np.ndarray, states: list[State], rules=RULE_IDS, only=None) -> float:
    """Exact agreement (%) of the argmax with the gold over the states' labelled rules
    (``only``: the indices of the states counted; None: all)."""
    keep = range(len(states)) if only is None else only
    hits = [probs[i, RULE_IDS.index(r)].argmax() == y for i in keep
            for r, y in states[i].gold.items() if r in rules]
    return 100.0 * float(np.mean(hits)) if hits else float("nan")


def label_weights(data: list) -> np.ndarray:
    """(rules, labels) weights: per rule, n / (labels × count of the label) over that rule's
    labelled training examples (scikit-learn's "balanced" weights; a label never seen
    weighs 0)."""
    y = np.array([ex[2] for ex in data])
    w = np.zeros((len(RULE_IDS), N_LABELS))
    for r in range(len(RULE_IDS)):
        seen = y[:, r][y[:, r] != IGNORE]
        counts = np.bincount(seen, minlength=N_LABELS)
        w[r] = np.where(counts > 0, len(seen) / (N_LABELS * np.maximum(counts, 1)), 0.0)
    return w


def weighted_loss(logits, y, weights):
    """Cross-entropy over the labelled (example, rule) cells, each weighted by its rule's
    label weight (``weights``: a (rules, labels) tensor), normalised by the weights."""
    import torch

    valid = y != IGNORE
    safe = torch.where(valid, y, torch.zeros_like(y))
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, N_LABELS), safe.reshape(-1),
                                           reduction="none").view_as(y)
    rules = torch.arange(y.shape[1]).expand_as(y)
    w = weights[rules, safe] * valid
    return (ce * w).sum() / w.sum().clamp_min(1e-9)


def words(state: State) -> int:
    return len(state.history[-1].text.split())


def baselines(train_states: list[State], dev_states: list[State], c_grid: list[float],
              seed: int) -> dict[str, np.ndarray]:
    """Development probabilities (states, rules, labels) of two baselines fitted on the
    training states as stage 03 fits them (``medpref.remscore.fitted``): ``majority``
    (each rule's label frequencies) and ``length`` (per rule, a logistic fit on the doctor
    turn's log word count, C chosen from ``c_grid`` on the development states)."""
    from types import SimpleNamespace

    from medpref.remscore.features import StateFeatures
    from medpref.remscore.fitted import fit_model, length_mode, majority_mode

    def items(states):
        return [SimpleNamespace(rule=r, history=st.history, score=y)
                for st in states for r, y in st.gold.items()]

    features = StateFeatures()
    out = {}
    for name, spec in (("majority", majority_mode(None)), ("length", length_mode(None))):
        model = fit_model(name, name, spec, items(train_states), items(dev_states), features,
                          c_grid, seed)
        probs = np.full((len(dev_states), len(RULE_IDS), N_LABELS), 1.0 / N_LABELS)
        X = features.matrix(spec.features, [st.history for st in dev_states])
        for r, rule in enumerate(RULE_IDS):
            if rule in model.heads or spec.pooled:
                probs[:, r] = model.head(rule).probs(X)
        out[name] = probs
    return out


def train(model, data: list, dev: list, dev_states: list[State], s: Settings,
          log=print, model_idx=None) -> dict[int, np.ndarray]:
    """Fine-tune ``model``; returns the development probabilities at each evaluation
    (keyed by step)."""
    import torch

    rng = random.Random(s.seed)
    torch.manual_seed(s.seed)
    opt = torch.optim.AdamW([{"params": model.encoder.parameters(), "lr": s.lr_encoder},
                             {"params": model.head.parameters(), "lr": s.lr_head}],
                            weight_decay=0.01)
    per_epoch = math.ceil(len(data) / s.batch)
    total = per_epoch * s.epochs
    warm = max(1, int(0.06 * total))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda k: min((k + 1) / warm, max(0.0, (total - k) / max(1, total - warm))))
    weights = torch.tensor(label_weights(data) if s.balanced
                           else np.ones((len(RULE_IDS), N_LABELS)), dtype=torch.float32)
    evals = {round(per_epoch * (e + f / s.evals_per_epoch)) for e in range(s.epochs)
             for f in range(1, s.evals_per_epoch + 1)}
    out, step, t0 = {}, 0, time.perf_counter()
    model.train()
    for _ in range(s.epochs):
        for b in batches(data, s.batch, rng):
            ids, seg, mask, y = collate([data[i] for i in b])
            loss = weighted_loss(model(ids, seg, mask), y, weights)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            step += 1
            if step in evals:
                out[step] = predict(model, dev)
                log(f"step {step}/{total} (epoch {step / per_epoch:.2f}): development exact "
                    f"{exact(out[step], dev_states):.1f} %, rule A "
                    f"{exact(out[step], dev_states, ('A',)):.1f} %, rule A on model-written "
                    f"turns {exact(out[step], dev_states, ('A',), model_idx):.1f} % "
                    f"({time.perf_counter() - t0:.0f} s)")
    return out


def gold_of(paths) -> dict[tuple[str, str], int]:
    """(turn id, rule) → labeller ``l1``'s score, over the labelled-turn files ``paths``."""
    out = {}
    for path in paths:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            for rule, y in row["labels"]["l1"].items():
                out[row["id"], rule] = y
    return out


def paired_interval(a: np.ndarray, b: np.ndarray, rounds: int = 2000, seed: int = 0
                    ) -> tuple[float, float, float]:
    """Mean of a − b (per-state hits, in points) and its 95 % percentile bootstrap
    interval, states resampled."""
    d = 100.0 * (np.asarray(a, float) - np.asarray(b, float))
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), (rounds, len(d)))].mean(1)
    return float(d.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def score(folder: Path, label_files, rule: str = "A") -> dict:
    """One run's chosen step against its baselines on ``rule`` over the model-written
    development turns, with the gold read now from ``label_files`` (the run's own
    labelled-turn files and the independent test)."""
    run = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    files = [*label_files, *run.get("turns_files", [])]
    gold, stems = gold_of(files), model_written_ids(files)
    probs: dict[tuple[str, int], dict[str, list]] = {}
    for line in (folder / "development_probabilities.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["rule"] == rule:
            probs.setdefault((row["step"], row["turn"]), {})["p"] = row["p"]
    base = {}
    for line in (folder / "baseline_probabilities.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["rule"] == rule:
            base[row["scorer"], row["turn"]] = row["p"]
    turns = sorted({t for (_, t) in probs if t in stems and (t, rule) in gold})
    y = np.array([gold[t, rule] for t in turns])
    hits = {k: np.array([np.argmax(probs[k, t]["p"]) for t in turns]) == y
            for k in sorted({k for k, _ in probs})}
    chosen = max(hits, key=lambda k: (hits[k].mean(), -k))
    out = {"folder": str(folder), "n": len(turns), "gold": np.bincount(y, minlength=3).tolist(),
           "by_step": {k: round(100 * v.mean(), 1) for k, v in hits.items()},
           "chosen_step": chosen, "chosen": round(100 * hits[chosen].mean(), 1),
           "run_chosen_step": run["chosen_step"],
           "predicted": np.bincount([np.argmax(probs[chosen, t]["p"]) for t in turns],
                                    minlength=3).tolist()}
    for name in ("majority", "length"):
        b = np.array([np.argmax(base[name, t]) for t in turns]) == y
        out[name] = round(100 * b.mean(), 1)
        for label, k in (("chosen", chosen), ("run_chosen", run["chosen_step"])):
            if k in hits:
                out[f"{label}_minus_{name}"] = [round(v, 1) for v in paired_interval(hits[k], b)]
    return out


def main(argv: list[str] | None = None) -> dict:
    import torch
    from transformers import AutoTokenizer

    from medpref.params import load_params, repo_path
    from medpref.rem.build_rem import load_inputs

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=Settings.epochs)
    ap.add_argument("--turn-only", action="store_true")
    ap.add_argument("--balanced", action="store_true")
    ap.add_argument("--encoder", default="models/all-minilm-l6-v2",
                    help="the sentence-transformers folder fine-tuned (not "
                         "rem.fitted.embedding_model, which may name a packaged encoder)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--turns-file", action="append", default=[], metavar="FILE",
                    help="a labelled-turn file added to rem.turns.files (repeatable)")
    ap.add_argument("--dev-only", action="store_true",
                    help="the --turns-file rows join the development set only")
    ap.add_argument("--score", type=Path, nargs="+", metavar="DIR",
                    help="score the runs in these output folders again (no training)")
    args = ap.parse_args(argv)
    params = load_params()
    p = params.rem
    label_files = [repo_path(f) for f in [*p.turns.files, p.independent]]
    if args.score:
        results = [score(folder, label_files) for folder in args.score]
        for r in results:
            print(json.dumps(r))
        return {"scores": results}
    s = Settings(epochs=args.epochs, turn_only=args.turn_only, balanced=args.balanced)
    torch.set_num_threads(2)
    extra = [str(Path(f).resolve()) for f in args.turns_file]
    if extra:
        p = p.model_copy(update={"turns": p.turns.model_copy(
            update={"files": [*p.turns.files, *extra]})})
    inputs = load_inputs(p, repo_path(params.shared.split))
    extra_ids = frozenset(json.loads(line)["id"] for f in extra
                          for line in Path(f).read_text(encoding="utf-8").splitlines())
    train_states = [st for st in states_of(inputs.split("train"))
                    if not (args.dev_only and st.turn_id in extra_ids)]
    dev_states = states_of(inputs.split(p.select_split))
    stems = model_written_ids([*label_files, *extra])
    model_idx = [i for i, st in enumerate(dev_states) if is_model_written(st, stems)]
    encoder = str(repo_path(args.encoder))
    tok = AutoTokenizer.from_pretrained(encoder)
    print(f"{len(train_states)} training states, {len(dev_states)} development states "
          f"({p.select_split}; {len(model_idx)} of them model-written)", flush=True)
    t0 = time.perf_counter()
    found = train(build_model(encoder), examples(tok, train_states, s),
                  examples(tok, dev_states, s), dev_states, s,
                  log=lambda m: print(m, flush=True), model_idx=model_idx)
    seconds = time.perf_counter() - t0
    chosen = max(found, key=lambda k: (exact(found[k], dev_states, ("A",), model_idx),
                                       exact(found[k], dev_states), -k))
    result = {"settings": vars(s), "seconds": round(seconds, 1), "chosen_step": chosen,
              "chosen_by": "rule A on the model-written development turns",
              "turns_files": extra, "dev_only": args.dev_only,
              "training_states": len(train_states),
              "model_written_states": len(model_idx),
              "development": {k: {"exact": exact(v, dev_states),
                                  "A": exact(v, dev_states, ("A",)),
                                  "A_model_written": exact(v, dev_states, ("A",), model_idx)}
                              for k, v in found.items()}}
    print(f"chosen on {p.select_split}: step {chosen}; {seconds:.0f} s")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "run.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
        with open(args.out / "development_probabilities.jsonl", "w", encoding="utf-8") as fh:
            for k, v in found.items():
                for i, st in enumerate(dev_states):
                    for r, y in st.gold.items():
                        fh.write(json.dumps({"step": k, "state": i, "turn": st.turn_id,
                                             "rule": r, "gold": y,
                                             "p": v[i, RULE_IDS.index(r)].tolist()}) + "\n")
        with open(args.out / "baseline_probabilities.jsonl", "w", encoding="utf-8") as fh:
            for name, v in baselines(train_states, dev_states, p.fitted.c_grid,
                                     params.shared.seed).items():
                for i, st in enumerate(dev_states):
                    for r in st.gold:
                        fh.write(json.dumps({"scorer": name, "turn": st.turn_id, "rule": r,
                                             "p": v[i, RULE_IDS.index(r)].tolist()}) + "\n")
    return result


if __name__ == "__main__":
    main()
