"""The committed run's provenance: what each stage says it used is what its ledger counted,
and it ran from a committed code tree."""

from __future__ import annotations

import json
import subprocess

import pytest

from medpref import REPO_ROOT


def _provenances():
    return sorted((REPO_ROOT / "reports").rglob("provenance.json"))


@pytest.mark.parametrize("path", _provenances(),
                         ids=lambda p: p.parent.relative_to(REPO_ROOT / "reports").as_posix())
def test_a_committed_provenance_names_exactly_the_roles_its_ledger_counted(path):
    prov = json.loads(path.read_text(encoding="utf-8"))
    ledger_path = path.with_name("ledger.json")
    if not ledger_path.exists():   # a stage without model calls
        assert not prov.get("roles"), path
        return
    ledger = json.loads(ledger_path.read_text(encoding="utf-8"))
    assert "roles" in prov, f"{path}: no roles (written before provenance came from the session)"
    assert set(prov["roles"]) == set(ledger["roles"]), path
    assert all(prov["roles"].values()), path


@pytest.mark.parametrize("path", _provenances(),
                         ids=lambda p: p.parent.relative_to(REPO_ROOT / "reports").as_posix())
def test_a_committed_provenance_comes_from_a_clean_commit(path, changed_deps):
    """A stage ran from a commit; when the tree had uncommitted edits ('+dirty': this
    session's cold run had docs and tests edited while it ran), DVC must still find every
    stage's deps (code, params, data) as its lock recorded them, so the committed files
    are the ones the stage ran."""
    commit = json.loads(path.read_text(encoding="utf-8"))["git_commit"]
    sha = commit.removesuffix("+dirty")
    assert len(sha) == 40 and all(c in "0123456789abcdef" for c in sha), f"{path}: {commit}"
    if commit.endswith("+dirty"):
        assert not changed_deps, (f"{path}: ran from an uncommitted tree and dvc status "
                                  f"finds changed deps: {changed_deps}")


@pytest.fixture(scope="module")
def changed_deps():
    """Stages whose deps (code, params, data) differ from dvc.lock (outputs not read: a
    fresh clone lacks the DVC-cached ones)."""
    import subprocess
    import sys

    dvc = [sys.executable, "-m", "dvc"]
    out = subprocess.run(dvc + ["status", "--json"], cwd=REPO_ROOT, capture_output=True,
                         text=True, check=True).stdout
    status = json.loads(out or "{}")

    def changed(state) -> bool:   # "deleted": not in this checkout (a fresh clone has no
        if isinstance(state, dict):   # DVC-cached outputs or models), which is no change
            return any(changed(v) for v in state.values())
        return state != "deleted"

    return {stage: deps for stage, entries in status.items() for entry in entries
            if isinstance(entry, dict)
            for deps in [{d: st for d, st in entry.get("changed deps", {}).items()
                          if changed(st)}] if deps}


def test_no_stage_is_stale(changed_deps):
    """The committed reports describe the tree: every stage's code, params and data deps
    are as dvc.lock recorded them when the stage ran (issue 42). A change to a stage's
    inputs lands with that stage rerun, never ahead of it; outputs a fresh clone lacks
    (DVC-cached) count as no change."""
    assert not changed_deps, (
        "stages whose recorded deps differ from this tree (rerun them, `dvc repro`, and "
        f"commit dvc.lock with their reports): {changed_deps}")


def test_there_are_committed_provenances_with_ledgers():
    assert sum(p.with_name("ledger.json").exists() for p in _provenances()) >= 6


@pytest.mark.parametrize("path", _provenances(),
                         ids=lambda p: p.parent.relative_to(REPO_ROOT / "reports").as_posix())
def test_a_committed_provenance_names_the_content_of_every_local_model(path):
    """Each local model a role ran is recorded with its weights' content identity, and the
    embedded model's is the one `make setup` prepares here."""
    from medpref.identity import content_id

    prov = json.loads(path.read_text(encoding="utf-8"))
    ids = {i for v in (prov.get("roles") or {}).values() for i in ([v] if isinstance(v, str)
                                                                     else v)}
    for model_id in sorted(i for i in ids if i.startswith("hf:")):
        assert model_id in prov["models"], f"{path}: no content identity for {model_id}"
        name = model_id.removeprefix("hf:").split("+")[0]
        folder = REPO_ROOT / "models" / name
        if folder.exists():
            assert prov["models"][model_id] == content_id(folder), (path, model_id)


def test_every_stage_record_describes_this_tree(changed_deps):
    """dvc.lock records, per stage, the hashes of the code, params and data it ran with; a
    committed table whose stage's code or params changed since describes code that is no
    longer there. Every stage's deps must be as its lock recorded them (rerun the stage and
    commit its records after changing what it reads)."""
    assert not changed_deps, ("stages whose code, params or data differ from dvc.lock (their "
                              "committed records are stale; dvc repro them): "
                              + "; ".join(f"{s}: {sorted(d)[:6]}" for s, d in
                                          sorted(changed_deps.items())))


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True)


def _tracked(path: str, files: list[str]) -> bool:
    """``path`` is a file git tracks, or a folder holding one."""
    return any(f == path or f.startswith(path.rstrip("/") + "/") for f in files)


def _params_at(rev: str) -> dict:
    import yaml

    return yaml.safe_load(_git("show", f"{rev}:params.yaml").stdout)


def _param(tree: dict, dotted: str):
    node = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return "<absent>"
        node = node[part]
    return node


def test_every_stage_ran_from_a_commit_whose_inputs_are_this_trees():
    """The reports may come from more than one run (a stage rerun after its own inputs
    changed, the others kept), but each stage's provenance names a commit of this
    history at which that stage's tracked code, notebook, config and data files and its
    params held what they hold now: no committed table describes code that is no longer
    there, whichever run wrote it."""
    import yaml

    lock = yaml.safe_load((REPO_ROOT / "dvc.lock").read_text(encoding="utf-8"))["stages"]
    here = _params_at("HEAD")
    # another stage's committed outputs are written by the run itself, after its commit
    produced = {o["path"] for e in lock.values() for o in e.get("outs", [])}
    files = _git("ls-files").stdout.splitlines()
    params_at: dict[str, dict] = {}
    checked, problems = 0, []
    for name, entry in lock.items():
        provs = [o["path"] for o in entry.get("outs", [])
                 if o["path"].endswith("/provenance.json")]
        for prov in provs:
            commit = json.loads((REPO_ROOT / prov).read_text(encoding="utf-8"))["git_commit"]
            sha = commit.removesuffix("+dirty")
            if _git("merge-base", "--is-ancestor", sha, "HEAD").returncode:
                problems.append(f"{name}: {prov} names {sha}, not in this history")
                continue
            tracked = [d["path"] for d in entry.get("deps", [])
                       if not any(d["path"] == o or d["path"].startswith(o + "/")
                                  or o.startswith(d["path"] + "/") for o in produced)
                       and _tracked(d["path"], files)]
            changed = tracked and _git("diff", "--name-only", sha, "HEAD", "--",
                                       *tracked).stdout.split()
            if changed:
                problems.append(f"{name}: ran at {sha[:7]}; since then {changed[:4]}")
            then = params_at.setdefault(sha, _params_at(sha))
            keys = [k for group in (entry.get("params") or {}).values() for k in group]
            moved = [k for k in keys if _param(then, k) != _param(here, k)]
            if moved:
                problems.append(f"{name}: ran at {sha[:7]}; params changed since: {moved[:4]}")
            checked += 1
    assert checked >= 10
    assert not problems, problems


def test_the_committed_reports_name_few_runs():
    """The reports come from as few runs as possible: a cold run's commit and the
    commits of the stages rerun after it (at most three commits in all)."""
    commits = {json.loads(p.read_text(encoding="utf-8"))["git_commit"].removesuffix("+dirty")
               for p in _provenances()}
    assert len(commits) <= 3, f"the committed reports come from {len(commits)} commits: {commits}"


def test_dvc_lock_holds_exactly_the_pipelines_stages():
    """No lock entry for a stage (or a grid cell) dvc.yaml no longer has, none missing."""
    import subprocess
    import sys

    import yaml

    out = subprocess.run([sys.executable, "-m", "dvc", "stage", "list", "--name-only"],
                         cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
    declared = set(out.split())
    lock = yaml.safe_load((REPO_ROOT / "dvc.lock").read_text(encoding="utf-8"))
    locked = set(lock.get("stages", {}))
    assert locked == declared, {"locked, not declared": sorted(locked - declared),
                                "declared, never run": sorted(declared - locked)}
