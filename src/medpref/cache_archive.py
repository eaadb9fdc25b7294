"""One archive of what a rerun needs to make no model call: the LLM caches.

``export`` packs every stage's cache file ``<cache_dir>/*.sqlite`` into a ``.tar.gz`` with
a ``MANIFEST.json`` that names each file with its size and SHA-256. The archive is
deterministic (sorted members, zero times and owners), so the same files give the same
bytes and its SHA-256 can be quoted in a paper.

``import_archive`` checks every member against the manifest before it writes anything,
refuses paths outside the repository, and leaves identical files alone. On a fresh clone
the restored caches make ``dvc repro`` answer every model call from the cache (0 calls in
the ledgers). The stages' outputs travel by DVC itself (``dvc push`` / ``dvc pull`` to a
remote), not by this archive.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import sqlite3
import tarfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import yaml

from medpref.identity import sha256_of

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


def _tar_info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, 0, 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _tar_add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    tar.addfile(_tar_info(name, len(data)), io.BytesIO(data))


def export_archive(root: Path, dest: Path, commit: str = "") -> dict:
    """Write the archive to ``dest`` (streamed: files are never held in memory whole);
    returns its manifest."""
    root = root.resolve()
    caches = llm_cache_files(root)
    if not caches:
        raise ArchiveError(f"no LLM cache in {cache_dir(root)} (run the pipeline first)")
    for path in caches:
        checkpoint(path)
    entries = {p.relative_to(root).as_posix(): (p, "llm_cache") for p in caches}
    files = {name: {"kind": kind, "size": p.stat().st_size, "sha256": sha256_of(p)}
             for name, (p, kind) in sorted(entries.items())}
    manifest = {"format": FORMAT, "git_commit": commit, "files": files}
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.writing")
    with open(tmp, "wb") as fh, \
            gzip.GzipFile(fileobj=fh, mode="wb", mtime=0, filename="") as gz, \
            tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        _tar_add(tar, MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
        for name, meta in files.items():
            with open(entries[name][0], "rb") as src:
                tar.addfile(_tar_info(name, meta["size"]), src)
    tmp.replace(dest)
    return manifest


def _safe_target(root: Path, name: str) -> Path:
    pure = PurePosixPath(name)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts:
        raise ArchiveError(f"{name}: a path outside the repository; refusing the archive")
    return root.joinpath(*pure.parts)


def _read_manifest(tar: tarfile.TarFile, archive: Path) -> dict:
    first = tar.next()
    if first is None or first.name != MANIFEST:
        raise ArchiveError(f"{archive}: no {MANIFEST} first; not a medpref cache archive")
    manifest = json.loads(tar.extractfile(first).read())
    if manifest.get("format") != FORMAT:
        raise ArchiveError(f"{archive}: format {manifest.get('format')!r}, expected {FORMAT!r}")
    return manifest


def _extract_checked(tar: tarfile.TarFile, member: tarfile.TarInfo, meta: dict,
                     tmp: Path, archive: Path) -> None:
    """Stream one member into ``tmp`` while hashing it; an error if it differs."""
    h = hashlib.sha256()
    tmp.parent.mkdir(parents=True, exist_ok=True)
    with tar.extractfile(member) as src, open(tmp, "wb") as out:
        for chunk in iter(lambda: src.read(1 << 20), b""):
            h.update(chunk)
            out.write(chunk)
    if h.hexdigest() != meta["sha256"]:
        raise ArchiveError(f"{archive}: {member.name}: SHA-256 differs from the manifest")


def import_archive(archive: Path, root: Path, force: bool = False) -> ImportReport:
    """Restore the archive's files under ``root``. Every member is checked against the
    manifest before any file is replaced; a file that exists with other bytes is an error
    unless ``force`` (the archive then wins); identical files are left alone."""
    root = root.resolve()
    report = ImportReport()
    staged: dict[Path, Path] = {}
    try:
        with tarfile.open(archive, mode="r|gz") as tar:
            manifest = _read_manifest(tar, archive)
            targets = {n: _safe_target(root, n) for n in manifest["files"]}
            same = {n for n, t in targets.items()
                    if t.is_file() and sha256_of(t) == manifest["files"][n]["sha256"]}
            clashes = sorted(n for n, t in targets.items() if t.exists() and n not in same)
            if clashes and not force:
                raise ArchiveError(f"{len(clashes)} file(s) differ from the archive, e.g. "
                                   f"{clashes[0]}; rerun with --force to overwrite them")
            seen = set()
            for member in tar:  # iteration starts again at the manifest: skip it
                if member.name == MANIFEST:
                    continue
                if member.name not in targets or not member.isfile():
                    raise ArchiveError(f"{archive}: {member.name} is not in the manifest")
                seen.add(member.name)
                if member.name in same:
                    report.unchanged.append(member.name)
                    continue
                target = targets[member.name]
                tmp = target.with_name(f".{target.name}.importing")
                staged[tmp] = target
                _extract_checked(tar, member, manifest["files"][member.name], tmp, archive)
            if seen != set(targets):
                missing = sorted(set(targets) - seen)[0]
                raise ArchiveError(f"{archive}: {missing} is in the manifest but not the archive")
    except BaseException:
        for tmp in staged:
            tmp.unlink(missing_ok=True)
        raise
    for tmp, target in sorted(staged.items(), key=lambda kv: kv[1]):
        tmp.replace(target)
        if target.suffix == ".sqlite":  # a stale WAL of the replaced file must not replay
            for side in ("-wal", "-shm"):
                target.with_name(target.name + side).unlink(missing_ok=True)
        report.written.append(target.relative_to(root).as_posix())
    return report
