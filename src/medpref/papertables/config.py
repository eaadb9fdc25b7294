"""Params of stage 09 (``tables`` section of params.yaml)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from medpref.params import StrictModel
from medpref.stagekit import GuardParams


class TablesParams(StrictModel):
    SECTION: ClassVar[str] = "tables"

    registry: str = "configs/paper_tables.yaml"
    digits: int = Field(1, ge=0, le=6)          # decimals shown in Markdown / LaTeX
    index: str = "reports/index.md"
    guard: GuardParams = Field(
        default_factory=lambda: GuardParams(min_yield=0.0, max_failure_rate=0.0))
