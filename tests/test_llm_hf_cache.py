"""The local backend's key/value cache grows in place (medpref.llm.hf.growing_cache): every
answer, greedy or sampled, with or without a shared prompt beginning, is the one
transformers' own DynamicCache gives, token for token and score for score."""

from __future__ import annotations

import pytest

from conftest import make_tiny_llama
from medpref import REPO_ROOT
from medpref.llm import hf
from medpref.llm.hf import HFBackend
from medpref.llm.types import ChatRequest, GenerationParams

TOKENIZER = REPO_ROOT / "models" / "smollm2-135m-instruct"
SYSTEM = {"role": "system", "content": "You are a doctor in an online consultation. Ask one "
          "question at a time about the patient's symptoms before you give any advice."}
PATIENTS = ["I have had a dry cough for two weeks.", "My ankle is swollen after a fall.",
            "Headache since this morning.", "I feel tired all the time and always thirsty.",
            "Rash on both arms."]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoTokenizer

    return make_tiny_llama(tmp_path_factory.mktemp("grow") / "base",
                           AutoTokenizer.from_pretrained(TOKENIZER), max_positions=1024)


def _answers(tiny, params, share: bool, monkeypatch, plain: bool):
    backend = HFBackend(str(tiny), batch_size=3, device="cpu")
    if not share:
        monkeypatch.setattr(backend, "shared_prefix_min", 10**6)
    if plain:
        monkeypatch.setattr(hf, "growing_cache", lambda cache=None: cache)
    reqs = [ChatRequest.of([SYSTEM, {"role": "user", "content": p}], params) for p in PATIENTS]
    out = [(c.text, c.tokens_out) for c in backend.generate(reqs)]
    monkeypatch.undo()
    return out


@pytest.mark.parametrize("share", [True, False])
@pytest.mark.parametrize("sampled", [False, True])
def test_growing_cache_gives_the_dynamic_caches_answers(tiny, share, sampled, monkeypatch):
    """300 new tokens: the buffer is outgrown once (prompt + 256 + a quarter) and copied."""
    params = GenerationParams(max_new_tokens=300, temperature=0.8 if sampled else 0.0,
                              seed=7 if sampled else None)
    ours = _answers(tiny, params, share, monkeypatch, plain=False)
    theirs = _answers(tiny, params, share, monkeypatch, plain=True)
    assert ours == theirs
    assert all(n == 300 for _, n in ours)          # every row ran past the first buffer


def test_growing_layer_scores_equal_bit_for_bit(tiny):
    """Step by step, the logits of the grown cache and of DynamicCache are equal tensors,
    after a shared prefix repeated over rows (the prefix path's first update copies it)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny).eval()
    torch.manual_seed(0)
    prefix = torch.randint(5, 500, (1, 40))
    rest = torch.randint(5, 500, (3, 7))

    def steps(cache_of):
        with torch.inference_mode():
            cache = model(input_ids=prefix, use_cache=True).past_key_values
            for layer in cache.layers:
                layer.batch_repeat_interleave(3)
            cache = cache_of(cache)
            out = model(input_ids=rest, past_key_values=cache, use_cache=True)
            logits = [out.logits[:, -1]]
            for _ in range(300):
                nxt = logits[-1].argmax(-1, keepdim=True)
                logits.append(model(input_ids=nxt, past_key_values=cache,
                                    use_cache=True).logits[:, -1])
        return logits, cache

    ours, cache = steps(hf.growing_cache)
    theirs, _ = steps(lambda c: c)
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))
    assert type(cache.layers[0]).__name__ == "GrowingLayer"
    assert cache.layers[0].keys.shape[-2] == 40 + 7 + 300


@pytest.fixture(scope="module")
def tiny_lora(tiny, tmp_path_factory):
    """A random LoRA adapter of the tiny llama (B not zero, so it changes the answers)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(3)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny), LoraConfig(
        r=4, lora_alpha=32, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    path = tmp_path_factory.mktemp("grow-lora") / "lora"
    model.save_pretrained(path)
    return path


def _seeded(tiny, adapter, share: bool, reuse: bool, monkeypatch, k: int = 3):
    """k seeds of each prompt in one call, as the REM's sampled scorer asks them."""
    backend = HFBackend(str(tiny), adapter=str(adapter) if adapter else None, batch_size=3,
                        device="cpu")
    monkeypatch.setattr(backend, "reuse_prefill", reuse)
    if not share:
        monkeypatch.setattr(backend, "shared_prefix_min", 10**6)
    replayed = []
    real = hf._FirstPass.__enter__

    def spy(self):
        replayed.append(self.kept is not None)
        return real(self)

    monkeypatch.setattr(hf._FirstPass, "__enter__", spy)
    reqs = [ChatRequest.of([SYSTEM, {"role": "user", "content": p}],
                           GenerationParams(max_new_tokens=40, temperature=0.9, seed=11 + j))
            for p in PATIENTS for j in range(k)]
    out = [(c.text, c.tokens_out, c.tokens_in) for c in backend.generate(reqs)]
    monkeypatch.undo()
    return out, replayed


@pytest.mark.parametrize("share", [True, False])
@pytest.mark.parametrize("lora", [False, True])
def test_seeds_of_one_prompt_read_it_once_and_answer_as_alone(tiny, tiny_lora, share, lora,
                                                               monkeypatch):
    """The REM's k samples: every seed after the first decodes from a copy of the first's
    reading of the batch, and every answer is the one it gives read afresh."""
    adapter = tiny_lora if lora else None
    ours, replayed = _seeded(tiny, adapter, share, True, monkeypatch)
    theirs, none = _seeded(tiny, adapter, share, False, monkeypatch)
    assert ours == theirs
    assert not any(none)
    batches = 2                                    # 5 prompts, 3 a batch
    assert replayed.count(True) == 2 * batches and replayed.count(False) == batches
    assert len({t for t, _, _ in ours}) > len(PATIENTS)     # the seeds differ


def test_only_seed_siblings_share_a_reading(tiny, monkeypatch):
    """Other settings, other prompts or greedy decoding: each group reads its own."""
    greedy = GenerationParams(max_new_tokens=5)
    a, b = (GenerationParams(max_new_tokens=5, temperature=0.9, seed=s) for s in (1, 2))
    hotter = GenerationParams(max_new_tokens=5, temperature=1.2, seed=3)
    ids = {0: [1, 2], 1: [1, 2], 2: [1, 2], 3: [1, 2], 4: [3, 4], 5: [1, 2], 6: [1, 2]}
    groups = {greedy: [0], a: [1], b: [2], hotter: [3], GenerationParams(
        max_new_tokens=5, temperature=0.9, seed=9): [4],
        GenerationParams(max_new_tokens=5, seed=1): [5]}
    got = hf._seed_siblings(groups, ids.__getitem__, True)
    assert [len(s) for s in got] == [1, 2, 1, 1, 1]
    assert got[1] == [a, b]
    assert all(len(s) == 1 for s in hf._seed_siblings(groups, ids.__getitem__, False))
