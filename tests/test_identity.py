"""Models known by their content: one identity for base models, adapters, embedding models
and training inputs; a weight swap behind a folder name misses the cache and shows in
``dvc status``."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from medpref import REPO_ROOT, identity
from medpref.identity import content_id
from medpref.llm.cache import ResponseCache

TOKENIZER = REPO_ROOT / "models" / "smollm2-135m-instruct"


@pytest.fixture(autouse=True)
def own_memo(tmp_path, monkeypatch):
    monkeypatch.setenv("MEDPREF_FINGERPRINTS", str(tmp_path / "memo" / "fingerprints.json"))
    identity.forget_memo()
    yield
    identity.forget_memo()


def model_folder(root: Path, weights: bytes, name: str = "policy-base") -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "model.safetensors").write_bytes(weights)
    return folder


def test_a_file_is_its_sha256_and_a_folder_its_content_files(tmp_path):
    f = tmp_path / "pairs.jsonl"
    f.write_bytes(b'{"a": 1}\n')
    assert content_id(f) == hashlib.sha256(b'{"a": 1}\n').hexdigest()[:16]
    a = model_folder(tmp_path / "a", b"w1")
    b = model_folder(tmp_path / "b", b"w1")
    assert content_id(a) == content_id(b)  # the folder's name and place do not count
    # a card, a training record, a download cache and checkpoints are not the model
    (b / "README.md").write_text("card")
    (b / "medpref_task.json").write_text("{}")
    (b / ".cache").mkdir()
    (b / ".cache" / "x.whl").write_bytes(b"wheel")
    (b / "checkpoint-10").mkdir()
    (b / "checkpoint-10" / "optimizer.pt").write_bytes(b"state")
    assert content_id(b) == content_id(a)
    (b / "tokenizer.json").write_text("{}")  # a tokenizer file is
    assert content_id(b) != content_id(a)
    assert content_id(model_folder(tmp_path / "c", b"w2")) != content_id(a)
    with pytest.raises(FileNotFoundError, match="nothing to identify"):
        content_id(tmp_path / "missing")


def test_an_adapter_saved_by_another_process_has_the_same_identity(tmp_path):
    """peft writes target_modules from a set, so two saves of one training list them in
    different orders: the identity ignores the order, other weights or settings change it."""
    from medpref.finetune.sft import write_canonical_config

    def adapter(name: str, modules: list[str], weights: bytes, r: int = 8) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "adapter_model.safetensors").write_bytes(weights)
        (folder / "adapter_config.json").write_text(json.dumps(
            {"r": r, "target_modules": modules, "peft_type": "LORA"}))
        return folder

    a = adapter("a", ["q_proj", "v_proj", "down_proj"], b"w1")
    b = adapter("b", ["down_proj", "q_proj", "v_proj"], b"w1")
    assert content_id(a) == content_id(b)
    assert content_id(adapter("c", ["q_proj"], b"w1")) != content_id(a)
    assert content_id(adapter("d", ["q_proj", "v_proj", "down_proj"], b"w2")) != content_id(a)
    assert content_id(adapter("e", ["q_proj", "v_proj", "down_proj"], b"w1", r=16)) \
        != content_id(a)
    write_canonical_config(a)
    write_canonical_config(b)
    assert (a / "adapter_config.json").read_bytes() == (b / "adapter_config.json").read_bytes()
    assert json.loads((a / "adapter_config.json").read_text())["target_modules"] == [
        "down_proj", "q_proj", "v_proj"]


def test_weights_are_hashed_once_and_again_only_when_size_or_mtime_change(tmp_path,
                                                                            monkeypatch):
    folder = model_folder(tmp_path, b"w" * 1000)
    reads: list[str] = []
    real = identity.sha256_of
    monkeypatch.setattr(identity, "sha256_of", lambda p: reads.append(Path(p).name) or real(p))
    first = content_id(folder)
    assert sorted(reads) == ["config.json", "model.safetensors"]
    identity.forget_memo()  # a new process: the memo file answers
    assert content_id(folder) == first and len(reads) == 2
    memo = json.loads(identity.memo_path().read_text())
    assert {Path(k).name for k in memo} == {"config.json", "model.safetensors"}
    (folder / "model.safetensors").write_bytes(b"v" * 1001)  # rewritten in place
    assert content_id(folder) != first
    assert reads[2:] == ["model.safetensors"]


def test_swapped_weights_behind_one_folder_name_miss_the_cache(tmp_path, monkeypatch):
    """The README's paper overlay puts a user's model at models/policy-base: replacing it
    must not replay the old model's answers. Real generation with a tiny llama."""
    from transformers import AutoTokenizer

    from conftest import make_tiny_llama
    from medpref.llm.client import LLMClient
    from medpref.llm.hf import HFBackend
    from medpref.llm.types import CallSpec, GenerationParams

    tok = AutoTokenizer.from_pretrained(TOKENIZER)
    folder = make_tiny_llama(tmp_path / "policy-base", tok)
    cache = ResponseCache(tmp_path / "cache" / "test.sqlite")
    params = GenerationParams(temperature=0.0)
    messages = [{"role": "user", "content": "Where does it hurt?"}]

    def ask() -> tuple[LLMClient, int]:
        client = LLMClient("policy", HFBackend(str(folder), device="cpu"), params, cache=cache)
        client.chat(messages, CallSpec("policy", "", 4))
        return client, client.ledger.totals()["total"]["calls"]

    first, calls = ask()
    assert calls == 1
    _, calls = ask()
    assert calls == 0  # same weights: a hit
    import torch
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(folder)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)
    model.save_pretrained(folder)  # new weights, same folder, same name
    swapped, calls = ask()
    assert calls == 1
    assert swapped.identity["model"] == first.identity["model"] == "policy-base"
    assert swapped.identity["weights"] != first.identity["weights"]


def dvc(args: list[str], cwd: Path) -> str:
    out = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=cwd, capture_output=True,
                         text=True, check=True)
    return out.stdout


@pytest.mark.slow
def test_dvc_status_sees_a_weight_swap_in_a_model_folder_and_ignores_the_wheels(tmp_path):
    """The stages depend on the `models` folder (dvc.yaml), with the repository's
    .dvcignore: a swap of weights in a user's model folder changes the stage, the wheel
    cache of `make setup` does not."""
    spec = (REPO_ROOT / "dvc.yaml").read_text(encoding="utf-8")
    import yaml

    stages = yaml.safe_load(spec)["stages"]
    model_stages = [n for n, s in stages.items() if "models" in s.get("do", s).get("deps", [])]
    assert {"sampling", "rem", "annotation", "simulation", "training_sft"} <= set(model_stages)
    assert not any("models/manifest.json" in s.get("do", s).get("deps", [])
                   for s in stages.values())
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    dvc(["init", "-q"], tmp_path)
    shutil.copy(REPO_ROOT / ".dvcignore", tmp_path / ".dvcignore")
    model_folder(tmp_path / "models", b"w1")
    (tmp_path / "models" / ".cache").mkdir()
    (tmp_path / "models" / ".cache" / "llm.whl").write_bytes(b"wheel")
    (tmp_path / "dvc.yaml").write_text(
        "stages:\n  sp_test:\n    cmd: echo ran > out.txt\n    deps:\n      - models\n"
        "    outs:\n      - out.txt\n")
    dvc(["repro", "-q"], tmp_path)
    assert "up to date" in dvc(["status"], tmp_path)
    (tmp_path / "models" / ".cache" / "llm.whl").write_bytes(b"another download")
    assert "up to date" in dvc(["status"], tmp_path)
    (tmp_path / "models" / "policy-base" / "model.safetensors").write_bytes(b"w2")
    status = dvc(["status"], tmp_path)
    assert "sp_test" in status and "modified" in status and "models" in status
