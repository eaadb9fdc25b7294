"""Run stage 06's SP test on a variant of the params, into a scratch folder.

For measuring a setting before it becomes a default (a patient kind, decoding controls,
another case source) without touching the pipeline's outputs: params.yaml with
``--set`` overrides (dotted keys, YAML values), data and reports written under ``--out``.
The model cache is the pipeline's, so a later ``dvc repro`` reuses the calls.

    python scripts/sp_probe.py --out benchmarks/results/probe \\
        --set simulation.trained_policies=false \\
        --set simulation.next_turn.enabled=false --set simulation.rem_radar=false \\
        --set simulation.source=agentclinic --set simulation.n_cases=8
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from medpref.params import REPO_ROOT, parse_params
from medpref.stagekit import Stage


def apply_override(raw: dict, dotted: str) -> None:
    key, sep, value = dotted.partition("=")
    if not sep:
        raise SystemExit(f"--set {dotted!r}: expected key=value")
    *path, last = key.split(".")
    node = raw
    for part in path:
        node = node.setdefault(part, {})
    node[last] = yaml.safe_load(value)


class ScratchStage(Stage):
    """Stage 06 with its data and reports under ``out`` (set before the run)."""

    out: Path = Path("sp_probe")

    @property
    def data_dir(self) -> Path:
        return self.out / "data"

    @property
    def reports_dir(self) -> Path:
        return self.out / "reports"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--set", action="append", default=[], dest="sets")
    args = ap.parse_args()
    raw = yaml.safe_load((REPO_ROOT / "params.yaml").read_text(encoding="utf-8"))
    for s in args.sets:
        apply_override(raw, s)
    from medpref.simulation import whole

    stage = ScratchStage(name="06_simulation", params=parse_params(raw))
    stage.out = args.out
    out = whole.run(stage)
    print(f"wall {stage.wall_s:.0f} s; steps " +
          ", ".join(f"{k} {v:.0f} s" for k, v in stage.timings.items()))
    cols = [c for c in out.table2.columns if c.startswith("ALL") or c == "doctor"]
    print(out.table2[cols].to_string(index=False))
    print(out.behaviour.to_string(index=False))
    if not out.grader_validation.empty:
        gv = out.grader_validation
        print(gv[gv["category"] == "all"].to_string(index=False))


if __name__ == "__main__":
    main()
