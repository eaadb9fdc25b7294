"""Value relations by the judge (LLM path), its pure parser, and the +KG combination.

The judge relates one label value to one response value of a shared term and answers
one word: exact, belonging, containment or unmatched (``configs/prompts/imap_relation``).
The paper has the LLM list all pairs of a term in one answer; asking per pair keeps each
answer a single word and makes every judgement independently cacheable. Two ways to
read the word (``imap.relation_mode``):

* ``options`` — the probabilities of the four words as the next token after
  ``Relation:`` (one forward pass, local models only; the embedded 135M model does not
  reliably *write* a one-word answer, but its next-token choice is always one of them);
* ``generate`` — a short completion read by :func:`parse_relation` (any backend).

The paper's best variant (+KG) lets the knowledge graph help the LLM decide. Here that
is :func:`combine`: where the ontology finds a relation (exact, belonging or
containment) it is used, otherwise the judge's. The ontology's explicit knowledge wins
because the paper reports the LLM over-uses exact/unmatched (§6.1, Figure 6), while the
judge covers values the ontology cannot link.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from medpref.imap.config import ImapParams
from medpref.imap.extraction import resolve_mode
from medpref.imap.items import ItemImaps
from medpref.imap.ontology import normalise
from medpref.imap.score import Relation
from medpref.llm.client import LLMClient
from medpref.prompts import load_prompt

#: First word(s) of a relation as judges write it → the relation.
_RELATION_WORDS: dict[str, Relation] = {
    "exact": Relation.EXACT, "same": Relation.EXACT, "synonym": Relation.EXACT,
    "belong": Relation.BELONGING, "subset": Relation.BELONGING,
    "contain": Relation.CONTAINMENT, "superset": Relation.CONTAINMENT,
    "unmatch": Relation.UNMATCHED, "no match": Relation.UNMATCHED,
    "not match": Relation.UNMATCHED, "none": Relation.UNMATCHED,
}
_LEAD = re.compile(r"^[^a-z]*(?:relation(?:ship)?\s*(?:is\s*)?[:=\-]?\s*)?[^a-z]*")


def relation_word(text: str) -> Relation | None:
    """The relation a phrase starts with ("Exact match." → exact), or None."""
    t = _LEAD.sub("", text.lower(), count=1)
    for word, rel in _RELATION_WORDS.items():
        if t.startswith(word):
            return rel
    return None


def parse_relation(text: str | None) -> tuple[Relation | None, str | None]:
    """(relation, None) from a judge's one-word answer, or (None, reason). Never raises.

    Only the first non-empty line counts (a small model may go on with a made-up next
    example); it may be prefixed by "Relation:" and markup.
    """
    lines = [line for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return None, "empty completion"
    rel = relation_word(lines[0])
    if rel is None:
        return None, "no relation word (exact/belonging/containment/unmatched)"
    return rel, None


#: Options mode: the answer's next token after :data:`OPTION_PREFIX` (distinct first tokens).
OPTION_PREFIX = "Relation:"
RELATION_OPTIONS: dict[str, Relation] = {" exact": Relation.EXACT,
                                         " belonging": Relation.BELONGING,
                                         " containment": Relation.CONTAINMENT,
                                         " unmatched": Relation.UNMATCHED}


def relation_from_options(probs: dict[str, float]) -> Relation:
    """The most probable option; a tie goes to the higher-priority relation."""
    if set(probs) != set(RELATION_OPTIONS):
        raise ValueError(f"expected probabilities of {sorted(RELATION_OPTIONS)}, "
                         f"got {sorted(probs)}")
    best = max(probs, key=lambda o: (probs[o], RELATION_OPTIONS[o].priority))
    return RELATION_OPTIONS[best]


def combine(kg: Relation | None, judge: Relation | None) -> Relation:
    """+KG: the ontology's relation where it relates the pair, else the judge's."""
    if kg is not None and kg.related:
        return kg
    return judge or Relation.UNMATCHED


PairKey = tuple[str, str, str, str]   # (item id, term, label value, response value)


@dataclass
class RelationJudgement:
    """The judge's answer for one label-response value pair: raw (text or option
    probabilities) and parsed."""

    item_id: str
    term: str
    label_value: str
    response_value: str
    raw: str | None
    probs: dict[str, float] | None
    error: str | None
    relation: Relation | None
    reason: str | None

    def to_record(self) -> dict:
        return {"item_id": self.item_id, "term": self.term, "label_value": self.label_value,
                "response_value": self.response_value, "raw": self.raw, "probs": self.probs,
                "error": self.error, "relation": self.relation.value if self.relation else None,
                "reason": self.reason}


def relation_pairs(imaps: Sequence[ItemImaps]) -> list[PairKey]:
    """Every (item, shared term, label value, response value) to relate."""
    return [(im.item.id, t, lv, rv) for im in imaps for t in im.shared_terms
            for lv in im.label[t] for rv in im.response[t]]


def relate_by_judge(p: ImapParams, client: LLMClient, imaps: Sequence[ItemImaps],
                    seed: int = 0) -> dict[PairKey, RelationJudgement] | None:
    """One judgement per value pair, all in one batch; None when ``judge_relations`` is
    off (the ontology path needs no judge). Same-text pairs are exact without a call.
    In the sampled extraction mode a generated relation is asked ``samples`` times and
    kept when it repeats ``min_agree`` times (the paper's rule for relations too)."""
    if not p.judge_relations:
        return None
    call = p.call("relation")
    template = load_prompt(call.prompt)
    jobs = [k for k in relation_pairs(imaps) if not same_text(k[2], k[3])]
    msgs = [template.render(term=t, label_value=lv, response_value=rv) for _, t, lv, rv in jobs]
    if p.relation_mode == "options":
        scored = client.option_scores(msgs, list(RELATION_OPTIONS), OPTION_PREFIX) if msgs else []
        return {k: RelationJudgement(*k, None, {o: round(v, 6) for o, v in s.probs.items()},
                                     None, relation_from_options(s.probs), None) if s.ok else
                RelationJudgement(*k, None, None, s.error, None, f"model call failed: {s.error}")
                for k, s in zip(jobs, scored)}
    if resolve_mode(p.extraction.mode, client) == "sampled":
        return _sampled_relations(p, client, jobs, msgs, seed)
    comps = client.chat_many(msgs, call, temperature=0.0)
    out = {}
    for key, comp in zip(jobs, comps):
        rel, reason = _parse_comp(comp)
        out[key] = RelationJudgement(*key, comp.text, None, comp.error, rel, reason)
    return out


def _parse_comp(comp) -> tuple[Relation | None, str | None]:
    return parse_relation(comp.text) if comp.ok else (None, f"model call failed: {comp.error}")


def _sampled_relations(p: ImapParams, client: LLMClient, jobs: list[PairKey], msgs: list,
                       seed: int) -> dict[PairKey, RelationJudgement]:
    ep = p.extraction
    samples = [client.chat_many(msgs, p.call("relation"), temperature=ep.temperature,
                                top_p=ep.top_p, seed=seed + k)
               for k in range(ep.samples)]
    out = {}
    for j, key in enumerate(jobs):
        comps = [s[j] for s in samples]
        parsed = [_parse_comp(c)[0] for c in comps]
        votes = Counter(r for r in parsed if r is not None).most_common(1)
        rel = votes[0][0] if votes and votes[0][1] >= ep.min_agree else None
        reason = None if rel else f"no relation in >= {ep.min_agree} of {ep.samples} samples"
        out[key] = RelationJudgement(*key, "\n---\n".join(c.text for c in comps), None,
                                     next((c.error for c in comps if not c.ok), None),
                                     rel, reason)
    return out


def same_text(a: str, b: str) -> bool:
    return bool(normalise(a)) and normalise(a) == normalise(b)
