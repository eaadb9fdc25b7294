"""The hf backend on the embedded SmolLM2-135M: batching, determinism, option scoring."""

from __future__ import annotations

import pytest

from medpref.llm.client import LLMClient
from medpref.llm.hf import HFBackend
from medpref.llm.types import GenerationParams

pytestmark = pytest.mark.slow

PROMPTS = [[{"role": "user", "content": "I have had a dry cough for two weeks. What could it be?"}],
           [{"role": "user", "content": "Say hello."}],
           [{"role": "user", "content": "My ankle is swollen after a fall. Should I worry?"}]]


@pytest.fixture(scope="module")
def backend(embedded_llm_path):
    return HFBackend(str(embedded_llm_path), batch_size=2)


def test_greedy_batched_generation_is_deterministic_and_in_order(backend):
    client = LLMClient("policy", backend, GenerationParams(max_new_tokens=24))
    first = client.chat_many(PROMPTS)
    second = client.chat_many(PROMPTS)
    assert [c.text for c in first] == [c.text for c in second]
    assert all(c.text and c.tokens_out > 0 and c.tokens_in > 5 for c in first)
    assert all(c.tokens_out <= 24 for c in first)
    # each answer belongs to its own prompt (batching sorts by length, then restores order)
    single = client.chat(PROMPTS[1])
    assert single.text == first[1].text


def test_seeded_sampling_repeats_with_its_seed(backend):
    client = LLMClient("policy", backend, GenerationParams(max_new_tokens=16))
    a = client.chat(PROMPTS[0], temperature=1.0, seed=3)
    b = client.chat(PROMPTS[0], temperature=1.0, seed=3)
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
