"""Value relations by the judge (LLM path), its pure parser, and the +KG combination.

The judge relates one label value to one response value of a shared term and answers
one word: exact, belonging, containment or unmatched (``configs/prompts/imap_relation``).
The paper has the LLM list all pairs of a term in one answer; asking per pair keeps each
answer a single word, which even the embedded 135M model can give in a few tokens, and
makes every judgement independently cacheable. :func:`parse_relation` reads the answer.

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


def combine(kg: Relation | None, judge: Relation | None) -> Relation:
    """+KG: the ontology's relation where it relates the pair, else the judge's."""
    if kg is not None and kg.related:
        return kg
    return judge or Relation.UNMATCHED
