"""The registry of paper artefacts: which stage file feeds which paper table or figure."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from medpref.params import StrictModel


class Published(StrictModel):
    """The paper's own rows, shown beside ours and labelled as the paper's."""

    note: str = ""
    rows: dict[str, list[float | str]] = Field(default_factory=dict)


class ArtefactSpec(StrictModel):
    id: str
    paper: str
    label: str
    stage: str
    kind: Literal["table", "figure"] = "table"
    source: str
    row: str | None = None
    rows: list[str] | None = None
    exclude_rows: list[str] = Field(default_factory=list)   # by the first row column
    filter: dict[str, str] = Field(default_factory=dict)
    columns: dict[str, str] = Field(default_factory=dict)
    scale: dict[str, float] = Field(default_factory=dict)
    published: Published | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ArtefactSpec:
        if self.kind == "table" and (not self.row or not self.columns):
            raise ValueError(f"table artefact '{self.id}' needs `row` and `columns`")
        unknown = set(self.scale) - set(self.columns)
        if unknown:
            raise ValueError(f"artefact '{self.id}': scale names unknown headers {sorted(unknown)}")
        if self.published:
            for label, values in self.published.rows.items():
                if len(values) != len(self.columns):
                    raise ValueError(f"artefact '{self.id}': published row '{label}' has "
                                     f"{len(values)} values for {len(self.columns)} columns")
        return self


HEADLINE_NAME_MAX = 16   # `dvc metrics show` prints one column per headline


class Headline(StrictModel):
    """One number a user compares across experiments: ``key`` (a path of nested keys)
    in a stage's ``metrics.json``. Stage 09's ``metrics.json`` holds the headlines only,
    so ``dvc metrics show`` and ``dvc exp show`` stay one screen wide."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$", max_length=HEADLINE_NAME_MAX)
    source: str
    key: list[str] = Field(min_length=1)


class Registry(StrictModel):
    artefacts: list[ArtefactSpec]
    headlines: list[Headline] = Field(default_factory=list)
    # rows that are controls, not a paper's systems (the DPO run control_process, its
    # annotation pairs): left out of every table (each artefact's exclude_rows gets them)
    controls: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _controls_excluded(self) -> Registry:
        for spec in self.artefacts:
            spec.exclude_rows = [*spec.exclude_rows,
                                 *[c for c in self.controls if c not in spec.exclude_rows]]
        return self

    @model_validator(mode="after")
    def _unique_ids(self) -> Registry:
        for kind, ids in (("artefact ids", [a.id for a in self.artefacts]),
                          ("headline names", [h.name for h in self.headlines])):
            dupes = sorted({i for i in ids if ids.count(i) > 1})
            if dupes:
                raise ValueError(f"duplicate {kind} {dupes}")
        return self


def load_registry(path: str | Path) -> Registry:
    """Read and validate the registry; an error names the file and the artefact."""
    path = Path(path)
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    try:
        return Registry.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise ValueError(f"{path}: '{loc}': {err['msg']}") from None
