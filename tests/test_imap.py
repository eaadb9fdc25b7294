"""Stage 05 (imapScore): Eq. 1 and λ by hand, relation priority, the parsers' golden
answers (incl. malformed lines), the lexicon reader, the baselines, the correlations,
and the whole pipeline with a scripted judge."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest

from medpref import REPO_ROOT
from medpref.contracts import ContractError
from medpref.imap import extraction as ex
from medpref.imap import stage as ev
from medpref.imap.config import ImapParams
from medpref.imap.correlation import correlations, metric_order, table2
from medpref.imap.ontology import ConceptLinker, Lexicon, OntologyMatcher
from medpref.imap.relations import (
    RELATION_OPTIONS,
    combine,
    parse_relation,
    relation_from_options,
)
from medpref.imap.score import Relation, best_relation, imap_score, score_term
from medpref.imap.scoring import score_items
from medpref.imap.structure import (
    ANSWER_COMPONENTS,
    QUESTION_COMPONENTS,
    ImapPair,
    parse_imap,
    values_by_term,
)
from medpref.imap.textmetrics import ngram_scores, text_metrics
from medpref.metrics.human import rank_correlations
from medpref.params import ParamsError, parse_params

E, B, C, U = (Relation.EXACT, Relation.BELONGING, Relation.CONTAINMENT, Relation.UNMATCHED)
LEXICON = REPO_ROOT / "data" / "embedded" / "lexicon"


# ------------------------------------------------------------------ Eq. 1 by hand
def test_imapscore_and_lambda_on_a_hand_computed_example():
    # diagnosis: label {nephritis, hypertension}, response {glomerulonephritis}
    #   nephritis ⊃ glomerulonephritis (containment), hypertension unmatched
    #   label 1/2 + response 1/1 - λ (1 containment / 1 related pair = 1)  = 0.5
    # treatment: label {penicillin, surgical drainage},
    #            response {antibiotic therapy, incision and drainage, bed rest}
    #   penicillin ⊂ antibiotic therapy (belonging), surgical = incision drainage (exact)
    #   label 2/2 + response 2/3 - λ (0 / 2) = 5/3
    # department: label only; follow-up: response only -> not in T_L ∩ T_R
    # imapScore = 0.5 + 5/3 = 13/6
    table = {("nephritis", "glomerulonephritis"): C,
             ("penicillin", "antibiotic therapy"): B,
             ("surgical drainage", "incision and drainage"): E}
    label = {"diagnosis": ["nephritis", "hypertension"],
             "treatment": ["penicillin", "surgical drainage"], "department": ["nephrology"]}
    response = {"diagnosis": ["glomerulonephritis"], "follow-up": ["in two weeks"],
                "treatment": ["antibiotic therapy", "incision and drainage", "bed rest"]}
    result = imap_score(label, response, lambda t, lv, rv: table.get((lv, rv), U))
    by_term = {ts.term: ts for ts in result.terms}
    assert set(by_term) == {"diagnosis", "treatment"}
    d, t = by_term["diagnosis"], by_term["treatment"]
    assert (d.label_recall, d.response_precision, d.penalty) == (0.5, 1.0, 1.0)
    assert d.value == pytest.approx(0.5)
    assert (t.label_recall, t.response_precision, t.penalty) == (1.0, pytest.approx(2 / 3), 0.0)
    assert result.value == pytest.approx(13 / 6)


def test_lambda_is_the_share_of_related_pairs_that_are_containment():
    # 2 label x 2 response: E, C / C, U  -> related 3, containment 2 -> λ = 2/3
    ts = score_term("t", [[E, C], [C, U]])
    assert ts.penalty == pytest.approx(2 / 3)
    assert ts.value == pytest.approx(1 + 1 - 2 / 3)
    assert score_term("t", [[U, U]]).value == 0.0     # nothing related: no penalty, no credit
    with pytest.raises(ValueError, match="rectangular"):
        score_term("t", [[E], [E, U]])


def test_lambda_readings_share_and_count_on_a_hand_example():
    # label [nephritis, kidney disease] x response [glomerulonephritis, IgA nephropathy]:
    # nephritis ⊃ both (C, C); kidney disease ⊃ both (C, C). Related 4, containment 4.
    # share: λ = 4/4 = 1 -> 1 + 1 - 1 = 1; count (the printed sum read literally): λ = 4
    # -> 1 + 1 - 4 = -2.
    m = [[C, C], [C, C]]
    assert score_term("t", m, "share").penalty == 1.0
    assert score_term("t", m, "share").value == pytest.approx(1.0)
    assert score_term("t", m, "count").penalty == 4.0
    assert score_term("t", m, "count").value == pytest.approx(-2.0)
    # one containment among three related pairs: 1/3 vs 1
    m = [[E, C], [U, E]]
    assert score_term("t", m, "share").penalty == pytest.approx(1 / 3)
    assert score_term("t", m, "count").penalty == 1.0
    label, response = {"t": ["a", "b"]}, {"t": ["x", "y"]}
    table = {("a", "x"): E, ("a", "y"): C, ("b", "y"): E}
    relate = lambda t, lv, rv: table.get((lv, rv), U)   # noqa: E731
    assert imap_score(label, response, relate, "count").value == pytest.approx(1.0)
    assert imap_score(label, response, relate, "share").value == pytest.approx(5 / 3)


def test_imapscore_through_the_embedded_lexicon():
    # medicine: analgesic ⊃ acetaminophen (C), penicillin ⊂ antibiotics (B), bed rest unlinked
    #   label 2/2 + response 2/3 - λ (1/2) = 7/6
    # diagnosis: high blood pressure = hypertension (synonyms: E) -> 1 + 1 - 0 = 2
    matcher = OntologyMatcher(ConceptLinker(Lexicon.from_rrf(LEXICON)), max_hops=3)
    label = {"medicine": ["analgesic", "penicillin"], "diagnosis": ["high blood pressure"]}
    response = {"medicine": ["acetaminophen", "antibiotics", "bed rest"],
                "diagnosis": ["hypertension"]}
    result = imap_score(label, response, lambda t, lv, rv: matcher.relate(t, lv, rv) or U)
    assert result.value == pytest.approx(2 + 7 / 6)


# ------------------------------------------------------------------ relation priority
def test_relation_priority_exact_belonging_containment_unmatched():
    assert [r.priority for r in (E, B, C, U)] == [3, 2, 1, 0]
    assert best_relation([U, C, B]) is B
    assert best_relation([C, U, None]) is C
    assert best_relation([B, E, C]) is E
    assert best_relation([]) is U
    assert best_relation([None]) is U


def _tiny_lexicon() -> Lexicon:
    # A and B are each other's parent (a cycle); C is a synonym string of A and of B's child
    lex = Lexicon()
    lex.strings = {"alpha": {"A"}, "beta": {"B"}, "gamma": {"G"}, "both": {"A", "G"}}
    lex.names = {"A": "alpha", "B": "beta", "G": "gamma"}
    lex.parents = {"A": {"B"}, "B": {"A"}, "G": {"B"}}
    return lex


def test_ontology_relation_takes_the_best_relation():
    matcher = OntologyMatcher(ConceptLinker(_tiny_lexicon()), max_hops=3)
    # alpha below beta AND above beta (cycle): belonging wins over containment
    assert matcher.relate("t", "alpha", "beta") is B
    # "both" shares concept A with alpha (exact) though G is below B... exact wins
    assert matcher.relate("t", "both", "alpha") is E
    assert matcher.relate("t", "beta", "gamma") is C          # label above response
    assert matcher.relate("t", "gamma", "beta") is B          # label below response
    assert matcher.relate("t", "alpha", "unknown thing") is None
    assert matcher.relate("t", "Unknown thing!", "unknown  thing") is E   # same text


def test_combine_prefers_the_ontologys_relation_then_the_judge():
    assert combine(C, E) is C          # the KG relates the pair: its relation is used
    assert combine(U, E) is E          # KG linked both but found nothing: the judge decides
    assert combine(None, B) is B
    assert combine(None, None) is U


# ------------------------------------------------------------------ imap parser
TABLE5 = """Query-disease-?
Query-treatment-?
Constraint-gender-male
Constraint-age-28
Constraint-symptom-redness and pain"""


def _pairs(parsed):
    return [(p.component, p.term, p.value) for p in parsed.pairs]


def test_parse_table5_lines():
    parsed = parse_imap(TABLE5, QUESTION_COMPONENTS)
    assert _pairs(parsed) == [("Query", "disease", "?"), ("Query", "treatment", "?"),
                              ("Constraint", "gender", "male"), ("Constraint", "age", "28"),
                              ("Constraint", "symptom", "redness and pain")]
    assert parsed.malformed == [] and not parsed.none


def test_parse_several_pairs_on_one_line_as_printed_in_table5():
    text = ("Query-side effects-? Constraint-age-30 Constraint-substance ingested-phenol "
            "Constraint-action-vomited Constraint-action-had a lot of saltwater")
    assert _pairs(parse_imap(text, QUESTION_COMPONENTS)) == [
        ("Query", "side effects", "?"), ("Constraint", "age", "30"),
        ("Constraint", "substance ingested", "phenol"), ("Constraint", "action", "vomited"),
        ("Constraint", "action", "had a lot of saltwater")]


def test_parse_table6_inform_and_values_with_hyphens():
    text = ("Inform-diagnosis-oral stomatitis with pharyngitis\n"
            "1. Inform-Dose-500-1000 mg every 4-6 hours.\n"
            "- **Inform**-diagnosis - pharyngitis")
    assert _pairs(parse_imap(text, ANSWER_COMPONENTS)) == [
        ("Inform", "diagnosis", "oral stomatitis with pharyngitis"),
        ("Inform", "dose", "500-1000 mg every 4-6 hours"),
        ("Inform", "diagnosis", "pharyngitis")]


def test_parse_inform_none_and_empty():
    for text in ("Inform-None", "Inform-diagnosis-None."):
        parsed = parse_imap(text, ANSWER_COMPONENTS)
        assert parsed.none and parsed.pairs == [] and parsed.malformed == []
    for empty in ("", "   \n", None):
        parsed = parse_imap(empty, ANSWER_COMPONENTS)
        assert parsed.pairs == [] and parsed.notes == ["empty completion"]


MALFORMED = [
    ("The answer is pneumonia.", "no 'Query-', 'Constraint-' or 'Inform-' marker"),
    ("Inform-treatment-", "no value"),
    ("Inform-treatment", "no value"),
    ("Inform-diagnosis-?", "placeholder value '?' in Inform"),
    ("Inform--aspirin", "empty term"),
    ("Query-disease-?", "unexpected component Query"),
]


@pytest.mark.parametrize("line,reason", MALFORMED)
def test_parse_malformed_answer_lines(line, reason):
    parsed = parse_imap(f"Inform-diagnosis-flu\n{line}", ANSWER_COMPONENTS)
    assert _pairs(parsed) == [("Inform", "diagnosis", "flu")]
    assert [m["reason"] for m in parsed.malformed] == [reason]


def test_parse_tolerates_colon_repeats_and_drops_a_cut_last_pair():
    parsed = parse_imap("Inform-diagnosis: flu\nInform-diagnosis-flu\nInform-advice-rest",
                        ANSWER_COMPONENTS)
    assert _pairs(parsed) == [("Inform", "diagnosis", "flu"), ("Inform", "advice", "rest")]
    assert "read ':' as the term-value separator" in parsed.notes
    assert "dropped repeated pairs" in parsed.notes
    cut = parse_imap("Inform-diagnosis-flu\nInform-advice-drink plen", ANSWER_COMPONENTS,
                     truncated=True)
    assert _pairs(cut) == [("Inform", "diagnosis", "flu")]
    # cut inside trailing chatter, not inside a pair: every pair is complete
    chatter = parse_imap("Inform-diagnosis-flu\nThe answer is that the pat", ANSWER_COMPONENTS,
                         truncated=True)
    assert _pairs(chatter) == [("Inform", "diagnosis", "flu")] and len(chatter.malformed) == 1
    assert "dropped the last pair, cut by the token limit" not in chatter.notes
    # the cut pair is the last item of the last line, even with several on the line
    inline = parse_imap("Inform-a-x Inform-b-y", ANSWER_COMPONENTS, truncated=True)
    assert _pairs(inline) == [("Inform", "a", "x")]
    assert parse_imap("Query-disease", QUESTION_COMPONENTS).pairs == [
        ImapPair("Query", "disease", "?")]


def test_parse_keeps_complete_pairs_when_the_cut_is_not_inside_one():
    # the judge's real tails (stage 07's recorded extractions): a repeated pair, then a bare marker,
    # then the token limit. The cut item is malformed or a repeat; no kept pair is cut.
    repeat = parse_imap("Inform-diagnosis-flu\nInform-treatment-rest\nInform-treatment-rest",
                        ANSWER_COMPONENTS, truncated=True)
    assert _pairs(repeat) == [("Inform", "diagnosis", "flu"), ("Inform", "treatment", "rest")]
    bare = parse_imap("Inform-diagnosis-flu\nInform-treatment-rest\nInform-", ANSWER_COMPONENTS,
                      truncated=True)
    assert _pairs(bare) == [("Inform", "diagnosis", "flu"), ("Inform", "treatment", "rest")]
    assert "dropped the last pair, cut by the token limit" not in bare.notes


def test_parse_reads_allowed_components_from_a_one_shot_iterable():
    # ``allowed`` is any iterable: a generator must serve every line, not just the first
    text = "Query-diagnosis-?\nConstraint-age-30\nConstraint-symptom-cough"
    parsed = parse_imap(text, (c for c in QUESTION_COMPONENTS))
    assert _pairs(parsed) == _pairs(parse_imap(text, QUESTION_COMPONENTS)) == [
        ("Query", "diagnosis", "?"), ("Constraint", "age", "30"),
        ("Constraint", "symptom", "cough")]
    assert not parsed.malformed


def test_parse_stops_where_the_model_echoes_the_prompt():
    raw = ("Query-diagnosis-?\nConstraint-age-45\n\nExample question:\nCan I take aspirin?\n"
           "imap:\nQuery-drug interaction-?")
    parsed = parse_imap(raw, QUESTION_COMPONENTS, truncated=True)
    assert _pairs(parsed) == [("Query", "diagnosis", "?"), ("Constraint", "age", "45")]
    assert parsed.notes == ["stopped at echoed prompt scaffolding"] and not parsed.malformed


def test_values_by_term_dedupes_and_caps():
    pairs = [ImapPair("Inform", "drug", v) for v in ("A", "a", "B", "C")]
    pairs.append(ImapPair("Query", "drug", "?"))
    assert values_by_term(pairs) == {"drug": ["A", "B", "C"]}
    assert values_by_term(pairs, max_values=2) == {"drug": ["A", "B"]}


# ------------------------------------------------------------------ relation parser
RELATION_ANSWERS = [
    ("exact", E, None), (" Belonging.", B, None), ("Relation: containment", C, None),
    ("**unmatched** - different drugs", U, None), ("Exact match\nTerm: x. L: y", E, None),
    ("The relationship is belonging", None, "no relation word"),
    ("relationship: belongs to", B, None), ("maybe", None, "no relation word"),
    ("", None, "empty completion"), ("\n \n", None, "empty completion"),
    (None, None, "empty completion"), ("L: penicillin", None, "no relation word"),
]


@pytest.mark.parametrize("text,relation,reason", RELATION_ANSWERS)
def test_parse_relation_golden_and_malformed(text, relation, reason):
    rel, why = parse_relation(text)
    assert rel is relation
    assert (why or "").startswith(reason or "") and (why is None) == (reason is None)


def test_relation_from_options_takes_the_most_probable_then_the_priority():
    probs = {" exact": 0.1, " belonging": 0.2, " containment": 0.6, " unmatched": 0.1}
    assert relation_from_options(probs) is C
    tie = {" exact": 0.1, " belonging": 0.4, " containment": 0.4, " unmatched": 0.1}
    assert relation_from_options(tie) is B
    with pytest.raises(ValueError, match="expected probabilities"):
        relation_from_options({" exact": 1.0})
    assert list(RELATION_OPTIONS.values()) == [E, B, C, U]


# ------------------------------------------------------------------ lexicon reader
def test_lexicon_reader_synonyms_and_direction_of_chd():
    lex = Lexicon.from_rrf(LEXICON)
    assert len(lex.names) == 763
    assert lex.concepts_of("High blood pressure") == lex.concepts_of("HTN") == {"C9000177"}
    # C9000176|..|CHD|C9000177: hypertension is a child of cardiovascular disease
    assert "C9000176" in lex.parents["C9000177"]
    assert lex.names["C9000176"] == "cardiovascular disease"
    assert lex.semantic_types["C9000649"] == "Pharmacologic Substance"
    assert {lex.names[c] for c in lex.ancestors("C9000649", 3)} == {
        "nonsteroidal anti-inflammatory drug", "analgesic"}
    assert lex.ancestors("C9000649", 1) == {"C9000648"}


def test_lexicon_reader_names_the_bad_line(tmp_path):
    for name in ("MRSTY.RRF", "MRREL.RRF"):
        (tmp_path / name).write_text("")
    (tmp_path / "MRCONSO.RRF").write_text(
        "C1|ENG|P|L1|PF|S1|Y|A1||M1||X|PT|M1|fever|0|N||\nC2|ENG|P|broken\n")
    with pytest.raises(ContractError, match=r"MRCONSO.RRF:2: field '<row>'"):
        Lexicon.from_rrf(tmp_path)
    with pytest.raises(FileNotFoundError, match="MRCONSO.RRF"):
        Lexicon.from_rrf(tmp_path / "nowhere")


def test_linker_whole_string_span_and_no_link():
    linker = ConceptLinker(Lexicon.from_rrf(LEXICON))
    assert linker.link("Paracetamol").how == "exact"
    span = linker.link("add an ACE inhibitor or ARB")
    assert span.how == "span" and span.matched == ("ace inhibitor",)
    assert linker.link("lower the dose to 5 mg").how is None


def test_linker_embedding_fallback_with_a_fake_encoder():
    lex = _tiny_lexicon()
    vectors = {"alpha": [1, 0], "beta": [0, 1], "both": [0.6, 0.8], "gamma": [0.8, 0.6],
               "alfa": [0.99, 0.141], "zzz": [-1, 0]}

    def encode(texts):
        return np.array([vectors[t] for t in texts], dtype=float)

    linker = ConceptLinker(lex, encode, min_similarity=0.9)
    links = linker.link_many(["alfa", "zzz", "beta"])
    assert links["alfa"].how == "embedding" and links["alfa"].cuis == {"A"}
    assert links["zzz"].how is None
    assert links["beta"].how == "exact"


# ------------------------------------------------------------------ baselines
def test_text_metrics_by_hand():
    # ROUGE-1: reference "the cat sat", response "the cat ran": 2 of 3 unigrams both ways
    s = ngram_scores("the cat sat", "the cat ran")
    assert (s["ROUGE-1"], s["ROUGE-2"]) == (pytest.approx(2 / 3), pytest.approx(1 / 2))
    assert ngram_scores("take ibuprofen with food", "take ibuprofen with food")["BLEU-4"] \
        == pytest.approx(1.0)
    assert ngram_scores("", "anything")["BLEU-4"] == 0.0
    # Chinese: one token per character (the old [a-z0-9]+ tokens scored this pair 0)
    zh = ngram_scores("我今天头痛", "今天头很痛")
    assert (zh["ROUGE-1"], zh["ROUGE-2"]) == (pytest.approx(0.8), pytest.approx(0.5))

    def encode(texts):
        return np.array([[1.0, 0.0] if "a" in t else [0.0, 1.0] for t in texts])

    def bert(refs, hyps):
        return [0.5] * len(refs)

    df = text_metrics(["a b", "a", ""], ["a c", "b", "a"], encode, " +imap", bertscore=bert)
    assert list(df.columns) == ["ROUGE-1 +imap", "ROUGE-2 +imap", "ROUGE-L +imap",
                                "BLEU-4 +imap", "BERTScore-F1 (MiniLM) +imap",
                                "MiniLM cosine +imap"]
    assert df["MiniLM cosine +imap"].tolist() == [1.0, 0.0, 0.0]   # empty reference → 0
    assert df["BERTScore-F1 (MiniLM) +imap"].tolist() == [0.5, 0.5, 0.0]


# ------------------------------------------------------------------ correlations
def test_rank_correlations_and_table2_layout():
    rho, tau = rank_correlations([1, 2, 3, 4], [10, 20, 30, 40])
    assert (rho, tau) == (pytest.approx(1.0), pytest.approx(1.0))
    rho, tau = rank_correlations([1, 2, 3, 4], [4, 3, 1, 2])    # hand: d² = 9+1+4+4 = 18
    assert rho == pytest.approx(1 - 6 * 18 / (4 * 15))         # = -0.8
    assert tau == pytest.approx((1 - 5) / 6)                   # concordant 1, discordant 5
    assert all(math.isnan(v) for v in rank_correlations([1, 1, 1], [1, 2, 3]))
    scores = pd.DataFrame({"system": ["a"] * 4 + ["b"] * 4, "m": [1, 2, 3, 4, 1, 1, 1, 1],
                           "human_acc": [1, 2, 3, 4] * 2, "human_cmp": [4, 3, 2, 1] * 2,
                           "human_spc": [1, 2, 3, 4] * 2})
    wide = table2(correlations(scores, ["m"]), ["m"])
    assert list(wide.columns[:3]) == ["Metric", "a ACC ρ", "a ACC τ"]
    row = wide.iloc[0]
    assert (row["a ACC ρ"], row["a CMP ρ"], row["AVE ρ"]) == (100, -100, pytest.approx(33))
    assert math.isnan(row["b ACC ρ"]) and row["n_undefined"] == 3


# ------------------------------------------------------------------ params
def test_imap_params_are_strict():
    with pytest.raises(ParamsError, match="unknown key 'imapscore.max_hop'"):
        parse_params({"imapscore": {"max_hop": 2}})
    with pytest.raises(ParamsError, match="imapscore.link_min_similarity"):
        parse_params({"imapscore": {"link_min_similarity": 1.5}})
    with pytest.raises(ParamsError, match="umls_dir"):
        parse_params({"imapscore": {"umls_sabs": ["MSH"]}})


# ------------------------------------------------------------------ pipeline, scripted judge
def scripted_judge(request) -> str:
    """A fixed judge: one Query term, Inform lines from drug names found in the answer,
    relations from a small table. Returns only the continuation after the prefix."""
    system, user = request.messages[0]["content"], request.messages[-1]["content"]
    if "medical questions into an imap" in system:
        return "treatment-?\nConstraint-symptom-pain"
    if "key facts of a medical answer" in system:
        answer = user.rsplit("Answer:", 1)[1]
        drugs = [d for d in ("ibuprofen", "acetaminophen", "amlodipine", "antibiotic",
                             "analgesic", "ACE inhibitor") if d.lower() in answer.lower()]
        if not drugs:
            return "None"     # continues the prefix: "Inform-treatment-None"
        return "\n".join([drugs[0]] + [f"Inform-treatment-{d}" for d in drugs[1:]])
    if "You compare two medical facts" in system:
        label, response = re.findall(r"L: (.*?)\. R: (.*?)\. Relation:$", user)[-1]
        return {("amlodipine", "ACE inhibitor"): "Relation: containment"}.get(
            (label, response), "unmatched")
    raise AssertionError(f"unexpected prompt: {system[:60]}")


def _run_pipeline(items, p, client, encode):
    questions = ex.extract_question_imaps(p, client, items)
    answers = ex.extract_answer_imaps(p, client, items, questions)
    imaps = ev.assemble_imaps(p, items, questions, answers)
    matcher = ev.build_matcher(p, encode)
    judged = ev.relate_by_judge(p, client, imaps)
    return questions, answers, imaps, judged, score_items(imaps, matcher, judged, encode)


def _fake_encode(texts):
    return np.array([[len(t) % 7 + 1.0, 1.0] for t in texts]) / 10.0


def test_pipeline_with_a_scripted_judge(scripted_client):
    p = ImapParams(link_min_similarity=None, relation_mode="generate")
    items = ev.load_scored_qa(p)[:6]          # two questions x three systems
    client = scripted_client(scripted_judge)
    questions, answers, imaps, judged, scores = _run_pipeline(items, p, client, _fake_encode)
    assert len(questions) == 2                  # one call per distinct question
    assert len(answers) == 2 + 6                # distinct references + every response
    # one relation request per distinct (term, label value, response value): the client
    # asks once for a pair that two items share
    assert len(client.backend.requests) == 2 + 8 + len({k[1:] for k in judged})
    first = imaps[0]
    assert [q.term for q in first.question if q.component == "Query"] == ["treatment"]
    assert first.label == {"treatment": ["amlodipine", "ACE inhibitor"]}
    assert set(scores.columns) >= set(metric_order(bertscore=False))
    # q-0001: label = response = [amlodipine, ACE inhibitor]; same texts are exact without
    # a call; the judge calls (amlodipine, ACE inhibitor) containment, the reverse unmatched
    #   judge: matrix [[E, C], [U, E]] -> 2/2 + 2/2 - λ (1 of 3 related) = 5/3
    #   ontology: the two drugs are siblings -> [[E, U], [U, E]] -> 2
    #   +KG: the ontology relates neither cross pair, so the judge's C stays -> 5/3
    assert {(k[2], k[3]): j.relation for k, j in judged.items() if k[0] == "q-0001"} == {
        ("amlodipine", "ACE inhibitor"): C, ("ACE inhibitor", "amlodipine"): U}
    assert scores.loc[0, "imapScore (judge)"] == pytest.approx(5 / 3)
    assert scores.loc[0, "imapScore (ontology)"] == pytest.approx(2.0)
    assert scores.loc[0, "imapScore +KG"] == pytest.approx(5 / 3)
    # raw completions are kept with their parse
    rec = answers["res:q-0001"].to_record()
    assert rec["raw"] and rec["prefix"] == "Inform-treatment-" and rec["pairs"]
    long = correlations(scores, metric_order(bertscore=False))
    assert set(long["system"]) == {"model-a", "model-b", "model-c"}
    # a second run answers from the cache: no new requests
    before = len(client.backend.requests)
    _run_pipeline(items, p, client, _fake_encode)
    assert len(client.backend.requests) == before


def test_options_mode_reads_the_judges_next_word_probabilities(cache):
    from medpref.llm.client import LLMClient
    from medpref.llm.ledger import Ledger
    from medpref.llm.scripted import ScriptedBackend
    from medpref.llm.types import GenerationParams

    def options(messages, opts, prefix):
        assert prefix == "Relation:" and list(opts) == list(RELATION_OPTIONS)
        user = messages[-1]["content"]
        pick = " containment" if "L: amlodipine. R: ACE inhibitor." in user else " unmatched"
        return {o: (0.7 if o == pick else 0.1) for o in opts}

    backend = ScriptedBackend(scripted_judge, option_responder=options)
    client = LLMClient("judge", backend, GenerationParams(), cache=cache, ledger=Ledger("t"))
    p = ImapParams(link_min_similarity=None)              # relation_mode: options
    items = ev.load_scored_qa(p)[:1]
    *_, judged, scores = _run_pipeline(items, p, client, _fake_encode)
    rec = judged[("q-0001", "treatment", "amlodipine", "ACE inhibitor")].to_record()
    assert rec["relation"] == "containment" and rec["probs"][" containment"] == 0.7
    assert scores.loc[0, "imapScore (judge)"] == pytest.approx(5 / 3)


def test_sampled_extraction_keeps_the_pairs_that_repeat(cache):
    """The paper's mode: three samples at T = 0.9 (one seed each), keep pairs found >= 2x."""
    from medpref.llm.client import LLMClient
    from medpref.llm.ledger import Ledger
    from medpref.llm.scripted import ScriptedBackend
    from medpref.llm.types import GenerationParams

    answers = {13: "treatment-?\nConstraint-symptom-pain",
               14: "treatment-?\nConstraint-age-60",
               15: "treatment-?\nConstraint-symptom-pain\nConstraint-drug-aspirin"}
    seen = []

    def responder(req):
        seen.append((req.params.temperature, req.params.top_p, req.params.seed))
        return answers[req.params.seed]

    client = LLMClient("judge", ScriptedBackend(responder), GenerationParams(), cache=cache,
                       ledger=Ledger("t"))
    p = ImapParams(extraction={"mode": "sampled"})
    items = ev.load_scored_qa(p)[:1]
    q = next(iter(ex.extract_question_imaps(p, client, items, seed=13).values()))
    assert sorted(seen) == [(0.9, 1.0, 13), (0.9, 1.0, 14), (0.9, 1.0, 15)]
    assert [pr.line() for pr in q.parsed.pairs] == ["Query-treatment-?",
                                                    "Constraint-symptom-pain"]
    assert len(q.to_record()["samples"]) == 3
    # greedy: one call at T = 0 with the first answer as is
    seen.clear()
    client.cache = None
    p = ImapParams(extraction={"mode": "greedy"})
    answers[None] = answers[14]
    q = next(iter(ex.extract_question_imaps(p, client, items, seed=13).values()))
    assert seen == [(0.0, 1.0, None)]
    assert "Constraint-age-60" in [pr.line() for pr in q.parsed.pairs]


def test_sampled_relations_keep_the_relation_that_repeats(cache):
    from medpref.llm.client import LLMClient
    from medpref.llm.ledger import Ledger
    from medpref.llm.scripted import ScriptedBackend
    from medpref.llm.types import GenerationParams

    # seeds 13, 14, 15: containment twice -> kept; for the reverse pair three different
    # answers -> nothing repeats -> no relation (unmatched on the judge path)
    answers = {("amlodipine", "ACE inhibitor"): {13: "containment", 14: "exact",
                                                 15: "Relation: containment"},
               ("ACE inhibitor", "amlodipine"): {13: "exact", 14: "belonging",
                                                 15: "unmatched"}}

    def responder(req):
        user = req.messages[-1]["content"]
        label, response = re.findall(r"L: (.*?)\. R: (.*?)\. Relation:$", user)[-1]
        return answers[(label, response)][req.params.seed]

    client = LLMClient("judge", ScriptedBackend(responder), GenerationParams(), cache=cache,
                       ledger=Ledger("t"))
    p = ImapParams(relation_mode="generate", extraction={"mode": "sampled"})
    label = [ImapPair("Inform", "treatment", v) for v in ("amlodipine", "ACE inhibitor")]
    im = ev.ItemImaps(ev.load_scored_qa(p)[0], [], label, label,
                      {"treatment": ["amlodipine", "ACE inhibitor"]},
                      {"treatment": ["amlodipine", "ACE inhibitor"]})
    judged = ev.relate_by_judge(p, client, [im], seed=13)
    by_pair = {(k[2], k[3]): j for k, j in judged.items()}
    assert by_pair[("amlodipine", "ACE inhibitor")].relation is C
    assert by_pair[("ACE inhibitor", "amlodipine")].relation is None
    assert len(client.backend.requests) == 2 * 3


def test_extraction_mode_auto_is_sampled_for_a_served_judge(scripted_client):
    client = scripted_client()
    assert ex.resolve_mode("auto", client) == "greedy"          # scripted / hf: greedy
    client.backend.kind = "openai"
    assert ex.resolve_mode("auto", client) == "sampled"
    assert ex.resolve_mode("greedy", client) == "greedy"


def test_consensus_of_parsed_samples():
    from medpref.imap.structure import ParsedImap
    a, b, c = (ImapPair("Inform", "dose", v) for v in ("5 mg", "10 mg", "5 MG"))
    out = ex.consensus([ParsedImap([a]), ParsedImap([b]), ParsedImap([c, a])], 2)
    assert out.pairs == [a]            # "5 mg" twice (case-insensitive; once per sample)
    assert ex.consensus([ParsedImap([a]), ParsedImap([b])], 2).pairs == []
    assert ex.consensus([ParsedImap(none=True), ParsedImap(none=True), ParsedImap([a])],
                        2).none


def test_ontology_path_needs_no_judge_relation_calls(scripted_client):
    p = ImapParams(link_min_similarity=None, judge_relations=False)
    items = ev.load_scored_qa(p)[:3]
    client = scripted_client(scripted_judge)
    _, _, _, judged, scores = _run_pipeline(items, p, client, _fake_encode)
    assert judged is None and len(client.backend.requests) == 1 + 1 + 3
    assert "imapScore (judge)" not in scores and "imapScore (ontology)" in scores


@pytest.mark.shared_data
def test_pipeline_on_a_few_mts_correlation_study_records(scripted_client):
    from medpref.data.adapters import shared_data_dir

    if shared_data_dir() is None:
        pytest.skip("shared data directory absent")
    p = ImapParams(source="mts_correlation", mts_max_dialogues=2, link_min_similarity=None,
                   relation_mode="generate")
    items = ev.load_scored_qa(p)
    assert len(items) == 8 and {i.system for i in items} == {f"system-{k}" for k in range(1, 5)}
    client = scripted_client(scripted_judge)
    *_, scores = _run_pipeline(items, p, client, _fake_encode)
    assert len(scores) == 8 and scores["human_acc"].between(0, 1).all()
    long = correlations(scores, metric_order(bertscore=False))
    assert len(long) == 4 * len(metric_order(bertscore=False)) * 3


@pytest.mark.slow
def test_embedded_judge_extracts_and_the_parse_never_raises(embedded_llm_path, cache):
    """Two real calls of the 135M judge: raw text kept, parser total (it may find nothing)."""
    from medpref.llm.client import LLMClient
    from medpref.llm.hf import HFBackend
    from medpref.llm.types import GenerationParams

    calls = ImapParams().calls
    p = ImapParams(calls={**calls, **{n: calls[n].model_copy(update={"max_new_tokens": 24})
                                      for n in ("question", "answer")}})
    client = LLMClient("judge", HFBackend(str(embedded_llm_path), batch_size=2),
                       GenerationParams(), cache=cache)
    items = ev.load_scored_qa(p)[:1]
    questions = ex.extract_question_imaps(p, client, items)
    answers = ex.extract_answer_imaps(p, client, items, questions)
    for e in [*questions.values(), *answers.values()]:
        assert e.error is None and e.raw.strip()
        assert e.prefix in ("Query-",) or e.prefix.startswith("Inform-")
        assert all(pair.component in ("Query", "Constraint", "Inform") for pair in e.parsed.pairs)


def _scripted_run(tmp_path, monkeypatch, **params):
    from scripted_stage import scripted_stage

    monkeypatch.setattr(ev, "load_encoder", lambda path: _fake_encode)
    monkeypatch.setattr(ev, "load_bertscore", lambda path, layer: lambda refs, hyps: [
        round(0.3 + 0.01 * (len(r) % 7) + 0.02 * (len(h) % 5), 4) for r, h in zip(refs, hyps)])
    p = ImapParams(link_min_similarity=None, relation_mode="generate", **params)
    stage = scripted_stage("07_imapscore", tmp_path, monkeypatch, scripted_judge, section=p)
    return stage, ev.run(stage)


def test_run_in_the_stage_shape_with_a_scripted_judge(tmp_path, monkeypatch):
    stage, out = _scripted_run(tmp_path, monkeypatch, lambda_reading="count")
    assert out.extraction_mode == "greedy"            # an hf (here scripted) judge
    assert "BERTScore-F1 (MiniLM)" in out.table2["Metric"].tolist()
    assert "λ read as a count" in out.caption
    assert "wall_seconds" not in out.metrics and out.metrics["items"] == len(out.items)
    assert (tmp_path / "reports/07_imapscore/correlations.md").exists()
    assert not (tmp_path / "data/07_imapscore").exists()     # the records are the data


def test_run_writes_records_the_tables_rebuild_from(tmp_path, monkeypatch):
    """Every model computation is a keyed record; every table rebuilds from the records
    alone, byte for byte, and a table edited by hand is caught."""
    from medpref.imap.outputs import OUTPUTS
    from medpref.outputs import read_rows

    stage, out = _scripted_run(tmp_path, monkeypatch)
    reports = tmp_path / "reports/07_imapscore"
    rows = {r.name: read_rows(r.path(reports)) for r in OUTPUTS.records}
    n = len(out.items)
    assert len(rows["items"]) == n and len(rows["extractions"]) == len(out.extractions)
    assert len(rows["relations"]) == out.metrics["value_pairs"]
    assert sum(r["asked"] for r in rows["relations"]) == out.metrics["relation_calls"]
    assert len(rows["value_links"]) == sum(out.metrics["value_links"].values())
    for name, recs in rows.items():
        keys = [r["key"] for r in recs]
        assert all(re.fullmatch(r"[0-9a-f]{16}", k) for k in keys), name
        assert len(set(keys)) == len(keys), f"{name}: two rows share a content key"
    # the raw completion is kept next to its parse; no item text is copied into a record
    res = next(r for r in rows["extractions"] if r["id"] == "res:q-0001")
    assert res["raw"] and res["model_id"] == out.models["judge"] and res["pairs"]
    texts = {t for it in out.items for t in (it.question, it.reference, it.response)}
    written = "".join(r.path(reports).read_text() for r in OUTPUTS.records)
    assert texts and not any(json.dumps(t, ensure_ascii=False)[1:-1] in written
                             for t in texts)
    # BERTScore and the cosine come from the recorded scores, not a model
    assert out.scores["BERTScore-F1 (MiniLM)"].tolist() == [
        r["metrics"]["BERTScore-F1 (MiniLM)"] for r in rows["items"]]
    # q-0001 by hand (test_pipeline_with_a_scripted_judge): judge 5/3, ontology 2, +KG 5/3
    first = out.scores.iloc[0]
    assert (first["imapScore (judge)"], first["imapScore (ontology)"],
            first["imapScore +KG"]) == pytest.approx((5 / 3, 2.0, 5 / 3))
    assert OUTPUTS.differences(reports, stage.params, tmp_path / "rebuilt") == []
    (reports / "scores.csv").write_text((reports / "scores.csv").read_text()
                                        .replace("model-a", "model-z", 1))
    assert OUTPUTS.differences(reports, stage.params, tmp_path / "rebuilt2") == [
        f"{reports / 'scores.csv'}: differs from its rebuild from the records"]


def test_scores_follow_the_recorded_relations_not_a_model(tmp_path, monkeypatch):
    """Edit one recorded judge relation: the rebuilt imapScore of its item moves by the
    hand-computed amount, every other item's score stays; a record naming an extraction
    that is not recorded is an error naming both files."""
    from medpref.imap.outputs import OUTPUTS, scores_table
    from medpref.outputs import read_rows, write_rows

    stage, out = _scripted_run(tmp_path, monkeypatch)
    reports = tmp_path / "reports/07_imapscore"
    records = OUTPUTS.load_records(reports)
    pair = next(r for r in records["relations"] if r["item_id"] == "q-0001"
                and (r["label_value"], r["response_value"]) == ("amlodipine", "ACE inhibitor"))
    assert pair["judge"] == "containment" and pair["asked"]
    pair["judge"] = "exact"    # judge matrix [[E, E], [U, E]]: 2/2 + 2/2 - 0/3 = 2
    rebuilt = scores_table(records, stage.params)
    assert rebuilt.loc[0, "imapScore (judge)"] == pytest.approx(2.0)
    assert rebuilt.loc[0, "imapScore (ontology)"] == pytest.approx(2.0)
    others = rebuilt["id"] != "q-0001"
    pd.testing.assert_frame_equal(rebuilt[others], out.scores[others])
    items = read_rows(reports / "records/items.jsonl")
    items[1]["response"] = "res:gone"
    write_rows(reports / "records/items.jsonl", items)
    with pytest.raises(ValueError, match=r"records/items.jsonl: item 'q-0002' field "
                                         r"'response' names extraction 'res:gone'"):
        OUTPUTS.rebuild(reports, stage.params, tmp_path / "r3")


def test_run_fails_before_writing_when_the_judge_extracts_nothing(tmp_path, monkeypatch):
    from medpref.stagekit import StageFailed
    from scripted_stage import scripted_stage

    monkeypatch.setattr(ev, "load_encoder", lambda path: _fake_encode)
    p = ImapParams(link_min_similarity=None, relation_mode="generate", bertscore_layer=None)
    stage = scripted_stage("07_imapscore", tmp_path, monkeypatch, lambda req: "\n\nsorry",
                           section=p)
    with pytest.raises(StageFailed, match="stage imapscore failed: 0 of"):
        ev.run(stage)
    assert not (tmp_path / "reports/07_imapscore/records").exists()


@pytest.mark.slow
def test_bertscore_on_the_embedded_minilm():
    from medpref.imap.textmetrics import load_bertscore
    from medpref.params import repo_path

    score = load_bertscore(repo_path("models/all-minilm-l6-v2"), 6)
    same, close, far = score(["Take ibuprofen with food."] * 3,
                             ["Take ibuprofen with food.", "Take the ibuprofen after meals.",
                              "The weather is sunny today."])
    assert same == pytest.approx(1.0, abs=1e-4) and same > close > far
def test_a_failed_relation_option_call_is_recorded_and_scoring_completes(cache):
    """A failed option call (the backend's recorded failure) gives a judgement with the
    error and no relation; the other pairs and the scores are still computed."""
    from medpref.llm.client import LLMClient
    from medpref.llm.ledger import Ledger
    from medpref.llm.scripted import ScriptedBackend
    from medpref.llm.types import GenerationParams, OptionScores

    class FailingOptions(ScriptedBackend):
        def score_options(self, prompts, options, prefixes, on_complete=None,
                          before_call=None):
            out = []
            for i, msgs in enumerate(prompts):
                bad = "L: amlodipine. R: ACE inhibitor." in msgs[-1]["content"]
                out.append(OptionScores({}, 0.0, error="HTTP 500 after retries") if bad else
                           OptionScores({o: 0.25 for o in options}, 0.5, tokens_in=9))
                if on_complete is not None:
                    on_complete(i, out[-1])
            return out

    ledger = Ledger("t")
    client = LLMClient("judge", FailingOptions(scripted_judge), GenerationParams(),
                       cache=cache, ledger=ledger)
    p = ImapParams(link_min_similarity=None)              # relation_mode: options
    items = ev.load_scored_qa(p)[:1]
    *_, judged, scores = _run_pipeline(items, p, client, _fake_encode)
    rec = judged[("q-0001", "treatment", "amlodipine", "ACE inhibitor")].to_record()
    assert rec["relation"] is None and rec["error"] == "HTTP 500 after retries"
    assert "model call failed" in rec["reason"]
    assert any(j.relation is not None for j in judged.values())
    assert len(scores) == 1 and ledger.totals()["roles"]["judge"]["failures"] == 1
