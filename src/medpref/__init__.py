"""MedPref: reproducible medical-dialogue preference alignment (PLPF and friends)."""

import os
from pathlib import Path

__version__ = "0.1.0"


def find_repo_root(cwd: Path | None = None, environ: dict | None = None) -> Path:
    """The checkout a run reads and writes: ``$MEDPREF_ROOT``; else the current folder
    when it is a MedPref checkout; else the checkout this package was loaded from.

    dvc runs every stage from its workspace root, and for ``dvc exp run --temp/--queue``
    that workspace is a copy under ``.dvc/tmp/exps`` while an editable install still
    imports the package from the main checkout: without the current-folder rule an
    experiment would read the main checkout's params.yaml and write into its data/."""
    environ = os.environ if environ is None else environ
    if environ.get("MEDPREF_ROOT"):
        return Path(environ["MEDPREF_ROOT"]).resolve()
    cwd = Path.cwd() if cwd is None else cwd
    if all((cwd / name).exists() for name in ("dvc.yaml", "params.yaml", "src/medpref")):
        return cwd.resolve()
    return Path(__file__).resolve().parents[2]


#: Repository root (see :func:`find_repo_root`).
REPO_ROOT = find_repo_root()
