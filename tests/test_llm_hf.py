"""The hf backend on the embedded SmolLM2-135M: batching, determinism, option scoring."""

from __future__ import annotations

import pytest

from medpref.llm.client import LLMClient
from medpref.llm.hf import HFBackend
from medpref.llm.types import CallSpec, GenerationParams

pytestmark = pytest.mark.slow

PROMPTS = [[{"role": "user", "content": "I have had a dry cough for two weeks. What could it be?"}],
           [{"role": "user", "content": "Say hello."}],
           [{"role": "user", "content": "My ankle is swollen after a fall. Should I worry?"}]]

CALL = CallSpec("policy", "", 24)


@pytest.fixture(scope="module")
def backend(embedded_llm_path):
    return HFBackend(str(embedded_llm_path), batch_size=2)


def test_greedy_batched_generation_is_deterministic_and_in_order(backend):
    client = LLMClient("policy", backend, GenerationParams())
    first = client.chat_many(PROMPTS, CALL)
    second = client.chat_many(PROMPTS, CALL)
    assert [c.text for c in first] == [c.text for c in second]
    assert all(c.text and c.tokens_out > 0 and c.tokens_in > 5 for c in first)
    assert all(c.tokens_out <= 24 for c in first)
    # each answer belongs to its own prompt (batching sorts by length, then restores order)
    single = client.chat(PROMPTS[1], CALL)
    assert single.text == first[1].text


def test_seeded_sampling_repeats_with_its_seed(backend):
    client = LLMClient("policy", backend, GenerationParams())
    a = client.chat(PROMPTS[0], CALL.but(max_new_tokens=16), temperature=1.0, seed=3)
    b = client.chat(PROMPTS[0], CALL.but(max_new_tokens=16), temperature=1.0, seed=3)
    assert a.text == b.text


def test_option_scores_are_a_distribution(backend):
    client = LLMClient("rem", backend, GenerationParams())
    prompt = [{"role": "user", "content": "Rate the doctor from 0 to 2. Reply with one digit."}]
    (scores,) = client.option_scores([prompt], ["0", "1", "2"], "Score: ")
    assert set(scores.probs) == {"0", "1", "2"}
    assert sum(scores.probs.values()) == pytest.approx(1.0)
    assert 0 < scores.mass <= 1
    assert 0 <= scores.expected() <= 2


def test_options_sharing_a_first_token_are_refused(backend):
    with pytest.raises(ValueError, match="share their first token"):
        backend.option_token_ids("Answer:", [" yes", " yes please"])


def test_shared_prefix_option_scores_equal_the_plain_pass(embedded_llm_path):
    """Prompts that share a long beginning (a rule and its examples) run it once; the
    probabilities equal those of separate left-padded passes, in request order."""
    system = {"role": "system", "content": "You rate a doctor's last turn against a rule. "
              "Rule A: gather and verify the patient's condition before diagnosing. "
              "Answer with 'Score: 0', 'Score: 1' or 'Score: 2'."}
    histories = ["Patient: my chest hurts.\nDoctor: Take ibuprofen.",
                 "Patient: I have a rash on both arms since Monday.\nDoctor: Does it itch, "
                 "and have you started any new medicine or soap?",
                 "Patient: headache.\nDoctor: How long, and any fever?"]
    prompts = [[system, {"role": "user", "content": h}] for h in histories]
    shared = HFBackend(str(embedded_llm_path), batch_size=8)
    plain = HFBackend(str(embedded_llm_path), batch_size=8)
    plain.shared_prefix_min = 10**9                       # never share
    got = shared.option_probs(prompts, ["0", "1", "2"], ["Score: "] * 3)
    want = plain.option_probs(prompts, ["0", "1", "2"], ["Score: "] * 3)
    one_by_one = [plain.option_probs([p], ["0", "1", "2"], ["Score: "])[0] for p in prompts]
    for (g, gm), (w, wm), (o, om) in zip(got, want, one_by_one):
        assert gm == pytest.approx(wm, rel=1e-3) and gm == pytest.approx(om, rel=1e-3)
        for k in ("0", "1", "2"):
            assert g[k] == pytest.approx(w[k], abs=1e-4) and g[k] == pytest.approx(o[k], abs=1e-4)
    # the rows differ from each other: each was read at its own last token
    assert len({round(m, 6) for _, m in got}) == 3


def test_loop_controls_reach_generate_and_stop_repeated_ngrams(backend):
    """With no_repeat_ngram_size the model cannot write a 4-gram twice; off, the same
    prompt (a request to repeat) does repeat: the control reaches ``generate``."""
    prompt = [{"role": "user", "content": "Write the sentence 'I am glad to see you.' five times."}]
    client = LLMClient("policy", backend, GenerationParams())
    call = CALL.but(max_new_tokens=48)

    def repeated_4grams(text):
        words = text.lower().split()
        grams = [tuple(words[i:i + 4]) for i in range(len(words) - 3)]
        return len(grams) - len(set(grams))

    plain = client.chat(prompt, call)
    controlled = client.chat(prompt, call, no_repeat_ngram_size=4, repetition_penalty=1.3)
    assert repeated_4grams(plain.text) > 0
    tok, _ = backend._ensure_loaded()
    tokens = tok(controlled.text, add_special_tokens=False)["input_ids"]
    grams = [tuple(tokens[i:i + 4]) for i in range(len(tokens) - 3)]
    assert len(grams) == len(set(grams)) and controlled.text != plain.text
