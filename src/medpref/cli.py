"""The ``medpref`` command: run a stage, rebuild the tables, check the machine.

    medpref run 03_rem                 # = dvc repro rem (upstream stages only if changed)
    medpref run --overlay paper tables # = dvc exp run -S ... (configs/overlays/paper.yaml)
    medpref tables [--check] [STAGE]   # every table and figure, rebuilt from the committed records
    medpref dvc-yaml [--check]         # write dvc.yaml from src/medpref/dvcstages.py (or diff)
    medpref params-yaml [--check]      # write params.yaml's code-defaulted values (or diff)
    medpref doctor                     # models, kernel, python/torch, backends' env, dvc

A run is shared by DVC itself: every output, the LLM caches included, goes to a remote
with `dvc push` and comes back with `dvc pull` (docs/reviewers-path.md).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import yaml

from medpref import REPO_ROOT, doctor
from medpref.stagekit import stage_key


def dvc_stages(root: Path) -> list[str]:
    """Stage names of dvc.yaml (a matrix stage by its name; dvc expands ``name@...``)."""
    spec = yaml.safe_load((root / "dvc.yaml").read_text(encoding="utf-8")) or {}
    return list(spec.get("stages", {}))


def resolve_stage(name: str, known: list[str]) -> str:
    """``03_rem``, ``rem`` or ``annotation_grid@dep-3`` → the dvc target to reproduce."""
    base, at, item = name.partition("@")
    for candidate in (base, stage_key(base)):
        if candidate in known:
            return candidate + at + item
    raise SystemExit(f"medpref run: unknown stage '{name}'; dvc.yaml has: {', '.join(known)}")


def dvc_command() -> list[str]:
    return [sys.executable, "-m", "dvc"]


def cmd_run(args: argparse.Namespace) -> int:
    target = resolve_stage(args.stage, dvc_stages(args.root))
    if args.overlay:
        from medpref.overlays import set_args

        overrides = set_args(args.overlay, args.root)
        cmd = [*dvc_command(), "exp", "run", *overrides, target, *args.dvc_args]
        print(f"medpref run: dvc exp run with overlay '{args.overlay}' "
              f"({len(overrides) // 2} overrides) for {target}", flush=True)
        return subprocess.call(cmd, cwd=args.root)
    cmd = [*dvc_command(), "repro", target, *args.dvc_args]
    print(f"medpref run: dvc repro {target} {' '.join(args.dvc_args)}".rstrip() +
          "  (upstream stages rerun only when their inputs changed)", flush=True)
    return subprocess.call(cmd, cwd=args.root)


def cmd_tables(args: argparse.Namespace) -> int:
    import time

    from medpref.params import load_params
    from medpref.pipeline import rebuild_tables, stages_with_records

    t0 = time.perf_counter()
    found = stages_with_records(args.root, args.stage)
    if not found:
        print("medpref tables: no stage has its records under reports/ (run the pipeline "
              "first)", file=sys.stderr)
        return 1
    lines = rebuild_tables(args.root, load_params(args.root / "params.yaml"), args.stage,
                           check=args.check)
    names = ", ".join(o.stage for o in found)
    if args.check:
        for line in lines:
            print(line)
        print(f"medpref tables --check: {len(lines)} difference(s) in {names} "
              f"({time.perf_counter() - t0:.1f} s)")
        return 1 if lines else 0
    print(f"medpref tables: {len(lines)} file(s) rebuilt from the records of {names} "
          f"({time.perf_counter() - t0:.1f} s)")
    return 0


def cmd_dvc_yaml(args: argparse.Namespace) -> int:
    from medpref import dvcgen
    from medpref.dvcstages import PIPELINE

    if not args.check:
        print(f"medpref dvc-yaml: wrote {dvcgen.write(PIPELINE, args.root)}")
        return 0
    diff = dvcgen.differences(PIPELINE, args.root)
    if diff:
        sys.stdout.writelines(diff)
        print("medpref dvc-yaml: dvc.yaml differs from its declaration (src/medpref/"
              "dvcstages.py); run `medpref dvc-yaml` (make dvc-yaml) and commit it",
              file=sys.stderr)
        return 1
    print("medpref dvc-yaml: dvc.yaml is as generated")
    return 0


def cmd_params_yaml(args: argparse.Namespace) -> int:
    from medpref import paramsgen

    path = args.root / "params.yaml"
    if not args.check:
        print(f"medpref params-yaml: wrote {paramsgen.write(path)}")
        return 0
    diff = paramsgen.differences(path)
    if diff:
        sys.stdout.writelines(diff)
        print("medpref params-yaml: params.yaml differs from the section models' defaults "
              "(src/medpref/*/config.py); run `medpref params-yaml` (make params-yaml) and "
              "commit it", file=sys.stderr)
        return 1
    print("medpref params-yaml: params.yaml is as generated")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    checks = doctor.run_checks(args.root, verify_hashes=not args.quick)
    for check in checks:
        print(check.line())
    failed = [c.name for c in checks if c.status == doctor.FAIL]
    print(f"doctor: {len(failed)} problem(s)" + (f": {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="medpref", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[1:]))
    parser.add_argument("--root", type=Path, default=REPO_ROOT,
                        help="the repository (default: the one this package lives in)")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="reproduce one stage with dvc (e.g. 03_rem or rem)")
    run.add_argument("stage")
    run.add_argument("--overlay", help="a params overlay (configs/overlays/NAME.yaml) applied "
                     "as `dvc exp run -S ...`, e.g. paper")
    run.add_argument("dvc_args", nargs=argparse.REMAINDER,
                     help="passed to dvc repro (e.g. --force, --single-item)")
    run.set_defaults(func=cmd_run)

    tables = sub.add_parser("tables", help="rebuild every table and figure from the "
                            "committed per-item records (no model call, no training)")
    tables.add_argument("stage", nargs="*", help="only these stages (e.g. 08_medqa)")
    tables.add_argument("--check", action="store_true",
                        help="compare with the committed tables instead of writing; exit 1 "
                        "on any difference")
    tables.set_defaults(func=cmd_tables)

    dvcy = sub.add_parser("dvc-yaml", help="write dvc.yaml from each stage's declaration "
                          "(src/medpref/dvcstages.py) and the import closure of its code")
    dvcy.add_argument("--check", action="store_true",
                      help="compare with dvc.yaml instead of writing; print a unified diff "
                      "and exit 1 on any difference")
    dvcy.set_defaults(func=cmd_dvc_yaml)

    py = sub.add_parser("params-yaml", help="write params.yaml's values that a section "
                        "model defaults (src/medpref/*/config.py); comments and the other "
                        "values kept")
    py.add_argument("--check", action="store_true",
                    help="compare with params.yaml instead of writing; print a unified diff "
                    "and exit 1 on any difference")
    py.set_defaults(func=cmd_params_yaml)

    doc = sub.add_parser("doctor", help="check models, kernel, versions, backends, dvc")
    doc.add_argument("--quick", action="store_true", help="skip hashing the model files")
    doc.set_defaults(func=cmd_doctor)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
