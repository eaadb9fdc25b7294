"""imapScore (Eq. 1 of the paper) from the relations between label and response values.

For a term ``t`` the label (reference) imap has values ``V_t^L`` and the response imap
``V_t^R``. Each pair (label value, response value) has one relation:

* **exact** (same meaning, e.g. "incision and drainage" / "surgical drainage"),
* **belonging** (label value ⊂ response value: "penicillin" / "antibiotic therapy"),
* **containment** (label value ⊃ response value: "nephritis" / "glomerulonephritis"),
* **unmatched** (none of these).

When several relations are claimed for one pair (two sources, a cycle in an ontology,
a judge that repeats itself), the best one in the priority order
exact > belonging > containment > unmatched is taken.

    imapScore = Σ_{t ∈ T_L ∩ T_R} [ |{v ∈ V_t^L matched in V_t^R}| / |V_t^L|
                                    + |{v ∈ V_t^R matched in V_t^L}| / |V_t^R| − λ_t ]

A value is *matched* when its best relation to any value of the other side is not
unmatched. The paper prints λ_t as a sum over value pairs of a ratio of indicators,
``Σ I[containment] / I[exact, belonging or containment]``, which admits two readings
(``imapscore.lambda_reading``):

* ``share`` — the share of related pairs that are containment pairs,
  ``#{containment} / #{related}`` (0 when no pair is related): at most 1 per term;
* ``count`` — the sum taken literally, term by term (a 0/0 term counts 0): the number of
  containment pairs, so several specific response values can cost more than 1.

Either way a response more specific than its label is penalised. The score is a sum over
shared terms, so it is not bounded by 2.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Literal

LambdaReading = Literal["share", "count"]


class Relation(str, Enum):
    EXACT = "exact"
    BELONGING = "belonging"
    CONTAINMENT = "containment"
    UNMATCHED = "unmatched"

    @property
    def priority(self) -> int:
        """Higher is a better match: exact 3, belonging 2, containment 1, unmatched 0."""
        return _PRIORITY[self]

    @property
    def related(self) -> bool:
        return self is not Relation.UNMATCHED


_PRIORITY = {Relation.EXACT: 3, Relation.BELONGING: 2, Relation.CONTAINMENT: 1,
             Relation.UNMATCHED: 0}


def best_relation(relations: Iterable[Relation | None]) -> Relation:
    """The highest-priority relation among those given (None entries ignored)."""
    found = [r for r in relations if r is not None]
    return max(found, key=lambda r: r.priority, default=Relation.UNMATCHED)


Matrix = Sequence[Sequence[Relation]]  # matrix[i][j]: label value i vs response value j


@dataclass(frozen=True)
class TermScore:
    term: str
    n_label: int
    n_response: int
    label_matched: int
    response_matched: int
    containment_pairs: int
    related_pairs: int
    lambda_reading: LambdaReading = "share"

    @property
    def label_recall(self) -> float:
        return self.label_matched / self.n_label

    @property
    def response_precision(self) -> float:
        return self.response_matched / self.n_response

    @property
    def penalty(self) -> float:
        """λ_t: containment pairs, as a share of related pairs or as a count."""
        if self.lambda_reading == "count":
            return float(self.containment_pairs)
        return self.containment_pairs / self.related_pairs if self.related_pairs else 0.0

    @property
    def value(self) -> float:
        return self.label_recall + self.response_precision - self.penalty


def score_term(term: str, matrix: Matrix, lambda_reading: LambdaReading = "share"
               ) -> TermScore:
    """One term's contribution to Eq. 1 from its label×response relation matrix."""
    n_label = len(matrix)
    n_response = len(matrix[0]) if n_label else 0
    if n_label == 0 or n_response == 0 or any(len(row) != n_response for row in matrix):
        raise ValueError(f"term '{term}': need a non-empty rectangular relation matrix")
    flat = [r for row in matrix for r in row]
    return TermScore(
        term, n_label, n_response,
        label_matched=sum(best_relation(row).related for row in matrix),
        response_matched=sum(best_relation(col).related for col in zip(*matrix)),
        containment_pairs=sum(r is Relation.CONTAINMENT for r in flat),
        related_pairs=sum(r.related for r in flat), lambda_reading=lambda_reading)


@dataclass(frozen=True)
class ImapScore:
    value: float
    terms: tuple[TermScore, ...]

    @property
    def shared_terms(self) -> int:
        return len(self.terms)


Relate = Callable[[str, str, str], Relation]  # (term, label value, response value)


def relation_matrix(term: str, label_values: Sequence[str], response_values: Sequence[str],
                    relate: Relate) -> list[list[Relation]]:
    return [[relate(term, lv, rv) for rv in response_values] for lv in label_values]


def imap_score(label: Mapping[str, Sequence[str]], response: Mapping[str, Sequence[str]],
               relate: Relate, lambda_reading: LambdaReading = "share") -> ImapScore:
    """Eq. 1 over the terms both imaps inform (terms with no values are left out)."""
    shared = [t for t in label if label[t] and response.get(t)]
    terms = tuple(score_term(t, relation_matrix(t, label[t], response[t], relate),
                             lambda_reading)
                  for t in shared)
    return ImapScore(sum(ts.value for ts in terms), terms)
