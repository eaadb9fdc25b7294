"""One archive of what a rerun needs to make no model call: the LLM caches (and outputs).

``export`` packs every stage's cache file ``<cache_dir>/*.sqlite`` — and, on request, the
DVC-cached outputs recorded in ``dvc.lock`` — into a ``.tar.gz`` with a ``MANIFEST.json``
that names each file with its size and SHA-256. The archive is deterministic (sorted
members, zero times and owners), so the same files give the same bytes.

``import_archive`` checks every member against the manifest before it writes anything,
refuses paths outside the repository, and leaves identical files alone. On a fresh clone
the restored caches make ``dvc repro`` answer every model call from the cache (0 calls in
the ledgers); restored outputs make the stages they belong to up to date.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import sqlite3
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import yaml

MANIFEST = "MANIFEST.json"
FORMAT = "medpref-cache/1"
DEFAULT_CACHE_DIR = "data/cache/llm"


class ArchiveError(RuntimeError):
    """A cache archive that cannot be written or restored; the message says which file."""


@dataclass
class ImportReport:
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def cache_dir(root: Path) -> Path:
    """``shared.llm.cache_dir`` from the repository's params.yaml (its default if unset)."""
    params = root / "params.yaml"
    raw = yaml.safe_load(params.read_text(encoding="utf-8")) if params.exists() else {}
    rel = ((raw or {}).get("shared") or {}).get("llm", {}).get("cache_dir", DEFAULT_CACHE_DIR)
    return root / rel


def checkpoint(sqlite_path: Path) -> None:
    """Fold a WAL file into its database, so the one file holds every cached answer."""
    wal = sqlite_path.with_name(sqlite_path.name + "-wal")
    if wal.exists() and wal.stat().st_size:
        conn = sqlite3.connect(sqlite_path)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()


def llm_cache_files(root: Path) -> list[Path]:
    return sorted(cache_dir(root).glob("*.sqlite"))


def git_tracked(root: Path) -> set[str]:
    """Files git tracks under ``root`` (empty outside a git work tree)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return set()
    return {p for p in out.decode().split("\0") if p}


def dvc_output_files(root: Path) -> list[Path]:
    """Every file of every ``outs`` entry in dvc.lock that git does not track (the
    DVC-cached data products and executed notebooks; committed tables are in git)."""
    lock = root / "dvc.lock"
    if not lock.exists():
        raise ArchiveError(f"{lock}: not found (run dvc repro once before exporting outputs)")
    stages = (yaml.safe_load(lock.read_text(encoding="utf-8")) or {}).get("stages", {})
    tracked = git_tracked(root)
    files: set[Path] = set()
    for stage in stages.values():
        for out in stage.get("outs", []):
            path = root / out["path"]
            found = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else (
                [path] if path.is_file() else [])
            files.update(p for p in found if p.relative_to(root).as_posix() not in tracked)
    return sorted(files)


def _member_name(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


def _tar_add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), 0, 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))


def export_archive(root: Path, dest: Path, with_outputs: bool = False,
                   commit: str = "") -> dict:
    """Write the archive to ``dest``; returns its manifest."""
    root = root.resolve()
    caches = llm_cache_files(root)
    if not caches:
        raise ArchiveError(f"no LLM cache in {cache_dir(root)} (run the pipeline first)")
    for path in caches:
        checkpoint(path)
    entries = [(p, "llm_cache") for p in caches]
    if with_outputs:
        known = set(caches)
        entries += [(p, "dvc_out") for p in dvc_output_files(root) if p not in known]
    blobs = {_member_name(root, p): (p.read_bytes(), kind) for p, kind in entries}
    manifest = {"format": FORMAT, "git_commit": commit,
                "files": {name: {"kind": kind, "size": len(data), "sha256": sha256_bytes(data)}
                          for name, (data, kind) in sorted(blobs.items())}}
    dest.parent.mkdir(parents=True, exist_ok=True)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _tar_add(tar, MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
        for name in sorted(blobs):
            _tar_add(tar, name, blobs[name][0])
    with open(dest, "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", mtime=0,
                                               filename="") as gz:
        gz.write(raw.getvalue())
    return manifest


def _safe_target(root: Path, name: str) -> Path:
    pure = PurePosixPath(name)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts:
        raise ArchiveError(f"{name}: a path outside the repository; refusing the archive")
    return root.joinpath(*pure.parts)


def read_archive(archive: Path) -> tuple[dict, dict[str, bytes]]:
    """The manifest and every member's bytes, each checked against the manifest."""
    with tarfile.open(archive, mode="r:gz") as tar:
        members = {m.name: m for m in tar.getmembers() if m.isfile()}
        if MANIFEST not in members:
            raise ArchiveError(f"{archive}: no {MANIFEST}; not a medpref cache archive")
        manifest = json.loads(tar.extractfile(members[MANIFEST]).read())
        if manifest.get("format") != FORMAT:
            raise ArchiveError(f"{archive}: format {manifest.get('format')!r}, "
                               f"expected {FORMAT!r}")
        blobs: dict[str, bytes] = {}
        for name, meta in manifest["files"].items():
            if name not in members:
                raise ArchiveError(f"{archive}: {name} is in the manifest but not the archive")
            data = tar.extractfile(members[name]).read()
            if sha256_bytes(data) != meta["sha256"]:
                raise ArchiveError(f"{archive}: {name}: SHA-256 differs from the manifest")
            blobs[name] = data
    return manifest, blobs


def import_archive(archive: Path, root: Path, force: bool = False) -> ImportReport:
    """Restore the archive's files under ``root``. A file that exists with other bytes is
    an error unless ``force`` (the archive then wins); identical files are left alone."""
    root = root.resolve()
    _, blobs = read_archive(archive)
    targets = {name: _safe_target(root, name) for name in blobs}
    clashes = [n for n, t in targets.items() if t.exists() and t.read_bytes() != blobs[n]]
    if clashes and not force:
        raise ArchiveError(f"{len(clashes)} file(s) differ from the archive, e.g. {clashes[0]}; "
                           "rerun with --force to overwrite them")
    report = ImportReport()
    for name, target in sorted(targets.items()):
        if target.exists() and target.read_bytes() == blobs[name]:
            report.unchanged.append(name)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.importing")
        tmp.write_bytes(blobs[name])
        tmp.replace(target)
        if target.suffix == ".sqlite":  # a stale WAL of the replaced file must not replay
            for side in ("-wal", "-shm"):
                target.with_name(target.name + side).unlink(missing_ok=True)
        report.written.append(name)
    return report
