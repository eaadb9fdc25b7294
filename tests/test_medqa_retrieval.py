"""Stage 06 retrieval: the tree, HR@k on hand-made rankings, chance rates, the embedding cache."""

from __future__ import annotations

import numpy as np
import pytest

from medpref.contracts import ContractError, Medicine, MedicineQAItem, Turn, read_jsonl
from medpref.medqa.database import build_tree, embed_items, item_text
from medpref.medqa.retrieval import (
    chance_hit_rate,
    check_gold,
    document_ranking,
    evaluate_ranking,
    first_hit_rank,
    history_query,
    hit_rates,
    rank_items,
)
from medpref.params import repo_path


def med(name, brands=()):
    return Medicine(generic_name=name, brand_names=list(brands),
                    attributes={"usage": f"{name} dose", "pregnancy": f"{name} in pregnancy"})


def question(gold, attrs, qid="m-1"):
    return MedicineQAItem(id=qid, history=[Turn(role="patient", text="I take it daily."),
                                           Turn(role="doctor", text="Which one?")],
                          question="Is it safe?", gold_medicine=gold, gold_attributes=attrs)


def test_tree_items_and_text():
    tree = build_tree([med("metformin", ["Glucophage"]), med("lisinopril")])
    assert [it.key for it in tree.items] == [("metformin", "usage"), ("metformin", "pregnancy"),
                                             ("lisinopril", "usage"), ("lisinopril", "pregnancy")]
    assert tree.children("lisinopril") == [2, 3]
    assert tree.items[1].text == "metformin pregnancy: metformin in pregnancy"
    assert item_text(tree.medicines[0], "usage", "generic_brands_attribute") == \
        "metformin (Glucophage) usage: metformin dose"
    with pytest.raises(ValueError, match="appears twice"):
        build_tree([med("a"), med("a")])


def test_hit_rates_on_a_hand_made_ranking():
    # first-hit ranks of five questions: 1, 3, 7, never, 12
    ranks = [1, 3, 7, None, 12]
    assert hit_rates(ranks, [1, 5, 10, 50]) == {1: 0.2, 5: 0.4, 10: 0.6, 50: 0.8}
    assert first_hit_rank(["b", "a", "c"], {"c", "a"}) == 2
    assert first_hit_rank(["b"], {"z"}) is None
    with pytest.raises(ValueError):
        hit_rates([], [1])


def test_document_and_attribute_levels_of_one_ranking():
    tree = build_tree([med("a"), med("b"), med("c")])
    keys = [it.key for it in tree.items]   # a.u a.p b.u b.p c.u c.p = 0..5
    order = [4, 2, 3, 0, 1, 5]             # c.u, b.u, b.p, a.u, a.p, c.p
    assert document_ranking(order, [k[0] for k in keys]) == ["c", "b", "a"]
    res = evaluate_ranking(question("a", ["pregnancy"]), "s", "q", order, keys, keep=2)
    assert (res.doc_rank, res.attr_rank, res.top_items) == (3, 5, (4, 2))
    # two gold attributes: the first of either counts
    res = evaluate_ranking(question("b", ["pregnancy", "usage"]), "s", "q", order, keys, 1)
    assert (res.doc_rank, res.attr_rank) == (2, 2)


def test_rank_items_cosine_and_stable_ties():
    items = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    order = rank_items(np.array([[1.0, 0.0]]), items)
    assert order.tolist() == [[0, 2, 1]]


def test_chance_hit_rate():
    assert chance_hit_rate(52, 1, 1) == pytest.approx(1 / 52)
    assert chance_hit_rate(52, 1, 50) == pytest.approx(50 / 52)
    # two gold items among 4, top 2: 1 − C(2,2)/C(4,2) = 5/6
    assert chance_hit_rate(4, 2, 2) == pytest.approx(5 / 6)
    assert chance_hit_rate(10, 1, 10) == 1.0


def test_history_query_keeps_last_turns_and_question():
    q = question("a", ["usage"])
    assert history_query(q, 1) == "Doctor: Which one?\nPatient: Is it safe?"


def test_gold_must_exist(tmp_path):
    tree = build_tree([med("a")])
    keys = [it.key for it in tree.items]
    check_gold([question("a", ["usage"])], keys, "q.jsonl")
    with pytest.raises(ContractError, match=r"q.jsonl:2: field 'gold_medicine'"):
        check_gold([question("a", ["usage"]), question("zz", ["usage"])], keys, "q.jsonl")
    with pytest.raises(ContractError, match="gold_attributes.*no attribute 'dose'"):
        check_gold([question("a", ["dose"])], keys, "q.jsonl")


def test_embedding_cache_hits_and_misses(tmp_path):
    calls = []

    def encode(texts):
        calls.append(len(texts))
        return np.eye(len(texts), 4, dtype=np.float32)

    cache = tmp_path / "emb.npz"
    tree = build_tree([med("a"), med("b")])
    v1, hit1 = embed_items(tree, encode, cache, "m1")
    v2, hit2 = embed_items(tree, encode, cache, "m1")
    assert (hit1, hit2) == (False, True) and calls == [4]
    assert np.array_equal(v1, v2)
    _, hit3 = embed_items(tree, encode, cache, "m2")          # another model misses
    _, hit4 = embed_items(build_tree([med("a"), med("c")]), encode, cache, "m2")  # new texts
    assert (hit3, hit4) == (False, False) and calls == [4, 4, 4]


def test_embedded_database_shape():
    meds = read_jsonl(repo_path("data/embedded/medicines.jsonl"), Medicine)
    items = read_jsonl(repo_path("data/embedded/medicineqa.jsonl"), MedicineQAItem)
    tree = build_tree(meds)
    assert (len(tree.medicines), len(tree.items), len(items)) == (52, 312, 57)
    check_gold(items, [it.key for it in tree.items], "medicineqa.jsonl")


@pytest.mark.slow
def test_minilm_finds_the_named_medicine(tmp_path):
    """The real encoder (offline, CPU): a query naming a medicine and an attribute finds it."""
    from medpref.embedding import load_encoder

    meds = read_jsonl(repo_path("data/embedded/medicines.jsonl"), Medicine)[:6]
    tree = build_tree(meds)
    encode = load_encoder(repo_path("models/all-minilm-l6-v2"))
    vecs, hit = embed_items(tree, encode, tmp_path / "e.npz", "minilm")
    assert vecs.shape == (36, 384) and not hit
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    target = tree.items[tree.children(meds[2].generic_name)[0]]   # its first attribute
    query = f"{meds[2].generic_name} {target.attribute.replace('_', ' ')}"
    order = rank_items(encode([query]), vecs)[0]
    keys = [it.key for it in tree.items]
    assert document_ranking(order, [k[0] for k in keys])[0] == meds[2].generic_name
