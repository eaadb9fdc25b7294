"""The Read step: each model configuration answers the question with its evidence.

A configuration's evidence is the top ``read_top_k`` attribute items retrieved with its
query (distilled by its own role, or a baseline query); ``retrieval: none`` answers
closed-book with a prompt that mentions no evidence. Conversations of configurations
that share a role go to the model in one batch.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass

from medpref.contracts import MedicineQAItem
from medpref.llm.client import LLMClient
from medpref.llm.types import CallSpec
from medpref.medqa.config import MedQAParams, ModelConfig
from medpref.medqa.database import MedicineTree, attribute_label
from medpref.medqa.retrieval import RetrievalResult
from medpref.medqa.sources import source_of
from medpref.prompts import PromptTemplate, format_dialogue, load_prompt


@dataclass(frozen=True)
class Answer:
    item_id: str
    config: str
    role: str
    model_id: str
    retrieval: str
    evidence_keys: list
    text: str
    finish_reason: str | None
    error: str | None

    def to_record(self) -> dict:
        return asdict(self)


def format_evidence(tree: MedicineTree, item_indices: Sequence[int]) -> str:
    """Numbered evidence lines: ``[1] metformin, contraindications: ...``."""
    lines = []
    for n, i in enumerate(item_indices, start=1):
        it = tree.items[i]
        med = next(m for m in tree.medicines if m.generic_name == it.medicine)
        lines.append(f"[{n}] {it.medicine}, {attribute_label(it.attribute)}: "
                     f"{med.attributes[it.attribute]}")
    return "\n".join(lines)


def read_messages(template: PromptTemplate, item: MedicineQAItem, max_turns: int,
                  evidence: str | None) -> list[dict[str, str]]:
    values = {"history": format_dialogue(item.history[-max_turns:]), "question": item.question}
    if evidence is not None:
        values["evidence"] = evidence
    return template.render(**values)


#: (config, item id) → indices of the evidence items, for configurations that retrieve.
EvidenceLookup = Callable[[ModelConfig, str], Sequence[int]]


def read_answers(configs: Sequence[ModelConfig], items: Sequence[MedicineQAItem],
                 clients: Mapping[str, LLMClient], tree: MedicineTree,
                 evidence_of: EvidenceLookup, calls: Mapping[str, CallSpec],
                 templates: Mapping[str, PromptTemplate], max_turns: int) -> list[Answer]:
    """Answers of every configuration to every item (one batch per role).

    ``calls`` maps a configuration's name to its call, ``templates`` a prompt name to
    its template and ``clients`` a role to its client.
    """
    jobs: dict[str, list[tuple[ModelConfig, MedicineQAItem, list[int]]]] = defaultdict(list)
    for cfg in configs:
        for item in items:
            keys = [] if cfg.retrieval == "none" else list(evidence_of(cfg, item.id))
            jobs[cfg.role].append((cfg, item, keys))
    answers: list[Answer] = []
    for role, role_jobs in jobs.items():
        client = clients[role]
        requests = [client.request(read_messages(
            templates[calls[cfg.name].prompt], item, max_turns,
            None if cfg.retrieval == "none" else format_evidence(tree, keys)), calls[cfg.name])
            for cfg, item, keys in role_jobs]
        completions = client.complete(requests)
        for (cfg, item, keys), comp in zip(role_jobs, completions):
            answers.append(Answer(item.id, cfg.name, role, client.model_id, cfg.retrieval,
                                  [list(tree.items[i].key) for i in keys], comp.text,
                                  comp.finish_reason, comp.error))
    return answers


def read_subset(items: Sequence[MedicineQAItem], n: int, seed: int) -> list[MedicineQAItem]:
    """A seeded sample of ``n`` questions (in file order) for the Read step and battles."""
    picked = sorted(random.Random(seed).sample(range(len(items)), min(n, len(items))))
    return [items[i] for i in picked]


def run_read(p: MedQAParams, clients: Mapping[str, LLMClient], tree: MedicineTree,
             subset: Sequence[MedicineQAItem], results: Mapping[str, Sequence[RetrievalResult]]
             ) -> list[Answer]:
    """Every configuration's answer to every question of the read subset."""
    by_source = {s: {r.item_id: r for r in res} for s, res in results.items()}

    def evidence_of(cfg: ModelConfig, item_id: str) -> Sequence[int]:
        return by_source[source_of(cfg)][item_id].top_items[:p.read_top_k]

    calls = {m.name: p.read_call(m) for m in p.models}
    templates = {c.prompt: load_prompt(c.prompt) for c in calls.values()}
    return read_answers(p.models, subset, clients, tree, evidence_of, calls, templates,
                        p.history_max_turns)
