"""Adapters from the real public data sets into the contract shapes: the registry.

One module per data set does the work; this module re-exports their loaders (the names
other code imports from here) and lists them by source:

===============  ========================================  =================================
source           file(s)                                   ids
===============  ========================================  =================================
``mts-dialog``   ``mts-dialog/Main-Dataset/*.csv``         ``mts-<split>-<ID:04d>``
``mts-dialog``   ``mts-dialog/Correlation-Study``          ``mts-corr-s<system>-<ID:04d>``
``aci-bench``    ``aci-bench/challenge_data/*.csv``        ``aci-<split>-<encounter_id>``
``agentclinic``  ``agentclinic/agentclinic_medqa.jsonl``   ``agentclinic-<line:04d>``
``agentclinic``  ``agentclinic/agentclinic_<name>.jsonl``  ``agentclinic-<name>-<line:04d>``
``cspt``         CSPT archives or folders (user supplied)  ``cspt-<department>-<NN>``
===============  ========================================  =================================

ACI-Bench splits: train, valid, test1, test2, test3 (:data:`ACI_SPLITS`, each with its
metadata file); AgentClinic files: medqa, medqa_extended, nejm, nejm_extended
(:data:`AGENTCLINIC_FILES`).

The first three are read from the shared data directory (:func:`shared_data_dir`);
CSPT, which only users hold, from the folder or zip they name. A row that cannot be converted
raises :class:`~medpref.contracts.ContractError` naming the file, the line where the row
starts and the field; with ``skip_bad=True`` such rows are skipped and counted instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from medpref.data.aci_bench import (
    ACI_COLUMNS,
    ACI_DIR,
    ACI_METADATA,
    ACI_SPLITS,
    aci_dialogues,
    aci_notes,
    load_aci_bench,
    split_note_sections,
)
from medpref.data.agentclinic import (
    AGENTCLINIC_FILE,
    AGENTCLINIC_FILES,
    agentclinic_cases,
    checklist_tests,
    flatten_value,
)
from medpref.data.cspt import (
    CSPT_DEPARTMENTS,
    CsptNotFoundError,
    CsptReport,
    cspt_cases,
    load_cspt,
)
from medpref.data.mts_dialog import (
    MTS_COLUMNS,
    MTS_CORR_DIR,
    MTS_CORR_HUMAN_MAP,
    MTS_CORR_SCORES,
    MTS_CORR_SUMMARIES,
    MTS_DIR,
    MTS_SPLITS,
    load_mts_correlation_study,
    load_mts_dialog,
    mts_dialogues,
    mts_notes,
)
from medpref.data.readers import ENV_VAR, shared_data_dir
from medpref.data.sp_cases import embedded_sp_cases
from medpref.data.tagged_dialogue import DEFAULT_SPEAKERS, parse_tagged_dialogue, speaker_labels

# Loaders by the name a params file uses for a source.
DIALOGUE_SOURCES: dict[str, Callable[..., list[Any]]] = {
    "mts_dialog": mts_dialogues, "aci_bench": aci_dialogues}
NOTE_SOURCES: dict[str, Callable[..., list[Any]]] = {
    "mts_dialog": mts_notes, "aci_bench": aci_notes}
SP_CASE_SOURCES: dict[str, Callable[..., list[Any]]] = {
    "embedded": embedded_sp_cases, "agentclinic": agentclinic_cases, "cspt": cspt_cases}

__all__ = [
    "ACI_COLUMNS", "ACI_DIR", "ACI_METADATA", "ACI_SPLITS", "AGENTCLINIC_FILE",
    "AGENTCLINIC_FILES", "CSPT_DEPARTMENTS", "CsptNotFoundError", "CsptReport",
    "DEFAULT_SPEAKERS", "DIALOGUE_SOURCES", "ENV_VAR", "MTS_COLUMNS", "MTS_CORR_DIR",
    "MTS_CORR_HUMAN_MAP", "MTS_CORR_SCORES", "MTS_CORR_SUMMARIES", "MTS_DIR", "MTS_SPLITS",
    "NOTE_SOURCES", "SP_CASE_SOURCES", "aci_dialogues", "aci_notes", "agentclinic_cases",
    "checklist_tests", "cspt_cases", "embedded_sp_cases", "flatten_value", "load_aci_bench",
    "load_cspt", "load_mts_correlation_study", "load_mts_dialog", "mts_dialogues", "mts_notes",
    "parse_tagged_dialogue", "shared_data_dir", "speaker_labels", "split_note_sections",
]
