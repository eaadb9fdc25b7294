"""Estimate the `paper` overlay's model calls, tokens and API cost, stage by stage.

An estimate, not a measurement: each stage's committed ledger of the embedded default run
(``reports/<stage>/ledger.json``) gives how many requests each role made (calls +
cache hits: a warm rerun makes no calls, so both count); the default run's LLM cache
(``data/cache/llm/<stage>.sqlite``) gives the tokens in and out of each request, per
prompt (the ledger records no tokens for cache hits). Each request group is then scaled
by the ratio of the size that drives it, paper overlay over default (``DRIVERS`` below),
and by the factor of any method the overlay changes (k = 5 REM samples instead of 2,
3 sampled imap extractions instead of 1 greedy pass). A role costs what
``shared.llm.prices`` lists for its model when the overlay puts it on the ``openai``
backend; a local (``hf``) role costs 0.

The tokens are the embedded 135M model's (its tokenizer, its answer lengths, often cut at
``max_new_tokens``), not GPT-4's; what the default run does not do at all (the SP test's
options-mode judge grader) is not in its ledgers and is listed as not estimated.

    python scripts/paper_cost.py                  # the table, on the committed ledgers
    python scripts/paper_cost.py --markdown  # the same table, as docs/own-model-and-gpu.md has it
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import re
import sqlite3
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
PAPER_OVERLAY = "configs/overlays/paper.yaml"

#: prompts whose calls name no role in params.yaml, with the role they serve in the default
#: params: the model under test (the doctors of stage 06 and the policy of stage 08, each
#: its own role; by default the base doctor's ``policy``) and the single-prompt baseline of
#: stage 02 (each baseline row names its role; the default rows' is ``planner``)
UNDER_TEST_ROLE = {"policy_doctor": "policy", "medqa_distill_text": "policy",
                   "medqa_distill_tools": "policy", "medqa_read": "policy",
                   "medqa_read_closed": "policy", "notechat_single_prompt": "planner"}


def prompt_roles(params: dict) -> dict[str, str]:
    """The role each prompt file serves (the cache records no role), read from the params:
    every ``calls`` entry's ``{role, prompt}``, the SP grader's judge prompts
    (``simulation.grader.prompts``, ``count_prompt``: the role of ``calls.grader``), then
    :data:`UNDER_TEST_ROLE` for the calls that name no role. A prompt two roles use is an
    error."""
    roles: dict[str, str] = {}

    def add(prompt: str, role: str, where: str) -> None:
        if roles.setdefault(prompt, role) != role:
            raise ValueError(f"prompt {prompt}: role {roles[prompt]} and {role} ({where})")

    for section, body in params.items():
        calls = (body or {}).get("calls", {}) if isinstance(body, dict) else {}
        for name, call in calls.items():
            if isinstance(call, dict) and call.get("prompt") and call.get("role"):
                add(call["prompt"], call["role"], f"{section}.calls.{name}")
    sim = params.get("simulation", {})
    judge = sim.get("calls", {}).get("grader", {}).get("role")
    grader = sim.get("grader", {})
    for prompt in [*grader.get("prompts", []), grader.get("count_prompt")]:
        if prompt and judge:
            add(prompt, judge, "simulation.grader")
    for prompt, role in UNDER_TEST_ROLE.items():
        add(prompt, role, "UNDER_TEST_ROLE")
    return roles


# ---------------------------------------------------------------- params


def deep_merge(base: dict, overrides: dict) -> dict:
    """``base`` with ``overrides`` applied key by key (what ``dvc exp run -S`` does)."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def get(params: dict, dotted: str) -> Any:
    node: Any = params
    for part in dotted.split("."):
        node = node[part]
    return node


def ratio(default: dict, paper: dict, dotted: str) -> float:
    """paper / default of one size; ``null`` (= everything) on both sides is 1."""
    a, b = get(default, dotted), get(paper, dotted)
    if a is None and b is None:
        return 1.0
    if a is None or b is None:
        raise ValueError(f"{dotted}: null on one side only ({a} vs {b}); no ratio")
    return float(b) / float(a)


# ---------------------------------------------------------------- drivers


@dataclass(frozen=True)
class Group:
    """Requests of one prompt and kind in a stage's cache; ``sampled``: temperature > 0."""

    prompt: str
    kind: str
    sampled: bool


Factor = Callable[[dict, dict, Group], float]


def imap_samples(params: dict) -> int:
    """imap extraction passes per request: ``auto`` samples on an openai judge."""
    ext = params["imapscore"]["extraction"]
    role = params["shared"]["llm"]["roles"][params["imapscore"]["role"]]
    sampled = ext["mode"] == "sampled" or (ext["mode"] == "auto" and role["backend"] == "openai")
    return int(ext["samples"]) if sampled else 1


def sampling_factor(d: dict, p: dict, g: Group) -> float:
    n = ratio(d, p, "sampling.n_items")
    if g.prompt in ("trajectory_patient", "trajectory_doctor"):  # one call per short round
        return n * ratio(d, p, "sampling.future_rounds")
    return n


def rem_factor(d: dict, p: dict, g: Group) -> float:
    if g.kind == "chat" and g.sampled:  # the sampled in-context scorer: k answers a request
        return ratio(d, p, "rem.scorers.sampled.k")
    return 1.0


def simulation_factor(d: dict, p: dict, g: Group) -> float:
    return ratio(d, p, "simulation.n_cases") * ratio(d, p, "simulation.rounds")


def imap_factor(d: dict, p: dict, g: Group) -> float:
    if g.prompt in ("imap_question", "imap_answer"):
        return imap_samples(p) / imap_samples(d)
    return 1.0


def medqa_factor(d: dict, p: dict, g: Group) -> float:
    if g.prompt.startswith("medqa_distill"):
        return ratio(d, p, "medqa.n_distill_items")
    return ratio(d, p, "medqa.n_read_items")


@dataclass(frozen=True)
class Driver:
    """One ledger, the cache file(s) its requests' tokens are read from, and its scaling."""

    label: str
    ledger: str
    caches: tuple[str, ...]
    driver: str
    factor: Factor


GRID_CELLS = ("avg_1", "avg_2", "avg_3", "dep_1", "dep_2", "dep_3")

DRIVERS: tuple[Driver, ...] = (
    Driver("01_sampling", "reports/01_sampling/ledger.json", ("01_sampling",),
           "sampling.n_items; patient/doctor rounds also x sampling.future_rounds",
           sampling_factor),
    Driver("02_notechat", "reports/02_notechat/ledger.json", ("02_notechat",),
           "notechat.n_notes", lambda d, p, g: ratio(d, p, "notechat.n_notes")),
    Driver("03_rem", "reports/03_rem/ledger.json", ("03_rem",),
           "the test split (fixed); sampled scorer x rem.scorers.sampled.k", rem_factor),
    Driver("04_annotation", "reports/04_annotation/ledger.json", ("04_annotation",),
           "sampling.n_items (annotation.max_items null: every stage-01 item)",
           lambda d, p, g: ratio(d, p, "sampling.n_items")),
    *(Driver("04_annotation grid (6 cells)", f"reports/04_annotation/grid/{cell}/ledger.json",
             # the cells' own cache files are empty: their REM requests are stage 04's
             (f"04_annotation_grid_{cell}", "04_annotation"),
             "sampling.n_items", lambda d, p, g: ratio(d, p, "sampling.n_items"))
      for cell in GRID_CELLS),
    Driver("06_simulation", "reports/06_simulation/ledger.json", ("06_simulation",),
           "simulation.n_cases x rounds", simulation_factor),
    Driver("06_next_turn", "reports/06_next_turn/ledger.json", ("06_next_turn",),
           "simulation.next_turn.n_dialogues (a prediction and a GPD verdict per cut)",
           lambda d, p, g: ratio(d, p, "simulation.next_turn.n_dialogues")),
    Driver("06_heldout", "reports/06_heldout/ledger.json", ("06_heldout",),
           "simulation.heldout.n_states (a policy turn and the REM's reading per state)",
           lambda d, p, g: ratio(d, p, "simulation.heldout.n_states")),
    Driver("07_imapscore", "reports/07_imapscore/ledger.json", ("07_imapscore",),
           "the QA set (fixed); extraction x samples (3, sampled on an openai judge)",
           imap_factor),
    Driver("08_medqa", "reports/08_medqa/ledger.json", ("08_medqa",),
           "medqa.n_read_items (read + judge); distill: n_distill_items", medqa_factor),
)



def grader_judge_calls(root: Path, default: dict, paper: dict) -> int | None:
    """Judge calls of the SP grader the overlay adds (none when it keeps a call-free one):
    every checklist item of every consultation of the default run, once per grader prompt
    (x k for ``generate``). Not in the default run's ledgers, so counted here apart."""
    d, p = default["simulation"]["grader"], paper["simulation"]["grader"]
    if p["mode"] not in ("options", "generate") or d["mode"] == p["mode"]:
        return None
    cases = {}
    for line in (root / paper["simulation"]["cases"]).read_text(encoding="utf-8").splitlines():
        if line.strip():
            case = json.loads(line)
            cases[case["id"]] = sum(len(v) for v in case["checklist"].values())
    with open(root / "reports/06_sp_grading/per_case.csv", encoding="utf-8") as f:
        items = sum(cases[row["case"]] for row in csv.DictReader(f))
    per_item = len(p["prompts"]) * (int(p["k"]) if p["mode"] == "generate" else 1)
    return items * per_item


def not_estimated(root: Path, default: dict, paper: dict) -> list[str]:
    calls = grader_judge_calls(root, default, paper)
    if calls is None:
        return []
    return [f"06_sp_grading: the overlay's {paper['simulation']['grader']['mode']}-mode judge "
            f"grader adds about {calls:,} judge calls (every checklist item of the default "
            "run's consultations, once per grader prompt; plus its disease-count calls) that "
            "the default run (a call-free grader) never made: their tokens and cost are not "
            "estimated and not in the total"]


# ---------------------------------------------------------------- measured inputs


@dataclass
class GroupTokens:
    n: int = 0
    tokens_in: int = 0
    tokens_out: int = 0


def load_templates(prompt_dir: Path) -> dict[str, str]:
    """Each prompt's system text up to its first placeholder, whitespace-normalised."""
    out = {}
    for path in sorted(prompt_dir.glob("*.yaml")):
        system = yaml.safe_load(path.read_text(encoding="utf-8")).get("system") or ""
        literal = re.split(r"\{\{|\{%", system, maxsplit=1)[0]
        out[path.stem] = " ".join(literal.split())
    return out


def prompt_of(messages: list[dict], templates: dict[str, str]) -> str | None:
    system = next((m["content"] for m in messages if m["role"] == "system"), "")
    text = " ".join(system.split())
    hits = [name for name, lit in templates.items() if lit and text.startswith(lit)]
    return max(hits, key=lambda name: len(templates[name])) if hits else None


def read_cache(path: Path, templates: dict[str, str]) -> dict[Group, GroupTokens]:
    """Tokens per request group of one stage's cache file (read-only)."""
    groups: dict[Group, GroupTokens] = {}
    if not path.exists():
        return groups
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        rows = conn.execute("SELECT kind, request, response FROM completions").fetchall()
    except sqlite3.OperationalError:  # a file without the table yet
        rows = []
    finally:
        conn.close()
    for kind, request, response in rows:
        req, resp = json.loads(request), json.loads(response)
        prompt = prompt_of(req.get("messages", []), templates) or "unknown"
        temperature = (req.get("params") or {}).get("temperature") or 0.0
        tally = groups.setdefault(Group(prompt, kind, temperature > 0), GroupTokens())
        tally.n += 1
        tally.tokens_in += int(resp.get("tokens_in") or 0)
        tally.tokens_out += int(resp.get("tokens_out") or 0)
    return groups


def read_ledger(path: Path) -> dict[str, dict[str, float]]:
    return json.loads(path.read_text(encoding="utf-8"))["roles"]


# ---------------------------------------------------------------- the estimate


@dataclass
class RoleEstimate:
    label: str
    source: str  # the ledger's folder (a grid cell's name)
    role: str
    model: str
    paid: bool
    default_requests: int
    calls: float = 0.0
    tokens_in: float = 0.0
    tokens_out: float = 0.0
    cost_usd: float = 0.0
    notes: list[str] = field(default_factory=list)


def role_price(paper: dict, role: str) -> tuple[str, dict[str, float] | None]:
    """(model, price per 1M tokens) of a role under the overlay; local roles: None."""
    cfg = paper["shared"]["llm"]["roles"][role]
    model = str(cfg["model"])
    if cfg["backend"] != "openai":
        return model, None
    prices = paper["shared"]["llm"]["prices"]
    if model not in prices:
        raise ValueError(f"shared.llm.prices has no entry for {model} (role {role})")
    return model, prices[model]


def estimate_role(drv: Driver, role: str, tally: dict, groups: dict[Group, GroupTokens],
                  default: dict, paper: dict, roles: dict[str, str] | None = None
                  ) -> RoleEstimate:
    """Scale one role of one ledger: requests x per-group share, factor and tokens.
    ``roles``: each prompt's role (:func:`prompt_roles`; default: the repository's
    params.yaml)."""
    requests = int(tally.get("calls", 0)) + int(tally.get("cache_hits", 0))
    model, price = role_price(paper, role)
    est = RoleEstimate(drv.label, Path(drv.ledger).parent.name, role, model, price is not None,
                       requests)
    if roles is None:
        roles = prompt_roles(yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8")))
    mine = {g: t for g, t in groups.items() if roles.get(g.prompt) == role and t.n}
    if not mine:  # no cached requests of this role: the ledger's own tokens per call
        calls = max(int(tally.get("calls", 0)), 1)
        mine = {Group("ledger", "chat", False): GroupTokens(
            calls, int(tally.get("tokens_in", 0)), int(tally.get("tokens_out", 0)))}
        est.notes.append("tokens from the ledger (no cached requests of this role)")
    total = sum(t.n for t in mine.values())
    for g, t in mine.items():
        share = t.n / total
        scaled = requests * share * drv.factor(default, paper, g)
        out_per_call = t.tokens_out / t.n
        if g.kind == "options" and price is not None:  # an API option score: one token out
            out_per_call = max(out_per_call, 1.0)
        est.calls += scaled
        est.tokens_in += scaled * t.tokens_in / t.n
        est.tokens_out += scaled * out_per_call
    if price is not None:
        est.cost_usd = (est.tokens_in * price["input_per_1m"]
                        + est.tokens_out * price["output_per_1m"]) / 1e6
    return est


def estimate(root: Path, cache_dir: Path, default: dict, paper: dict) -> list[RoleEstimate]:
    templates = load_templates(root / "configs" / "prompts")
    roles = prompt_roles(default)
    out = []
    for drv in DRIVERS:
        groups: dict[Group, GroupTokens] = {}
        for name in drv.caches:  # the first file with this stage's requests
            groups = read_cache(cache_dir / f"{name}.sqlite", templates)
            if groups:
                break
        for role, tally in sorted(read_ledger(root / drv.ledger).items()):
            out.append(estimate_role(drv, role, tally, groups, default, paper, roles))
    return out


def by_stage(rows: list[RoleEstimate]) -> list[dict[str, Any]]:
    """One row per stage label (the grid cells together), in pipeline order, + total."""
    table: dict[str, dict[str, Any]] = {}
    for r in rows:
        row = table.setdefault(r.label, {"stage": r.label, "paid_roles": set(), "calls": 0.0,
                                         "tokens_in": 0.0, "tokens_out": 0.0, "cost_usd": 0.0,
                                         "paid_calls": 0.0})
        for key in ("calls", "tokens_in", "tokens_out", "cost_usd"):
            row[key] += getattr(r, key)
        if r.paid:
            row["paid_roles"].add(f"{r.role} ({r.model})")
            row["paid_calls"] += r.calls
    rows_out = list(table.values())
    total = {"stage": "total", "paid_roles": set(), "paid_calls": 0.0}
    for key in ("calls", "tokens_in", "tokens_out", "cost_usd", "paid_calls"):
        total[key] = sum(r[key] for r in rows_out)
    return [*rows_out, total]


# ---------------------------------------------------------------- output


def _fmt_int(x: float) -> str:
    return f"{round(x):,}"


def format_table(rows: list[dict[str, Any]], markdown: bool) -> str:
    head = ["stage", "calls", "tokens in", "tokens out", "cost USD", "paid roles (model)"]
    body = [[r["stage"], _fmt_int(r["calls"]), _fmt_int(r["tokens_in"]),
             _fmt_int(r["tokens_out"]), f"{r['cost_usd']:,.2f}",
             ", ".join(sorted(r["paid_roles"])) or ("—" if r["stage"] != "total" else "")]
            for r in rows]
    if markdown:
        lines = ["| " + " | ".join(head) + " |",
                 "|" + "|".join(["---"] + ["---:"] * 4 + ["---"]) + "|"]
        for b in body:
            if b[0] == "total":
                b = [f"**{c}**" if c else c for c in b]
            lines.append("| " + " | ".join(b) + " |")
        return "\n".join(lines)
    widths = [max(len(str(x[i])) for x in [head, *body]) for i in range(len(head))]
    fmt = "  ".join(f"{{:{'<' if i in (0, 5) else '>'}{w}}}" for i, w in enumerate(widths))
    return "\n".join(fmt.format(*x) for x in [head, *body])


def format_roles(rows: list[RoleEstimate]) -> str:
    head = f"{'ledger':<16} {'role':<10} {'model':<28} {'default':>8} {'calls':>10} " \
           f"{'tok in':>13} {'tok out':>12} {'USD':>9}"
    lines = [head]
    for r in rows:
        lines.append(f"{r.source:<16} {r.role:<10} {r.model:<28} {r.default_requests:>8} "
                     f"{r.calls:>10,.0f} {r.tokens_in:>13,.0f} {r.tokens_out:>12,.0f} "
                     f"{r.cost_usd:>9,.2f}" + (f"  ({'; '.join(r.notes)})" if r.notes else ""))
    return "\n".join(lines)


def load_settings(root: Path, params: Path | None, overlay: Path | None) -> tuple[dict, dict]:
    default = yaml.safe_load((params or root / "params.yaml").read_text(encoding="utf-8"))
    overrides = yaml.safe_load((overlay or root / PAPER_OVERLAY).read_text(encoding="utf-8"))
    return default, deep_merge(default, overrides or {})


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=ROOT, help="repository root (ledgers, prompts)")
    ap.add_argument("--cache-dir", type=Path, default=None,
                    help="the default run's LLM cache (default: <root>/data/cache/llm)")
    ap.add_argument("--params", type=Path, default=None, help="default: <root>/params.yaml")
    ap.add_argument("--overlay", type=Path, default=None, help=f"default: <root>/{PAPER_OVERLAY}")
    ap.add_argument("--markdown", action="store_true", help="the per-stage table in Markdown")
    args = ap.parse_args(argv)
    root = args.root.resolve()
    cache_dir = args.cache_dir or root / "data" / "cache" / "llm"
    default, paper = load_settings(root, args.params, args.overlay)
    rows = estimate(root, cache_dir, default, paper)
    stages = by_stage(rows)
    if args.markdown:
        print(format_table(stages, markdown=True))
    else:
        if not cache_dir.is_dir():
            print(f"warning: no LLM cache at {cache_dir}: cached requests count no tokens",
                  file=sys.stderr)
        print(format_roles(rows), "", format_table(stages, markdown=False), sep="\n")
        missing = not_estimated(root, default, paper)
        if missing:
            print("\nnot estimated:", *missing, sep="\n  ")
    return stages


if __name__ == "__main__":
    main()
