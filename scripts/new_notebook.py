"""Write a pipeline notebook from a list of cells, committed without outputs.

Usage from Python:  from new_notebook import write_notebook
    write_notebook("notebooks/01_x.ipynb",
                   [("md", "# Title"), ("params", "a = 1"), ("code", "...")])

Cells: ("md", text) markdown, ("params", code) the papermill `parameters` cell, ("code", code).
Every notebook uses the `medpref` kernel that `make setup` registers.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat


def write_notebook(path: str | Path, cells: list[tuple[str, str]]) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"name": "medpref", "display_name": "MedPref (.venv)",
                                  "language": "python"},
                   "language_info": {"name": "python"}}
    for kind, src in cells:
        src = src.strip("\n")
        if kind == "md":
            nb.cells.append(nbformat.v4.new_markdown_cell(src))
        else:
            cell = nbformat.v4.new_code_cell(src)
            if kind == "params":
                cell.metadata["tags"] = ["parameters"]
            nb.cells.append(cell)
    for i, cell in enumerate(nb.cells):  # stable ids: clean diffs when regenerated
        cell["id"] = f"cell-{i:02d}"
    nbformat.validate(nb)
    Path(path).write_text(nbformat.writes(nb) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit("import write_notebook from this module; see the docstring")
