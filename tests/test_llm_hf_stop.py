"""Stop strings end generation inside ``generate`` (hf backend), with the same text.

A tiny random llama (the embedded tokenizer, seconds to run) writes arbitrary tokens, so
common letters serve as stop strings: rows stop early and at different steps.
"""

from __future__ import annotations

import pytest

from conftest import make_tiny_llama
from medpref import REPO_ROOT
from medpref.llm.hf import HFBackend, StopStrings, batch_chunks
from medpref.llm.types import ChatRequest, GenerationParams

TOKENIZER = REPO_ROOT / "models" / "smollm2-135m-instruct"
PROMPTS = [[{"role": "user", "content": "Say hello."}],
           [{"role": "user", "content": "I have had a dry cough for two weeks. What is it?"}],
           [{"role": "user", "content": "My ankle is swollen after a fall."}],
           [{"role": "user", "content": "Headache."}]]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(TOKENIZER)


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory, tokenizer):
    return make_tiny_llama(tmp_path_factory.mktemp("tiny-llama-stop"), tokenizer)


def test_stop_strings_end_each_row_where_the_text_holds_one(tokenizer):
    import torch

    def enc(text):
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    prompt = enc("Q: how are you?")
    stop_row = enc(" fine.\nPatient: hi")
    n = len(stop_row)
    plain_row = enc(" fine and well today, thank you for asking, doctor " * 3)[:n]
    eos_row = enc(" ok" * n)[:n - 1] + [tokenizer.eos_token_id]
    ids = torch.tensor([prompt + r for r in (stop_row, plain_row, eos_row)])
    stopper = StopStrings(tokenizer, ["\nPatient:"], len(prompt))
    assert stopper(ids, None).tolist() == [True, False, True]
    assert stopper.ended_at == [n, None, n]
    # a row that has stopped stays stopped (later tokens are padding)
    assert stopper(torch.cat([ids, ids[:, -1:]], dim=1), None).tolist() == [True, False, True]


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_same_text_with_and_without_stopping_inside_generate(tiny_model_dir, temperature):
    """Up to the stop the text is the one generating everything and cutting gives; the
    rows that met a stop generated fewer tokens."""
    backend = HFBackend(str(tiny_model_dir), batch_size=4)
    params = GenerationParams(max_new_tokens=40, temperature=temperature, seed=7,
                              stop=("e", "a"))
    requests = [ChatRequest.of(p, params, prefix="Doctor:") for p in PROMPTS]
    backend.stop_in_generate = False
    cut_after = backend.generate(requests)
    backend.stop_in_generate = True
    stopped = backend.generate(requests)
    assert [c.text for c in stopped] == [c.text for c in cut_after]
    assert [c.finish_reason for c in stopped] == [c.finish_reason for c in cut_after]
    assert all(s.tokens_out <= c.tokens_out for s, c in zip(stopped, cut_after))
    early = [s for s in stopped if s.finish_reason == "stop"]
    assert early and all(s.tokens_out < 40 for s in early)
    assert sum(s.tokens_out for s in stopped) < sum(c.tokens_out for c in cut_after)


def test_without_stop_strings_generation_is_untouched(tiny_model_dir):
    backend = HFBackend(str(tiny_model_dir), batch_size=4)
    params = GenerationParams(max_new_tokens=12)
    requests = [ChatRequest.of(p, params) for p in PROMPTS]
    comps = backend.generate(requests)
    assert all(c.tokens_out == 12 or c.finish_reason == "stop" for c in comps)


def test_batches_keep_shared_beginnings_together_and_sort_the_rest():
    rule_a = list(range(100, 140))                 # 40 shared tokens
    ids = [[1, 2, 3, 4, 5, 6],                     # 0: alone, length 6
           rule_a + [7, 8, 9],                     # 1: rule A, length 43
           [9, 9],                                 # 2: alone, length 2
           rule_a + [7],                           # 3: rule A, length 41
           rule_a[:10] + [5] * 40]                 # 4: shares only 10 tokens: alone
    assert batch_chunks(ids, batch_size=8, shared_min=32) == [[3, 1], [2, 0, 4]]


def test_a_batch_never_mixes_two_shared_runs():
    """Six rules asked of one state share the state; a batch of 8 holding six of one
    state and two of another would share only the system prompt, so runs are cut apart
    (and a run longer than the batch is split), and the rest is batched by length."""
    state_a, state_b = list(range(100, 160)), list(range(200, 260))
    ids = ([state_a + [r] for r in range(6)] + [state_b + [r] for r in range(6)]
           + [[1, 2], [3, 4, 5]])
    chunks = batch_chunks(ids, batch_size=8, shared_min=32)
    assert [sorted(c) for c in chunks] == [list(range(6)), list(range(6, 12)), [12, 13]]
    assert [len(c) for c in batch_chunks(ids, batch_size=4, shared_min=32)] == [4, 2, 4, 2, 2]


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_a_shared_beginning_run_once_gives_the_same_answers(tiny_model_dir, temperature):
    """Prompts that share a long beginning (the chat template's system prompt here)
    generate on one key/value cache of it: the same text as left-padded whole prompts."""
    shared = HFBackend(str(tiny_model_dir), batch_size=4)
    plain = HFBackend(str(tiny_model_dir), batch_size=4)
    plain.shared_prefix_min = 10**9
    params = GenerationParams(max_new_tokens=16, temperature=temperature, seed=3)
    system = {"role": "system", "content": "You rate a doctor's last turn against a rule: "
              "gather and verify the patient's condition before diagnosing. " * 2}
    requests = [ChatRequest.of([system, *p], params, prefix="Doctor:") for p in PROMPTS]
    tok, _ = shared._ensure_loaded()
    ids = [tok(shared.render(r.messages, r.prefix), add_special_tokens=False)["input_ids"]
           for r in requests]
    _, cache = shared._batch_inputs(ids)
    assert cache is not None, "the test prompts should share the system prompt"
    got, want = shared.generate(requests), plain.generate(requests)
    assert [c.text for c in got] == [c.text for c in want]
    assert [c.tokens_in for c in got] == [len(x) for x in ids]


def test_a_model_is_loaded_once_per_process_and_key(tiny_model_dir):
    """Every backend (role) naming the same folder, adapter, device and dtype shares one
    loaded model; another dtype is another load."""
    from medpref.llm.hf import load_model

    a = HFBackend(str(tiny_model_dir), batch_size=2)._ensure_loaded()
    b = HFBackend(str(tiny_model_dir), batch_size=8)._ensure_loaded()
    assert a[1] is b[1] and a[0] is b[0]
    assert load_model(tiny_model_dir, dtype="bfloat16")[1] is not a[1]
