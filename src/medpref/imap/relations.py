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

from medpref.imap.score import Relation

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
