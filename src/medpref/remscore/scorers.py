"""Three REM scorers with one interface (:class:`medpref.remscore.base.RuleScorer`), each
a builder registered by mode (``@register_rem_scorer``, :data:`medpref.registry.REM_SCORERS`;
``rem.scorers.<name>.mode`` names one):

* ``sampled``  — the in-context judge of the follow-up paper: each (state, rule) is judged
  ``k`` times with sampling (seeds ``seed, seed+1, ...``) and the parsed scores are averaged
  (PLPF Eq. 2). Works through any backend.
* ``expected`` — one forward pass: the probabilities p(0), p(1), p(2) of the score token
  give Σ s·p(s). Deterministic and far cheaper; needs a backend with ``option_probs``
  (``hf``, or an OpenAI-compatible server that returns top log-probs). By default the score
  is read directly after ``Score:`` with score-first in-context examples (no comment is
  generated: generating one costs as much as a sample, which would cap the speed-up near
  k); ``comment=True`` first writes the comment greedily and then reads the score token
  after it.
* ``finetuned`` — a LoRA-trained REM (stage 03's adapter, used through a client built
  with ``llm.role("rem", adapter=path)``): no in-context examples, the short rule
  statement, a greedy comment and then the expected score token, as it was trained.

Every scorer returns, for each state, ``{rule_id: RuleJudgement}``; ``score`` is None when
no usable judgement was obtained (unparsable answers and failed calls are counted in
``unparsable``, never read as 0). ``comments`` keeps the raw answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from medpref.contracts import Turn
from medpref.llm import CallSpec, LLMClient
from medpref.prompts import PromptTemplate, load_prompt
from medpref.registry import REM_SCORERS, register_rem_scorer
from medpref.remscore.base import ExpectedJudgement, RuleJudgement
from medpref.remscore.features import StateFeatures
from medpref.remscore.fitted import FittedScorer, load_model
from medpref.remscore.task import (
    SCORE_OPTIONS,
    SCORE_PREFIX,
    AnswerOrder,
    Example,
    RuleDetail,
    build_messages,
    parse_judgement,
    select_examples,
)
from medpref.rules import Flowchart, Rule

StateValue = Literal["expected", "label"]
STATE_VALUES: tuple[str, ...] = ("expected", "label")


class PromptedScorer:
    """Shared part: which prompt, rule detail, answer order and examples to use."""

    name = "prompted"

    def __init__(self, client: LLMClient, flowchart: Flowchart, examples: Sequence[Example],
                 n_examples: int, prompt: PromptTemplate, detail: RuleDetail,
                 order: AnswerOrder, call: CallSpec):
        unknown = sorted({ex.rule for ex in examples} - set(flowchart.ids))
        if unknown:
            raise ValueError(f"in-context examples name rules not in the flowchart: {unknown}")
        self.client = client
        self.flowchart = flowchart
        self.examples = list(examples)
        self.n_examples = n_examples
        self.prompt = prompt
        self.detail = detail
        self.order = order
        self.call = call  # a written answer: its budget and its start ("Comment:")

    @property
    def model_id(self) -> str:
        """The model this scorer reads (its client's)."""
        return self.client.model_id

    def messages_for(self, state: Sequence[Turn], rule: Rule) -> list[dict[str, str]]:
        shots = select_examples(self.examples, rule.id, self.n_examples)
        return build_messages(self.prompt, rule, state, shots, self.detail, self.order)

    def _rules(self, rules: Sequence[Rule] | None) -> list[Rule]:
        return list(rules) if rules is not None else list(self.flowchart.rules)

    def _jobs(self, states, rules) -> list[tuple[int, Rule, list[dict[str, str]]]]:
        return [(i, r, self.messages_for(s, r)) for i, s in enumerate(states) for r in rules]


class SampledScorer(PromptedScorer):
    """k sampled judgements per (state, rule), averaged over the parsable ones (Eq. 2)."""

    name = "sampled"

    def __init__(self, *args, k: int, seed: int, temperature: float, **kwargs):
        super().__init__(*args, **kwargs)
        if k < 1 or temperature <= 0:
            raise ValueError("sampled scoring needs k >= 1 and temperature > 0")
        self.k, self.seed, self.temperature = k, seed, temperature

    def score_states(self, states: Sequence[Sequence[Turn]],
                     rules: Sequence[Rule] | None = None) -> list[dict[str, RuleJudgement]]:
        rules = self._rules(rules)
        jobs = self._jobs(states, rules)
        requests = [self.client.request(msgs, self.call, temperature=self.temperature,
                                        seed=self.seed + j)
                    for _, _, msgs in jobs for j in range(self.k)]
        answers = self.client.complete(requests)
        start = self.call.answer_prefix
        out: list[dict[str, RuleJudgement]] = [{} for _ in states]
        for n, (i, rule, _) in enumerate(jobs):
            comps = answers[n * self.k:(n + 1) * self.k]
            out[i][rule.id] = judgement_from_samples(
                rule.id, [None if c.error else f"{start} {c.text.strip()}" for c in comps])
        return out


def judgement_from_samples(rule_id: str, raws: Sequence[str | None]) -> RuleJudgement:
    """Average the parsable scores of raw answers; None (failed call) and unparsable
    answers are counted, and an all-unusable set gives score None."""
    samples: list[float | None] = []
    for raw in raws:
        parsed = parse_judgement(raw) if raw is not None else None
        samples.append(float(parsed.score) if parsed and parsed.score is not None else None)
    usable = [s for s in samples if s is not None]
    return RuleJudgement(rule=rule_id, score=sum(usable) / len(usable) if usable else None,
                         samples=samples, comments=[r or "" for r in raws],
                         unparsable=len(samples) - len(usable))


class ExpectedScorer(PromptedScorer):
    """Σ s·p(s) of the score token, optionally after a greedily written comment."""

    name = "expected"

    def __init__(self, *args, comment: bool, state_value: StateValue = "expected", **kwargs):
        super().__init__(*args, **kwargs)
        if state_value not in STATE_VALUES:
            raise ValueError(f"state_value must be one of {STATE_VALUES}, got '{state_value}'")
        self.comment = comment
        self.state_value = state_value

    def score_states(self, states: Sequence[Sequence[Turn]],
                     rules: Sequence[Rule] | None = None) -> list[dict[str, RuleJudgement]]:
        rules = self._rules(rules)
        jobs = self._jobs(states, rules)
        prompts = [msgs for _, _, msgs in jobs]
        comments: list[str | None] = [None] * len(jobs)
        if self.comment:
            comps = self.client.chat_many(prompts, self.call, temperature=0.0,
                                          stop=("Score:", "score:"))
            # cut at a score the model may write itself (a backend may ignore `stop`)
            comments = [None if c.error else parse_judgement(c.text).comment for c in comps]
        ok = [n for n, c in enumerate(comments) if c is not None or not self.comment]
        prefixes = [f"{self.call.answer_prefix} {comments[n]}\n{SCORE_PREFIX}" if self.comment
                    else SCORE_PREFIX for n in ok]
        scored = self.client.option_scores([prompts[n] for n in ok], SCORE_OPTIONS, prefixes)
        by_job = dict(zip(ok, scored))
        out: list[dict[str, RuleJudgement]] = [{} for _ in states]
        for n, (i, rule, _) in enumerate(jobs):
            out[i][rule.id] = expected_judgement(rule.id, by_job.get(n), comments[n],
                                                 self.state_value)
        return out


def expected_judgement(rule_id: str, scores, comment: str | None,
                       state_value: StateValue = "expected") -> ExpectedJudgement:
    """A judgement from option probabilities; ``None`` scores (the comment call failed)
    or zero option mass (a remote answer never reached the score) give an unusable one.

    ``state_value`` is what ``score`` (the v of Eq. 2-3) holds: ``expected`` — Σ s·p(s);
    ``label`` — the most probable score, i.e. the score the REM writes when decoded
    greedily (Eq. 2 with k = 1)."""
    if scores is None or scores.mass <= 0:  # failed comment call / no option was read
        return ExpectedJudgement(rule=rule_id, score=None, samples=[None], unparsable=1,
                                 mass=None if scores is None else scores.mass)
    judgement = ExpectedJudgement(rule=rule_id, score=scores.expected(), samples=[],
                                  comments=[comment] if comment is not None else [],
                                  probs=dict(scores.probs), mass=scores.mass)
    if state_value == "label":
        judgement.score = float(judgement.label)
    judgement.samples = [judgement.score]
    return judgement


def finetuned_settings(adapter_dir) -> dict[str, object]:
    """``comment`` and ``detail`` for a fine-tuned REM, from the task card stage 03 saved
    with the adapter; an adapter without a card gets PLPF's format (comment first, short
    rule statement)."""
    from medpref.finetune.sft import read_task_card

    card = read_task_card(adapter_dir)
    return {"comment": card.get("answer_order", "comment_first") == "comment_first",
            "detail": card.get("rule_detail", "short")}


# -- the modes: one registered builder each -------------------------------------------------
# A builder gets the client, the rules, the in-context examples and the loaded prompt, and
# every setting of build_scorer as a keyword (each takes what it uses); it returns a scorer.

def _shots(settings) -> str:
    shots = f"{settings.n_examples}-shot" if settings.n_examples else "zero-shot"
    return f"in-context ({shots}, {settings.detail or 'full'} rule)"


def _value_text(settings) -> str:
    return "v = label" if settings.state_value == "label" else "v = Σ s·p(s)"


def _describe_sampled(settings, adapter_card: dict | None = None) -> str:
    return (f"{_shots(settings)}, k={settings.k} samples at T={settings.temperature:g}; "
            "label = rounded mean")


def _describe_expected(settings, adapter_card: dict | None = None) -> str:
    return (f"{_shots(settings)}, one pass"
            + (" after a greedy comment" if settings.comment else "")
            + "; label = argmax p(s); " + _value_text(settings))


def _describe_finetuned(settings, adapter_card: dict | None = None) -> str:
    card = adapter_card or {}
    order = card.get("answer_order", "comment_first")
    return (f"LoRA REM, zero-shot, {card.get('rule_detail', 'short')} rule, "
            + ("greedy comment, then" if order == "comment_first" else "score first, one pass;")
            + " label = argmax p(s); " + _value_text(settings))


def _one_pass(settings) -> None:
    if settings.k != 1:
        raise ValueError(f"k applies to sampled scorers only (mode {settings.mode})")


def _check_sampled(settings) -> None:
    if settings.state_value != "expected":
        raise ValueError("a sampled scorer's v is the mean of its k samples: "
                         "leave state_value 'expected'")


def _check_finetuned(settings) -> None:
    if settings.n_examples or settings.detail or settings.comment is not None:
        raise ValueError("a finetuned scorer reads its adapter's task card: leave "
                         "n_examples 0 and detail/comment null")
    _one_pass(settings)


@register_rem_scorer("sampled", describe=_describe_sampled, check=_check_sampled)
def sampled_scorer(client: LLMClient, flowchart: Flowchart, examples: Sequence[Example],
                   template: PromptTemplate, *, call: CallSpec, k: int, seed: int,
                   n_examples: int, temperature: float, detail: RuleDetail | None,
                   **_: Any) -> PromptedScorer:
    """In-context judge, k samples averaged (any backend)."""
    return SampledScorer(client, flowchart, examples, n_examples, template, detail or "full",
                         "comment_first", call, k=k, seed=seed, temperature=temperature)


@register_rem_scorer("expected", describe=_describe_expected, check=_one_pass, options=True)
def expected_scorer(client: LLMClient, flowchart: Flowchart, examples: Sequence[Example],
                    template: PromptTemplate, *, call: CallSpec, n_examples: int,
                    comment: bool | None, detail: RuleDetail | None,
                    state_value: StateValue, **_: Any) -> PromptedScorer:
    """In-context judge, Σ s·p(s) from one forward pass (no comment unless asked)."""
    with_comment = bool(comment)
    return ExpectedScorer(client, flowchart, examples, n_examples, template, detail or "full",
                          "comment_first" if with_comment else "score_first", call,
                          comment=with_comment, state_value=state_value)


@register_rem_scorer("finetuned", adapter=True, options=True, describe=_describe_finetuned,
                     check=_check_finetuned)
def finetuned_scorer(client: LLMClient, flowchart: Flowchart, examples: Sequence[Example],
                     template: PromptTemplate, *, call: CallSpec, comment: bool | None,
                     detail: RuleDetail | None, state_value: StateValue,
                     **_: Any) -> PromptedScorer:
    """The LoRA REM (a client with the adapter): no examples, short rule, greedy comment."""
    with_comment = True if comment is None else comment
    scorer = ExpectedScorer(client, flowchart, [], 0, template, detail or "short",
                            "comment_first" if with_comment else "score_first", call,
                            comment=with_comment, state_value=state_value)
    scorer.name = "finetuned"
    return scorer


def build_scorer(mode: str, client: LLMClient, flowchart: Flowchart,
                 icl_examples: Sequence[Example], k: int = 5, seed: int = 0, *,
                 call: CallSpec, n_examples: int = 5, temperature: float = 0.7,
                 comment: bool | None = None, detail: RuleDetail | None = None,
                 state_value: StateValue = "expected") -> PromptedScorer:
    """A REM scorer by mode; all three offer ``score_states(states, rules)``.

    Args:
        mode: ``"sampled"`` (in-context judge, k samples averaged, any backend),
            ``"expected"`` (in-context judge, Σ s·p(s) from one forward pass; hf, or an
            OpenAI-compatible server with log-probs),
            ``"finetuned"`` (LoRA REM: pass a client with the adapter,
            ``llm.role("rem", adapter="models/rem-lora")``; ``icl_examples`` are ignored).
        client: the LLMClient that plays the REM (cache, ledger and batching come with it).
        flowchart: the rules (``medpref.rules.load_rules``); ``rules=None`` in
            ``score_states`` means all of them.
        icl_examples: annotated examples (``RemAnnotation``); up to ``n_examples`` per rule
            are shown, covering every score first.
        k, seed: samples per judgement and the first sampling seed (``sampled`` only).
        call: the REM's call (``rem.calls.score``): its
            prompt (a name under configs/prompts), and the token budget and start
            ("Comment:") of a sampled answer or of a greedy comment.
        temperature: sampling temperature.
        comment: write a greedy comment before reading the score token. Defaults: False
            for ``expected`` (one pass, score-first examples), True for ``finetuned``.
        detail: ``"full"`` rule with criteria and notes (default for in-context modes) or
            ``"short"`` statement only (default for ``finetuned``, as it was trained).
        state_value: for the probability modes, what a judgement's ``score`` holds:
            Σ s·p(s) (``"expected"``) or the most probable score (``"label"``, the score a
            greedy REM writes). ``sampled`` always averages its samples.

    A state is a list of turns ending with a doctor turn. ``score`` in each judgement is
    in [0, 2] or None (unusable); see :class:`RuleJudgement`. A mode is a builder
    registered in :data:`medpref.registry.REM_SCORERS` (an unknown one is an error naming
    the known modes).
    """
    builder = REM_SCORERS.get(mode).build
    return builder(client, flowchart, icl_examples, load_prompt(call.prompt), call=call,
                   k=k, seed=seed, n_examples=n_examples, temperature=temperature,
                   comment=comment, detail=detail, state_value=state_value)


def scorer_from_settings(name: str, settings, llm, rem, flowchart: Flowchart,
                         seed: int, features=None):
    """The REM scorer named ``name`` in ``rem.scorers``: the one builder stages 03 and 04
    share, so the scorer that annotates is exactly a row of Table 5.

    ``settings`` is a :class:`medpref.rem.config.RemScorerSettings`, ``rem`` the ``rem``
    params section (prompt, role, in-context examples, adapter folder), ``llm`` the
    stage's :class:`medpref.llm.LLMSession`. A ``finetuned`` scorer reads stage 03's
    adapter the way its task card says it was trained; a fitted scorer (the encoder REM,
    the baselines) reads its model from ``rem.fitted.model_dir`` and embeds with
    ``features`` (default: :func:`state_features` of ``rem``; pass one to share its cache).
    """
    from medpref.contracts import RemAnnotation, read_jsonl
    from medpref.params import repo_path

    if REM_SCORERS.get(settings.mode).fitted:
        model = load_model(repo_path(rem.fitted.model_dir), name)
        return FittedScorer(model, features or state_features(rem), flowchart,
                            settings.state_value)
    call = rem.call("score")
    if REM_SCORERS.get(settings.mode).adapter:   # the LoRA REM, read as its task card says
        adapter = repo_path(rem.train.adapter_dir)
        if not adapter.exists():
            raise FileNotFoundError(f"REM scorer '{name}': no adapter at {adapter} "
                                    f"(stage 03 trains it: dvc repro rem)")
        scorer = build_scorer(settings.mode, llm.role(call.role, adapter=rem.train.adapter_dir),
                              flowchart, [], seed=seed, call=call,
                              state_value=settings.state_value, **finetuned_settings(adapter))
    else:
        examples = (read_jsonl(repo_path(rem.icl_examples), RemAnnotation)
                    if settings.n_examples else [])
        scorer = build_scorer(settings.mode, llm.role(call.role), flowchart, examples,
                              settings.k, seed, call=call,
                              n_examples=settings.n_examples,
                              temperature=settings.temperature, comment=settings.comment,
                              detail=settings.detail, state_value=settings.state_value)
    scorer.name = name
    return scorer


def state_features(rem) -> StateFeatures:
    """What the fitted scorers read, as ``rem.fitted`` says: its sentence encoder (loaded
    when first used) and the surface word lists of its lexicon."""
    from medpref.params import repo_path
    from medpref.remscore.features import WordLists

    f = rem.fitted
    loaded: dict[str, Any] = {}

    def encode(texts):
        if "encode" not in loaded:
            from medpref.embedding import encoder_for

            loaded["encode"] = encoder_for(f.embedding_model)
        return loaded["encode"](texts)

    return StateFeatures(encode, lambda: WordLists.from_lexicon(
        repo_path(f.lexicon), f.disease_types, f.test_types))


def describe_settings(settings, adapter_card: dict | None = None) -> str:
    """One line on how a scorer reads the model (Table 5's ``method`` column): its mode's
    ``describe`` (:class:`medpref.registry.RemMode`)."""
    return REM_SCORERS.get(settings.mode).method(settings.mode, settings, adapter_card)
