"""The controls by name: annotation strategies (stage 04) that are not strategies of the
papers, and the DPO runs (stage 05) trained on their pairs.

A control's pairs are planted (``control_process``: the real turn that takes the history
over a premature diagnosis) to show that the DPO recipe can move a policy at all; its run
trains like the others, the runs table marks it and the paper tables leave it out. The
names live here, below both stages, so a reader of run names (stage 05's runs table, the
trained policies stage 06 asks for, stage 09) knows them without importing the modules
that build them; each such strategy registers with ``control=True`` (checked against
this list by :func:`medpref.annotation.strategies.register_strategy`).
"""

from __future__ import annotations

CONTROLS = frozenset({"control_process"})


def is_control(name: str) -> bool:
    """Whether strategy (or DPO run) ``name`` is a control (:data:`CONTROLS`)."""
    return name in CONTROLS
