"""Option scoring on a prefix tree (medpref.llm.hf): prompts that share a beginning, and
within it groups that share a middle (one candidate turn asked about every rule, the rule
after it), give the next-token distributions of separate passes."""

from __future__ import annotations

import pytest

from conftest import make_tiny_llama
from medpref import REPO_ROOT
from medpref.llm.hf import HFBackend, batch_chunks, middle_groups

TOKENIZER = REPO_ROOT / "models" / "smollm2-135m-instruct"
SYSTEM = {"role": "system", "content": "You check whether a doctor follows one rule of a "
          "diagnostic process. Read the consultation, read the rule, answer with a score."}
HISTORY = ("Patient: I have had a dry cough for two weeks and some fever at night.\n"
           "Doctor: Do you smoke, and have you been near anyone who was ill?\n"
           "Patient: No, I do not smoke. My son had a cold last month.")
CANDIDATES = ["Doctor: Any chest pain or shortness of breath?",
              "Doctor: You have bronchitis; take an antibiotic for a week.",
              "Doctor: How high was the fever, and did you measure it?"]
RULES = ["Rule A (Validation): the doctor verifies the condition before diagnosing.",
         "Rule B (Inquiry): the doctor asks about the symptoms' course.",
         "Rule C (Diagnosis): the doctor names a diagnosis only after enough history, "
         "and says what it rests on."]


def prompts():
    return [[SYSTEM, {"role": "user", "content": f"Consultation:\n{HISTORY}\n{c}\n\n{r}\n\n"
                                                 "Did the doctor follow this rule?"}]
            for c in CANDIDATES for r in RULES]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoTokenizer

    return make_tiny_llama(tmp_path_factory.mktemp("tiny"), AutoTokenizer.from_pretrained(
        TOKENIZER), max_positions=1024)


def test_middle_groups_hand_computed():
    rests = [[5, 6, 7, 1], [5, 6, 7, 2, 2], [9, 9], [5, 6, 8], [9, 9, 3]]
    assert middle_groups(rests, 2) == [([0, 1, 3], 2), ([2, 4], 1)]
    # 3 shared tokens needed: [5,6,8] and the two 9-rows go alone (a row alone keeps its
    # last token for the end)
    assert middle_groups(rests, 3) == [([0, 1], 3), ([3], 2), ([2], 1), ([4], 2)]


def test_a_run_is_cut_in_token_order_for_the_tree():
    ids = [[1] * 40 + [2, 5], [1] * 40 + [3], [1] * 40 + [2, 4, 4], [7, 7], [8]]
    assert batch_chunks(ids, 2, 32) == [[1, 0], [2], [4, 3]]            # by length
    assert batch_chunks(ids, 2, 32, alone_size=1) == [[2, 0], [1], [4], [3]]


def test_the_tree_gives_the_distributions_of_separate_passes(tiny):
    import torch

    tree = HFBackend(str(tiny), batch_size=4, device="cpu")
    flat = HFBackend(str(tiny), batch_size=4, device="cpu")
    flat.shared_middle_min = 0
    tok, _ = tree._ensure_loaded()
    ids = [tok(tree.render(p, "Score: "), add_special_tokens=False)["input_ids"]
           for p in prompts()]
    shared = min(len(x) for x in ids)
    while any(x[:shared] != ids[0][:shared] for x in ids):
        shared -= 1
    groups = middle_groups([x[shared:] for x in ids], tree.shared_middle_min)
    assert sorted(len(g) for g, _ in groups) == [3, 3, 3]       # one group per candidate
    assert all(q >= 8 for _, q in groups)
    got = tree._next_token_probs_shared(ids, shared).log()
    one_level = flat._next_token_probs_shared(ids, shared).log()
    alone = torch.cat([flat._next_token_probs([x]) for x in ids]).log()
    assert torch.allclose(got, alone, atol=1e-4) and torch.allclose(one_level, alone, atol=1e-4)
    # each row is read at its own end: rows differ far beyond the tolerance
    assert float((alone[0] - alone[1]).abs().max()) > 1e-2
    assert float((alone[0] - alone[3]).abs().max()) > 1e-2


def test_score_options_through_the_tree_equal_the_plain_pass(tiny):
    tree = HFBackend(str(tiny), batch_size=4, device="cpu")
    plain = HFBackend(str(tiny), batch_size=4, device="cpu")
    plain.shared_prefix_min = 10**9
    got = tree.score_options(prompts(), ["0", "1", "2"], ["Score: "] * 9)
    want = plain.score_options(prompts(), ["0", "1", "2"], ["Score: "] * 9)
    for g, w in zip(got, want):
        assert g.mass == pytest.approx(w.mass, rel=1e-4)
        for k in ("0", "1", "2"):
            assert g.probs[k] == pytest.approx(w.probs[k], abs=1e-5)
