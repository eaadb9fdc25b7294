"""Several LoRA adapters of one base model in one batch (medpref.llm.hf.AdapterSet) and
the client call that uses it (medpref.llm.complete_across): every row's greedy answer is
the one its own backend gives alone, the cache and the ledger stay per client."""

from __future__ import annotations

import pytest

from conftest import make_tiny_llama
from medpref import REPO_ROOT
from medpref.llm import CallSpec, GenerationParams, LLMClient, complete_across
from medpref.llm.cache import ResponseCache
from medpref.llm.errors import BackendConfigError
from medpref.llm.hf import AdapterSet, HFBackend
from medpref.llm.ledger import Ledger

TOKENIZER = REPO_ROOT / "models" / "smollm2-135m-instruct"
SYSTEM = {"role": "system", "content": "You are a doctor in an online consultation. Ask one "
          "question at a time about the patient's symptoms before you give any advice."}
PATIENTS = ["I have had a dry cough for two weeks.", "My ankle is swollen after a fall.",
            "Headache since this morning, and the light hurts my eyes.",
            "I feel tired all the time and I am always thirsty.", "Rash on both arms."]
PROMPTS = [[SYSTEM, {"role": "user", "content": p}] for p in PATIENTS]
CALL = CallSpec("policy", "", 12)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny llama and two random LoRA adapters of it (B not zero, so each changes it)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = tmp_path_factory.mktemp("adapter-set")
    base = make_tiny_llama(root / "base", AutoTokenizer.from_pretrained(TOKENIZER))
    adapters = []
    for k, targets in enumerate((["q_proj", "v_proj"], ["q_proj", "k_proj", "v_proj", "o_proj"])):
        torch.manual_seed(10 + k)
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(base), LoraConfig(
            r=4, lora_alpha=32, target_modules=targets, init_lora_weights=False))
        model.save_pretrained(root / f"lora{k}")
        adapters.append(root / f"lora{k}")
    return base, adapters


def backends(tiny, batch_size=4):
    base, adapters = tiny
    return [HFBackend(str(base), adapter=str(a), batch_size=batch_size, device="cpu")
            for a in adapters] + [HFBackend(str(base), batch_size=batch_size, device="cpu")]


@pytest.mark.parametrize("share", [True, False])
def test_mixed_batches_give_each_row_its_own_adapters_answer(tiny, share, monkeypatch):
    """Two adapters and the bare base, 5 prompts each, in batches of 4. With prefix
    sharing the prompts of one adapter (one system prompt) form runs of their own; without
    it (``shared_prefix_min`` out of reach) batches are by length and mix adapters."""
    solo = backends(tiny)
    params = GenerationParams(max_new_tokens=12)
    from medpref.llm.types import ChatRequest

    reqs = [ChatRequest.of(p, params) for p in PROMPTS]
    alone = [[c.text for c in b.generate(reqs)] for b in solo]
    mixed = AdapterSet(backends(tiny))
    if not share:
        monkeypatch.setattr(mixed, "shared_prefix_min", 10**6)
    batches = []
    real = mixed._generate_batch
    monkeypatch.setattr(mixed, "_generate_batch", lambda ids, p, names: (
        batches.append(list(names)), real(ids, p, names))[1])
    seen = []
    got = mixed.generate_parts([reqs] * 3, on_complete=lambda b, i, c: seen.append((b, i)))
    assert [[c.text for c in part] for part in got] == alone
    assert sorted(seen) == [(b, i) for b in range(3) for i in range(5)]
    assert all(len(b) <= 4 for b in batches) and sum(map(len, batches)) == 15
    mixes = [b for b in batches if len(set(b)) > 1]
    assert bool(mixes) is not share, batches
    # the adapters matter: otherwise this test could not tell a row's adapter apart
    assert alone[0] != alone[1] and alone[0] != alone[2] and alone[1] != alone[2]
    assert all(c.tokens_out > 0 and c.tokens_in > 20 for part in got for c in part)


def test_the_shared_prefix_cache_is_per_adapter(tiny):
    """A batch whose prompts share the system prompt: the prefix's keys and values are
    the adapter's own (a LoRA on k/v changes them), so no row reads another's."""
    import torch

    mixed = AdapterSet(backends(tiny))
    tok, model = mixed._ensure_loaded()
    ids = [tok(mixed.render(p), add_special_tokens=False)["input_ids"] for p in PROMPTS[:2]]
    names = mixed.row_names[:2]
    enc, cache = mixed._batch_inputs(ids, names)
    assert cache is not None                                   # the shared-prefix path
    k0 = cache.layers[0].keys
    assert not torch.allclose(k0[0], k0[1])                    # each adapter's own keys
    same, _ = mixed._batch_inputs(ids, [names[0]] * 2)
    assert same["input_ids"].shape == enc["input_ids"].shape


def test_complete_across_caches_and_counts_per_client(tiny, tmp_path):
    ledger = Ledger("test")
    cache = ResponseCache(tmp_path / "c.sqlite")
    clients = [LLMClient(f"policy_{k}", b, GenerationParams(), cache=cache, ledger=ledger)
               for k, b in enumerate(backends(tiny))]
    jobs = [(c, [c.request(p, CALL) for p in PROMPTS]) for c in clients]
    first = complete_across(jobs)
    alone = [[c.text for c in LLMClient("x", b, GenerationParams()).complete(
        [b_req for b_req in reqs])] for b, (_, reqs) in zip(backends(tiny), jobs)]
    assert [[c.text for c in part] for part in first] == alone
    roles = ledger.totals()["roles"]
    assert all(roles[f"policy_{k}"]["calls"] == 5 for k in range(3))
    again = complete_across(jobs)                          # every answer from its own cache key
    assert all(c.cached for part in again for c in part)
    assert [[c.text for c in part] for part in again] == alone
    assert all(roles[f"policy_{k}"]["calls"] == 5 for k in range(3))
    cache.close()


def test_only_adapters_of_one_base_share_a_batch(tiny, tmp_path):
    from transformers import AutoTokenizer

    other = make_tiny_llama(tmp_path / "other", AutoTokenizer.from_pretrained(TOKENIZER),
                            max_positions=256)
    with pytest.raises(BackendConfigError, match="only adapters of one base model"):
        AdapterSet([*backends(tiny), HFBackend(str(other), device="cpu")])
