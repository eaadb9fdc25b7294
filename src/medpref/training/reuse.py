"""DPO runs whose training is the same share one adapter: a later run copies it.

Two entries of ``training.dpo.runs`` can hold identical pairs (on the tiny default a grid
cell equals a strategy's file: ``grid_avg_3`` = ``cai_avg``); trained twice they give
byte-identical adapters. Each run is its own DVC stage (``training_dpo@<run>``) with its
own out folder, so one run cannot hand its adapter to another through DVC. Instead a run
looks, before it trains, in the other runs' out folders for a card with the same *share
key* — a hash of everything that decides the adapter: the pairs as the trainer gets them,
the recipe, the hardware, seed, beta, loss, ``eval_pairs``, the base model, the SFT adapter, the
training code and the library versions — whose adapter still has the weights hash its
card recorded, and copies that adapter into its own out folder. Its DVC out is then a
complete adapter either way; a run that finds none (run alone on a fresh clone, or the
other run is stale) trains, with the same result. A copy is a cache hit, never another
answer, so ``dvc repro`` stays correct whatever order the runs execute in.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

from medpref.finetune.runs import FIT_RECORD, read_run_card, run_key
from medpref.finetune.sft import TASK_CARD
from medpref.identity import content_id

#: libraries whose version can change a trained adapter
LIBRARIES = ("torch", "transformers", "trl", "peft", "accelerate", "datasets")


def sha_of_files(files: list[Path]) -> str:
    """sha256 (16 hex digits) of the files' bytes, in the given order."""
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def pairs_sha(path: str | Path) -> str:
    """Content identity of a pairs file (its SHA-256, 16 hex digits)."""
    return content_id(path)


def adapter_sha(adapter_dir: str | Path) -> str:
    """Content identity of an adapter folder (weights and canonical config), the same
    identity that keys its cached answers (:func:`medpref.identity.content_id`)."""
    if not any(Path(adapter_dir).glob("*.safetensors")):
        raise FileNotFoundError(f"{adapter_dir}: no adapter weights")
    return content_id(adapter_dir)


def code_digest() -> str:
    """Hash of the training package's source (a code change is a different training)."""
    here = Path(__file__).parent
    return sha_of_files(sorted(here.glob("*.py")))


def share_key(**parts: Any) -> str:
    """The share key of a run: ``parts`` (what the stage decides) plus the code and the
    library versions."""
    versions = {name: metadata.version(name) for name in LIBRARIES}
    return run_key(**parts, code=code_digest(), libraries=versions)


def find_same_training(candidates: dict[str, Path], key: str) -> str | None:
    """The first run (in ``candidates`` order: run → out folder) whose card says it was
    trained with ``key`` and whose adapter still has the weights its card recorded."""
    for run, out_dir in candidates.items():
        card = read_run_card(out_dir)
        if not card or card.get("status") != "trained" or card.get("share_key") != key:
            continue
        adapter = Path(out_dir) / "adapter"
        try:
            intact = adapter_sha(adapter) == card.get("adapter_sha")
        except FileNotFoundError:
            intact = False
        if intact and (Path(out_dir) / FIT_RECORD).exists():
            return run
    return None


def copy_training(source_dir: str | Path, out_dir: str | Path,
                  task_card: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Copy a run's adapter (its task card updated with ``task_card``: this run's name and
    pairs file) and its fit record into ``out_dir``, swapping the adapter in atomically;
    returns (the source's card, its fit record)."""
    source_dir, out_dir = Path(source_dir), Path(out_dir)
    card = read_run_card(source_dir)
    fit_record = json.loads((source_dir / FIT_RECORD).read_text(encoding="utf-8"))
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".adapter-", dir=out_dir))
    try:
        shutil.copytree(source_dir / "adapter", tmp, dirs_exist_ok=True)  # follows links
        card_path = tmp / TASK_CARD
        old = json.loads(card_path.read_text(encoding="utf-8")) if card_path.exists() else {}
        card_path.write_text(json.dumps({**old, **task_card}, indent=2, sort_keys=True) + "\n",
                             encoding="utf-8")
        tmp.chmod(0o755)
        for f in tmp.iterdir():
            f.chmod(0o644)
        shutil.rmtree(out_dir / "adapter", ignore_errors=True)
        tmp.rename(out_dir / "adapter")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return card, fit_record
