"""The medicine database as a tree, and its sentence embeddings (cached on disk).

RagPULSE stores each medicine M_i as a node whose children are its entity-attribute
items E_ij: the generic name joined with one attribute (indications, usage, ...). The
document key is the generic name (K^n_i); an item's key is (generic name, attribute)
(K^a_ij). Only items are embedded: a medicine is found through its best item, which is
what retrieval at document level means here (:func:`medpref.medqa.retrieval.document_ranking`).

Embedding 312 items with MiniLM takes tens of seconds on a shared CPU, so the item
vectors are a stage output (``medqa.embeddings_cache``) keyed by a fingerprint of the
item texts and the embedding model: a rerun with the same database loads them; any
edit of a text, of ``item_text`` or of the model misses and re-embeds.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from medpref.contracts import Medicine
from medpref.embedding import Encoder

ItemTextMode = Literal["generic_attribute", "generic_brands_attribute"]


@dataclass(frozen=True)
class AttributeItem:
    """One leaf of the tree: a medicine's attribute, as the text that is embedded."""

    medicine: str
    attribute: str
    text: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.medicine, self.attribute)


@dataclass(frozen=True)
class MedicineTree:
    """Medicines (document level) and their attribute items (attribute level), in order."""

    medicines: tuple[Medicine, ...]
    items: tuple[AttributeItem, ...]

    @property
    def names(self) -> list[str]:
        return [m.generic_name for m in self.medicines]

    def children(self, medicine: str) -> list[int]:
        """Indices of a medicine's items (the node's children)."""
        return [i for i, it in enumerate(self.items) if it.medicine == medicine]

    def item_medicines(self) -> list[str]:
        return [it.medicine for it in self.items]


def attribute_label(attribute: str) -> str:
    """``adverse_reactions`` → ``adverse reactions`` (what the embedder reads)."""
    return attribute.replace("_", " ")


def item_text(medicine: Medicine, attribute: str, mode: ItemTextMode) -> str:
    """The text of item E_ij: generic name + attribute (optionally the brand names too)."""
    name = medicine.generic_name
    if mode == "generic_brands_attribute" and medicine.brand_names:
        name = f"{name} ({', '.join(medicine.brand_names)})"
    return f"{name} {attribute_label(attribute)}: {medicine.attributes[attribute]}"


def build_tree(medicines: Sequence[Medicine], mode: ItemTextMode = "generic_attribute"
               ) -> MedicineTree:
    """The tree of the database; generic names must be unique (they are the keys)."""
    seen: set[str] = set()
    items: list[AttributeItem] = []
    for med in medicines:
        if med.generic_name in seen:
            raise ValueError(f"medicine database: generic name '{med.generic_name}' appears "
                             "twice; it is the document key and must be unique")
        seen.add(med.generic_name)
        for attribute in med.attributes:
            items.append(AttributeItem(med.generic_name, attribute,
                                       item_text(med, attribute, mode)))
    return MedicineTree(tuple(medicines), tuple(items))


# -- embeddings -----------------------------------------------------------------------

def texts_fingerprint(texts: Sequence[str], model_id: str) -> str:
    """Content address of a set of embeddings: the texts, in order, and the model."""
    payload = json.dumps({"model": model_id, "texts": list(texts)}, ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def _read_cache(path: Path, fingerprint: str, n: int) -> np.ndarray | None:
    if not path.exists():
        return None
    with np.load(path, allow_pickle=False) as data:
        if str(data["fingerprint"]) != fingerprint or data["embeddings"].shape[0] != n:
            return None
        return data["embeddings"].astype(np.float32)


def _write_cache(path: Path, fingerprint: str, vecs: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, embeddings=vecs, fingerprint=np.array(fingerprint))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def embed_items(tree: MedicineTree, encode: Encoder, cache_path: str | Path,
                model_id: str) -> tuple[np.ndarray, bool]:
    """Item vectors from the cache when its fingerprint matches, else embedded and stored.

    Returns ``(vectors, cache_hit)``; row i belongs to ``tree.items[i]``.
    """
    texts = [it.text for it in tree.items]
    fp = texts_fingerprint(texts, model_id)
    cache_path = Path(cache_path)
    cached = _read_cache(cache_path, fp, len(texts))
    if cached is not None:
        return cached, True
    vecs = encode(texts)
    _write_cache(cache_path, fp, vecs)
    return vecs, False
