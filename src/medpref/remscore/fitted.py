"""REM scorers fitted on the REM data by stage 03: the encoder REM and its baselines.

A fitted mode (``@register_rem_scorer(..., fitted=True)``) says what it reads and how it
learns (a :class:`FitSpec`): a feature set of :mod:`medpref.remscore.features`, and either
the training labels' frequencies (``prior``) or a scikit-learn logistic regression
(multinomial over the scores present), one per rule, or one pooled over every rule when
the rule is not read (``pooled``: the same score for every rule of a state). Each
regression's ``C`` is chosen on the development split (by accuracy, then log-loss, then
the smaller ``C``); without development rows for a rule, by 3-fold cross-validation on
its training rows. The fitted model (:class:`FittedModel`) is a JSON file named after the
scorer in ``rem.fitted.model_dir``, which stages 04 and 06 read by name.

Modes registered here (Table 5 rows, built by the same function as the prompted ones):

* ``majority`` — each rule's training label frequencies (label: the most frequent);
* ``length``   — log(1 + words) of the doctor turn, per rule;
* ``surface``  — question mark, disease word, test word, per rule;
* ``encoder``  — frozen sentence embeddings of the state's parts and structural counts, per
  rule; ``rule_blind: true`` pools the rules (the same REM with the rule removed).

A judgement gives p(0), p(1), p(2) as ``probs``: ``label`` is the argmax (a tie goes to
the lower score) and ``score`` Σ s·p(s) (``state_value: label``: the label).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from medpref.contracts import Turn
from medpref.registry import register_rem_scorer
from medpref.remscore.base import ExpectedJudgement, RuleJudgement
from medpref.remscore.features import FEATURE_SETS, StateFeatures
from medpref.rules import Flowchart, Rule

SCORES = (0, 1, 2)
POOLED = "*"


@dataclass(frozen=True)
class FitSpec:
    """What a fitted mode reads (``features``) and how it learns (``learner``)."""

    features: str
    learner: Literal["prior", "logistic"]
    pooled: bool = False

    def __post_init__(self) -> None:
        if self.features not in FEATURE_SETS:
            raise ValueError(f"unknown feature set '{self.features}' "
                             f"(known: {', '.join(FEATURE_SETS)})")


@dataclass
class Head:
    """One classifier (a rule's, or the pooled one): standardisation, the regression's
    weights over its ``classes`` (none: the prior alone) and how it was chosen."""

    prior: list[float]                      # p(0), p(1), p(2) on its training rows
    n_train: int
    classes: list[int] = field(default_factory=list)
    coef: list[list[float]] = field(default_factory=list)
    intercept: list[float] = field(default_factory=list)
    mean: list[float] = field(default_factory=list)
    scale: list[float] = field(default_factory=list)
    C: float | None = None
    chosen_by: str = "prior"                # prior | dev | cv
    selection: dict[str, float] = field(default_factory=dict)   # accuracy per C tried

    def probs(self, X: np.ndarray) -> np.ndarray:
        """p(0), p(1), p(2) per row of ``X``."""
        if not self.coef:
            return np.tile(np.asarray(self.prior, dtype=float), (len(X), 1))
        z = (X - np.asarray(self.mean)) / np.asarray(self.scale)
        logits = z @ np.asarray(self.coef).T + np.asarray(self.intercept)
        if len(self.classes) == 2:           # sklearn's binary form: one logit for class 1
            p1 = 1.0 / (1.0 + np.exp(-logits[:, 0]))
            part = np.stack([1.0 - p1, p1], axis=1)
        else:
            logits = logits - logits.max(axis=1, keepdims=True)
            part = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        out = np.zeros((len(X), len(SCORES)))
        out[:, self.classes] = part
        return out


@dataclass
class FittedModel:
    """A fitted scorer: its name and mode, what it reads, and one head per rule (or
    :data:`POOLED`)."""

    name: str
    mode: str
    spec: FitSpec
    heads: dict[str, Head]
    fit_s: float = 0.0

    def head(self, rule_id: str) -> Head:
        key = POOLED if self.spec.pooled else rule_id
        if key not in self.heads:
            raise KeyError(f"fitted REM '{self.name}' has no classifier for rule '{rule_id}' "
                           f"(it was fitted on rules {sorted(self.heads)})")
        return self.heads[key]

    def to_json(self) -> str:
        # no fit time: the file is a data product later stages read, and a timing would
        # make them stale after every refit (the time is in stage 03's records)
        return json.dumps({"name": self.name, "mode": self.mode, "spec": asdict(self.spec),
                           "heads": {k: asdict(h) for k, h in self.heads.items()}})

    @classmethod
    def from_json(cls, text: str) -> FittedModel:
        data = json.loads(text)
        return cls(data["name"], data["mode"], FitSpec(**data["spec"]),
                   {k: Head(**h) for k, h in data["heads"].items()}, data.get("fit_s", 0.0))

    @property
    def content_id(self) -> str:
        from medpref.outputs import content_key

        # fit_s: None keeps the ids the models had when the file held their fit time
        return content_key(json.loads(self.to_json()) | {"fit_s": None})

    def summary(self) -> dict[str, Any]:
        """What a record keeps of the fit: per head, C, how it was chosen, train rows."""
        return {k: {"C": h.C, "chosen_by": h.chosen_by, "n_train": h.n_train,
                    "selection": h.selection} for k, h in self.heads.items()}


def model_path(model_dir: str | Path, name: str) -> Path:
    return Path(model_dir) / f"{name}.json"


def save_model(model: FittedModel, model_dir: str | Path) -> Path:
    from medpref.contracts import atomic_write_text

    path = model_path(model_dir, model.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, model.to_json() + "\n")
    return path


def load_model(model_dir: str | Path, name: str) -> FittedModel:
    path = model_path(model_dir, name)
    if not path.exists():
        raise FileNotFoundError(f"REM scorer '{name}': no fitted model at {path} "
                                "(stage 03 fits it: dvc repro rem)")
    return FittedModel.from_json(path.read_text(encoding="utf-8"))


# -- fitting ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Item:
    """One labelled (state, rule) of the REM data."""

    rule: str
    history: list[Turn]
    score: int


def _prior(y: Sequence[int]) -> list[float]:
    counts = np.bincount(np.asarray(y, dtype=int), minlength=len(SCORES)).astype(float)
    return (counts / counts.sum()).tolist() if counts.sum() else [1 / 3] * 3


def _logistic(Z: np.ndarray, y: np.ndarray, C: float, seed: int):
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=C, max_iter=3000, random_state=seed).fit(Z, y)


def _dev_choice(Z, y, Z_dev, y_dev, c_grid, seed) -> tuple[float, dict[str, float]]:
    """C with the best development accuracy (then log-loss, then the smaller C)."""
    from sklearn.metrics import log_loss

    tried = {}
    for C in c_grid:
        clf = _logistic(Z, y, C, seed)
        proba = clf.predict_proba(Z_dev)
        acc = float(np.mean(clf.classes_[proba.argmax(axis=1)] == y_dev))
        loss = log_loss(y_dev, proba, labels=clf.classes_) if set(y_dev) <= set(clf.classes_) \
            else math.inf
        tried[C] = (acc, loss)
    best = min(c_grid, key=lambda C: (-tried[C][0], tried[C][1], C))
    return best, {f"{C:g}": round(a, 4) for C, (a, _) in tried.items()}


def _cv_choice(Z, y, c_grid, seed) -> tuple[float, dict[str, float]]:
    """C by 3-fold cross-validated accuracy on the training rows (no development rows)."""
    from sklearn.model_selection import KFold, cross_val_score

    folds = KFold(n_splits=min(3, len(y)), shuffle=True, random_state=seed)
    scores = {}
    for C in c_grid:
        from sklearn.linear_model import LogisticRegression

        scores[C] = float(np.mean(cross_val_score(
            LogisticRegression(C=C, max_iter=3000, random_state=seed), Z, y, cv=folds,
            error_score=0.0)))
    best = min(c_grid, key=lambda C: (-scores[C], C))
    return best, {f"{C:g}": round(a, 4) for C, a in scores.items()}


def fit_head(X: np.ndarray, y: Sequence[int], X_dev: np.ndarray, y_dev: Sequence[int],
             learner: str, c_grid: Sequence[float], seed: int) -> Head:
    """One head: the prior, or a logistic regression on standardised features with C
    chosen on the development rows (cross-validation when there are none)."""
    y = np.asarray(y, dtype=int)
    head = Head(prior=_prior(y), n_train=len(y))
    if learner == "prior" or len(set(y.tolist())) < 2 or X.shape[1] == 0:
        return head
    mean, scale = X.mean(axis=0), X.std(axis=0)
    scale[scale == 0] = 1.0
    Z = (X - mean) / scale
    if len(y_dev):
        C, tried = _dev_choice(Z, y, (X_dev - mean) / scale, np.asarray(y_dev), c_grid, seed)
        how = "dev"
    else:
        C, tried = _cv_choice(Z, y, c_grid, seed)
        how = "cv"
    clf = _logistic(Z, y, C, seed)
    head.classes = [int(c) for c in clf.classes_]
    head.coef, head.intercept = clf.coef_.tolist(), clf.intercept_.tolist()
    head.mean, head.scale = mean.tolist(), scale.tolist()
    head.C, head.chosen_by, head.selection = float(C), how, tried
    return head


def fit_model(name: str, mode: str, spec: FitSpec, train: Sequence[Item], dev: Sequence[Item],
              features: StateFeatures, c_grid: Sequence[float], seed: int) -> FittedModel:
    """Fit one scorer on the training items (C on the development items)."""
    import time

    t0 = time.perf_counter()
    X = features.matrix(spec.features, [it.history for it in train])
    X_dev = features.matrix(spec.features, [it.history for it in dev])
    groups = [POOLED] if spec.pooled else list(dict.fromkeys(it.rule for it in train))
    heads = {}
    for g in groups:
        tr = [i for i, it in enumerate(train) if spec.pooled or it.rule == g]
        dv = [i for i, it in enumerate(dev) if spec.pooled or it.rule == g]
        heads[g] = fit_head(X[tr], [train[i].score for i in tr], X_dev[dv],
                            [dev[i].score for i in dv], spec.learner, c_grid, seed)
    return FittedModel(name, mode, spec, heads, round(time.perf_counter() - t0, 2))


# -- scoring ----------------------------------------------------------------------------------
def fitted_judgement(rule_id: str, p: np.ndarray, state_value: str = "expected"):
    """A judgement from p(0), p(1), p(2): label = argmax (ties: the lower score)."""
    probs = {str(s): float(p[s]) for s in SCORES}
    j = ExpectedJudgement(rule=rule_id, score=float(np.dot(SCORES, p)), probs=probs, mass=1.0)
    if state_value == "label":
        j.score = float(j.label)
    j.samples = [j.score]
    return j


class FittedScorer:
    """A fitted REM: ``score_states(states, rules)`` like every scorer, no model call."""

    prompt = None

    def __init__(self, model: FittedModel, features: StateFeatures, flowchart: Flowchart,
                 state_value: str = "expected"):
        self.model, self.features, self.flowchart = model, features, flowchart
        self.state_value = state_value
        self.name = model.name
        self.model_id = f"fitted:{model.mode}:{model.content_id}"   # hashed once

    def score_states(self, states: Sequence[Sequence[Turn]],
                     rules: Sequence[Rule] | None = None) -> list[dict[str, RuleJudgement]]:
        rules = list(rules) if rules is not None else list(self.flowchart.rules)
        X = self.features.matrix(self.model.spec.features, states)
        out: list[dict[str, RuleJudgement]] = [{} for _ in states]
        for rule in rules:
            P = self.model.head(rule.id).probs(X)
            for i, p in enumerate(P):
                out[i][rule.id] = fitted_judgement(rule.id, p, self.state_value)
        return out


# -- the modes ----------------------------------------------------------------------------------
def _check_fitted(settings) -> None:
    prompted = {"k": settings.k != 1, "n_examples": settings.n_examples != 0,
                "detail": settings.detail is not None, "comment": settings.comment is not None}
    given = [k for k, v in prompted.items() if v]
    if given:
        raise ValueError(f"a fitted scorer (mode {settings.mode}) reads no prompt: leave "
                         f"{', '.join(given)} unset")


def _check_baseline(settings) -> None:
    _check_fitted(settings)
    if settings.rule_blind:
        raise ValueError(f"rule_blind applies to mode encoder only, not {settings.mode}")


def _describe(text: str):
    def describe(settings, adapter_card=None) -> str:
        blind = getattr(settings, "rule_blind", False)
        value = "v = label" if settings.state_value == "label" else "v = Σ s·p(s)"
        return (text.format(heads="one pooled over the rules (rule removed)" if blind
                            else "one per rule") + f"; label = argmax p(s); {value}")
    return describe


@register_rem_scorer("majority", fitted=True, check=_check_baseline,
                     describe=_describe("baseline: each rule's training label frequencies"))
def majority_mode(settings) -> FitSpec:
    """Each rule's most frequent training label."""
    return FitSpec("none", "prior")


@register_rem_scorer("length", fitted=True, check=_check_baseline,
                     describe=_describe("baseline: log word count of the doctor turn, "
                                        "logistic, {heads}"))
def length_mode(settings) -> FitSpec:
    """A fit on the doctor turn's word count alone."""
    return FitSpec("length", "logistic")


@register_rem_scorer("surface", fitted=True, check=_check_baseline,
                     describe=_describe("baseline: question mark, disease word, test word, "
                                        "logistic, {heads}"))
def surface_mode(settings) -> FitSpec:
    """A fit on three surface flags of the doctor turn."""
    return FitSpec("surface", "logistic")


@register_rem_scorer("encoder", fitted=True, check=_check_fitted,
                     describe=_describe("frozen sentence embeddings (turn, last patient turn, "
                                        "earlier doctor turns) + counts, logistic, {heads}"))
def encoder_mode(settings) -> FitSpec:
    """Frozen sentence embeddings of the state's parts, a classifier per rule."""
    return FitSpec("encoder", "logistic", pooled=bool(settings.rule_blind))
