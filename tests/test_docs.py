"""The README is a front door, docs/ holds the rest, and no page types a result.

- The README stays short, holds the two set-up-and-run commands and the one test command
  (and no other command), and leads to docs/index.md; every docs page is linked from
  another page.
- Every relative link resolves to a file, and to a heading when it names one.
- What a page names in a code span exists: every params key (``simulation.rounds``),
  every ``medpref.`` module or attribute, every repository path.
- Every generated block equals what ``scripts/docs_includes.py`` writes from its source.
- **No typed result number.** A number in the prose of the README or a page (tables
  included) is refused unless it is in a code span or block, in a generated block, in a
  table's ``paper`` column (the papers' own values), the value of a params key named in a
  code span of the same sentence (or table row), a paper reference (Eq. 6, Tables 4 and 6,
  §2.3.2, App. A.1), a stage or issue number, a version, a licence version, a date, or
  inside a quotation (a transcript's or a paper's words, in double quotes). Numbers glued
  into names (GPT-4, SmolLM2-135M, ROUGE-1/2/L, type 2 diabetes) are names. The tests at the
  end show the rule refusing typed results such as "κ 0.68" and "42.4 min".
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
import yaml

from medpref import REPO_ROOT
from medpref.params import SECTIONS, load_params
from script_module import script_module

README = REPO_ROOT / "README.md"
README_MAX_LINES = 200
README_COMMANDS = ["make setup", "make repro", "make test"]


def _load_includes():
    return script_module("scripts/docs_includes.py")


includes = _load_includes()
PAGES = includes.doc_files(REPO_ROOT)
IDS = [str(p.relative_to(REPO_ROOT)) for p in PAGES]

# -- reading a page ------------------------------------------------------------------------
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)((?:(?!\n\s*\n).)+?)\1", re.DOTALL)   # never across a blank line
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _blank(m: re.Match) -> str:
    """A match replaced by its newlines only (line numbers stay right)."""
    return "\n" * m.group(0).count("\n")


def split_code(text: str) -> tuple[str, list[str]]:
    """(prose with fenced blocks, generated blocks and comments blanked, fenced code)."""
    text = includes.BLOCK.sub(_blank, text)
    text = re.sub(r"<!--.*?-->", _blank, text, flags=re.DOTALL)
    prose, code, fenced = [], [], False
    for line in text.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
            prose.append("")
        elif fenced:
            code.append(line)
            prose.append("")
        else:
            prose.append(line)
    return "\n".join(prose), code


@dataclass
class Unit:
    """A paragraph, list item, heading or table row: where a sentence can live."""

    line: int
    text: str
    row: bool = False
    paper_column: int | None = None


def units(prose: str) -> list[Unit]:
    out: list[Unit] = []
    current: Unit | None = None
    header: list[str] = []
    lines = prose.split("\n")
    for i, raw in enumerate(lines, start=1):
        line = re.sub(r"^\s*>\s?", "", raw)
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped.startswith("|"):
            current = None
            if stripped.startswith("|"):
                cells = [c.strip() for c in CODE_SPAN.sub("code", stripped).strip("|").split("|")]
                if re.fullmatch(r"[\s|:-]+", stripped):
                    continue
                nxt = lines[i].strip() if i < len(lines) else ""
                if re.fullmatch(r"\|[\s|:-]+\|?", nxt):
                    header = cells
                paper = header.index("paper") if "paper" in header else None
                out.append(Unit(i, stripped, row=True, paper_column=paper))
            elif stripped:
                out.append(Unit(i, stripped))
            else:
                header = []
            continue
        item = re.match(r"^\s*(?:[-*+]|\d+\.)\s+", line)
        if item or current is None:
            current = Unit(i, line[item.end():] if item else stripped)
            out.append(current)
        else:
            current.text += "\n" + stripped
    return out


SENTENCE_END = re.compile(r"[.!?]\s+(?=[A-Z\"“(*_\x00])")
ABBREVIATIONS = {"Dr.", "Mr.", "Ms.", "e.g.", "i.e.", "cf.", "vs.", "Eq.", "Eqs.", "Fig.",
                 "Figs.", "App.", "Alg.", "incl.", "al."}


def sentences(unit: Unit) -> list[tuple[int, str, list[str]]]:
    """(line, sentence with code spans masked, the code spans' contents)."""
    codes: list[str] = []

    def mask(m: re.Match) -> str:
        codes.append(m.group(2))
        return f"\x00{len(codes) - 1}\x00"

    masked = CODE_SPAN.sub(mask, unit.text)
    if unit.row:
        cells = masked.strip("|").split("|")
        if unit.paper_column is not None and unit.paper_column < len(cells):
            cells[unit.paper_column] = " "
        parts, starts = ["|".join(cells)], [0]
    else:
        starts = [0] + [m.end() for m in SENTENCE_END.finditer(masked)
                        if masked[:m.start() + 1].split()[-1].lstrip('"“(') not in ABBREVIATIONS]
        parts = [masked[a:b] for a, b in zip(starts, [*starts[1:], len(masked)], strict=True)]
    out = []
    for start, part in zip(starts, parts, strict=True):
        line = unit.line + masked[:start].count("\n")
        used = [codes[int(k)] for k in re.findall(r"\x00(\d+)\x00", part)]
        out.append((line, re.sub(r"\x00\d+\x00", " ", part), used))
    return out


# -- params, names, paths ------------------------------------------------------------------
@cache
def params_values() -> dict[str, object]:
    """Every params path (defaults included, lists by index) → its value."""
    params = load_params(REPO_ROOT / "params.yaml")
    flat: dict[str, object] = {}

    def walk(node, path):
        flat[path] = node
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{path}.{k}")
        elif isinstance(node, list):
            for k, v in enumerate(node):
                walk(v, f"{path}.{k}")

    for name in SECTIONS:
        walk(getattr(params, name).model_dump(mode="json"), name)
    return flat


KEY_TOKEN = re.compile(r"\.?[A-Za-z_][\w<>*\[\]]*(?:\.[\w<>*\[\]]+)+|\.[A-Za-z_]\w*")


def key_pattern(token: str) -> re.Pattern:
    """A params key as written in the docs (``rem.scorers.<name>.k``, ``simulation.patient.*``,
    ``baselines[*].overrides``) → a regex over full paths, matching the key's end."""
    token = re.sub(r"\[[^\]]*\]", ".*", token).strip(".")
    subtree = token.endswith(".*")
    segs = token.removesuffix(".*").split(".")
    body = r"\.".join(r"[^.]+" if s == "*" or s.startswith("<") else re.escape(s) for s in segs)
    return re.compile(rf"(?:^|\.){body}" + (r"(?:\..+)?$" if subtree else "$"))


def keys_in(codes: list[str]) -> list[str]:
    """The params keys named in these code spans; ``.rest`` joins the last full key's parent."""
    keys, parent = [], None
    for code in codes:
        for token in KEY_TOKEN.findall(code):
            if token.startswith("."):
                if parent:
                    keys.append(f"{parent}{token}")
                continue
            keys.append(token)
            if token.split(".")[0] in SECTIONS:
                parent = token.rsplit(".", 1)[0]
    return keys


def key_values(keys: list[str]) -> set[float]:
    """The numeric values of every params path these keys match."""
    out = set()
    for key in keys:
        pattern = key_pattern(key)
        for path, value in params_values().items():
            if pattern.search(path) and isinstance(value, int | float) \
                    and not isinstance(value, bool):
                out.add(float(value))
    return out


def missing_key(token: str) -> bool:
    if token.split(".")[0] not in SECTIONS:
        return False
    pattern = re.compile("^" + key_pattern(token).pattern.removeprefix(r"(?:^|\.)"))
    return not any(pattern.search(path) for path in params_values())


def module_name_missing(name: str) -> bool:
    """``medpref.a.b.attr``: the longest module file under src/, then a top-level name of
    it (read from the source, so nothing is imported)."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        base = REPO_ROOT / "src" / Path(*parts[:cut])
        source = base.with_suffix(".py") if base.with_suffix(".py").is_file() \
            else base / "__init__.py"
        if not source.is_file():
            continue
        rest = parts[cut:]
        if not rest:
            return False
        return rest[0] not in top_level_names(ast.parse(source.read_text(encoding="utf-8")))
    return True


def top_level_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


REPO_DIRS = ("configs/", "data/embedded/", "src/", "tests/", "notebooks/", "scripts/",
             "benchmarks/", "docs/", "reports/", ".ci/")


def named_things(page: Path) -> list[tuple[str, str]]:
    """(kind, name) of every params key, medpref name and repository path in code spans,
    and of every ``-S key=value`` in fenced blocks."""
    prose, code = split_code(page.read_text(encoding="utf-8"))
    found = []
    for span in CODE_SPAN.findall(prose):
        text = span[1]
        for token in re.findall(r"[\w./<>*{}\[\]|-]+", text):
            token = token.rstrip(".,")
            if "/" in token and not token.startswith(REPO_DIRS):
                token = token.split("/")[0]      # training.checkpoints_dir/<run>: the key
            if re.search(r"[<*{|\[]", token):
                if token.split(".")[0] in SECTIONS:
                    found.append(("key", token))
                continue
            if token.startswith("medpref."):
                found.append(("medpref", token))
            elif token.startswith(REPO_DIRS):
                found.append(("path", token))
            elif "." in token and token.split(".")[0] in SECTIONS:
                found.append(("key", token))
    for line in code:
        found += [("key", k) for k in re.findall(r"-S\s+'?([a-z_]+(?:\.\w+)+)=", line)]
    return found


# -- the number rule -------------------------------------------------------------------------
NUMLIST = r"\d+(?:\.\d+)*[a-z]?(?:\s*(?:[–/-]|and|or|&)\s*\d+(?:\.\d+)*[a-z]?)*"
ALLOWED = [
    # paper references: Eq. 6, Eqs. 1–4, Tables 4 and 6, Fig. 10, §2.3.2, App. A.1
    rf"\b(?:Eqs?\.|Equations?|Tables?|Figs?\.|Figures?|Sections?|Alg\.)\s*{NUMLIST}",
    rf"§\s*{NUMLIST}",
    # the project's own stages (two digits) and issues
    r"\b[Ss]tages?\s+0\d(?:\s*(?:[–,/-]|and|or|to)\s*0\d)*",
    r"\b[Ii]ssues?\s+#?\d+(?:\s*(?:,|and)\s*#?\d+)*",
    # versions and licences: Python 3.11, torch 2.13.0, CC BY 4.0
    r"\b(?:Python|torch|transformers|trl|peft|accelerate|datasets|CUDA|dvc|DVC|numpy|"
    r"pyarrow|papermill|jupytext|vLLM|sacrebleu|pydantic)\s*(?:==|>=|<=|<|>)?\s*\d+(?:\.\d+)*",
    r"\bv?\d+\.\d+\.\d+\b",
    r"\bCC[ -]BY(?:-[A-Z]+)*\s+\d+\.\d+",
    # dates
    r"\b(?:19|20)\d\d-[01]\d-[0-3]\d\b",
    # names that hold a number: type 2 diabetes
    r"\b[Tt]ype\s+[12]\s+diabetes",
    # quotations (a transcript's sentence, a paper's words): "take 2 tablets"
    r'"[^"]*"|“[^”]*”',
]
ALLOWED_RE = re.compile("|".join(f"(?:{a})" for a in ALLOWED))
NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
UNIT_SUFFIX = {"k", "K", "s", "ms", "min", "h", "x", "GiB", "MiB", "GB", "MB", "kB", "KB"}


def _is_name_part(s: str, start: int, end: int) -> bool:
    """Whether the digits s[start:end] belong to a name (GPT-4, L6, SmolLM2, ROUGE-1/2)."""
    before = s[start - 1] if start else " "
    before2 = s[start - 2] if start > 1 else " "
    if before.isalnum() or before == "_":
        return True
    if before in ".-/@" and (before2.isalnum() or before2 == "_"):
        return True
    tail = re.match(r"[A-Za-z]+", s[end:])
    if s[end:end + 1] == "_":
        return True
    # 36k, 4s: a measurement; 135M, 7B, 4o, 2nd: a size or a name
    return bool(tail) and tail.group(0) not in UNIT_SUFFIX


def typed_numbers(text: str) -> list[tuple[int, str, str]]:
    """(line, number, sentence) of every number the rule refuses in a Markdown text."""
    prose, _ = split_code(text)
    bad = []
    for unit in units(prose):
        for line, sentence, codes in sentences(unit):
            allowed = key_values(keys_in(codes))
            s = LINK.sub(lambda m: m.group(0).split("](")[0] + "]", sentence)
            s = re.sub(r"https?://\S+|<[^>\s]+>", " ", s)
            s = ALLOWED_RE.sub(lambda m: " " * len(m.group(0)), s)
            for m in NUMBER.finditer(s):
                if _is_name_part(s, m.start(), m.end()):
                    continue
                value = float(m.group(0).replace(",", "")) if m.group(0).count(".") <= 1 \
                    else None
                if value is not None and value in allowed:
                    continue
                at = line + s[:m.start()].count("\n")
                bad.append((at, m.group(0), " ".join(sentence.split())[:160]))
    return bad


# -- the tests -------------------------------------------------------------------------------
def test_the_readme_is_a_front_door():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES, \
        f"README.md has {len(text.splitlines())} lines (at most {README_MAX_LINES}): move " \
        "sections to docs/"
    _, code = split_code(text)
    commands = [line.split("#")[0].strip() for line in code if line.split("#")[0].strip()]
    assert commands == README_COMMANDS, \
        f"README.md's code blocks hold {commands}; the README keeps exactly {README_COMMANDS}"
    targets = re.findall(r"^([\w-]+):", (REPO_ROOT / "Makefile").read_text(), re.MULTILINE)
    assert {c.split()[1] for c in README_COMMANDS} <= set(targets)
    assert "docs/index.md" in LINK.findall(text)


def test_every_docs_page_is_linked_from_another_page():
    linked = set()
    for page in PAGES:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            path = (page.parent / target.split("#")[0]).resolve()
            if path != page.resolve():
                linked.add(path)
    orphans = [i for p, i in zip(PAGES, IDS, strict=True)
               if p != README and p.resolve() not in linked]
    assert not orphans, f"pages no other page links to: {orphans} (add them to docs/index.md)"


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lstrip("#").strip())
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_relative_link_resolves(page):
    prose, _ = split_code(page.read_text(encoding="utf-8"))
    broken = []
    for target in LINK.findall(prose):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md":
            heads = [slug(h) for h in re.findall(r"^#+ .*$", split_code(
                path.read_text(encoding="utf-8"))[0], re.MULTILINE)]
            if anchor not in heads:
                broken.append(f"{target}: no heading '{anchor}' in {file or page.name}")
    assert not broken, f"{page.name}: broken links: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_what_a_page_names_exists(page):
    wrong = []
    for kind, name in named_things(page):
        if kind == "key" and missing_key(name):
            wrong.append(f"params key `{name}` does not exist")
        elif kind == "medpref" and module_name_missing(name):
            wrong.append(f"`{name}` is no medpref module or top-level name")
        elif kind == "path" and not (REPO_ROOT / name).exists():
            wrong.append(f"path `{name}` does not exist")
    assert not wrong, f"{page.name}: " + "; ".join(wrong)


def test_every_generated_block_is_what_the_script_writes():
    stale = includes.stale(REPO_ROOT)
    assert not stale, f"stale generated blocks {stale}: run python scripts/docs_includes.py"


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_no_typed_result_number(page):
    bad = typed_numbers(page.read_text(encoding="utf-8"))
    assert not bad, f"{page.name}: typed numbers (put results in a generated block, name " \
        "the params key, or say it in words):\n" + \
        "\n".join(f"  line {line}: {num!r} in: {sentence}" for line, num, sentence in bad)


# -- the rule itself, on strings -------------------------------------------------------------
def refused(text: str) -> list[str]:
    return [num for _, num, _ in typed_numbers(text)]


@pytest.mark.parametrize("text, numbers", [
    ("The echo-aware grader reaches κ 0.68 on the test half.", ["0.68"]),
    ("A cold run takes 42.4 min on two cores.", ["42.4"]),
    ("A cold `make repro` there is about 3 hours.", ["3"]),
    ("DPO ran at 36k tokens/s and 4.9× faster.", ["36", "4.9"]),
    ("The difference is -0.014 (p 0.38).", ["-0.014", "0.38"]),
    ("SFT over base on Dis.: +8.8 points [−11.8, 29.4].", ["8.8", "11.8", "29.4"]),
    ("The SP test runs 5 rounds.", ["5"]),
    ('The doctor said to take 2 tablets, "twice a day".', ["2"]),
    ("`simulation.rounds` sets 7 rounds.", ["7"]),
    ("| doctor | Sym. |\n|---|---|\n| base | 0.8 |", ["0.8"]),
    ("| what | paper | here |\n|---|---|---|\n| examples | 5 per rule | 3 per rule |", ["3"]),
])
def test_the_rule_refuses_typed_results(text, numbers):
    assert [n.lstrip("-") for n in refused(text)] == [n.lstrip("-") for n in numbers]


@pytest.mark.parametrize("text", [
    "Eq. 6, Eqs. 1–4, Tables 4 and 6, Fig. 10, §2.3.2, App. A.1 and PLPF Table 3.",
    "Stages 03–05 and stage 06 changed in issue 31.",
    "Python 3.11, torch 2.13.0 and CC BY 4.0; measured on 2026-11-23.",
    "GPT-4, SmolLM2-135M-Instruct, the 135M model, ROUGE-1/2/L, BLEU-4, SHA-256, HR@k.",
    "The cold run took `42.4 min`.",
    'The doctor said "take 2 tablets twice a day" and named type 2 diabetes.',
    "`simulation.rounds` sets 5 rounds; `imapscore.extraction.mode`, `.samples` (3).",
    "<!-- BEGIN GENERATED headlines -->\n| kappa | 0.68 |\n<!-- END GENERATED headlines -->",
    "```\nmake repro   # 42.4 min\n```",
])
def test_the_rule_lets_references_names_and_params_pass(text):
    assert refused(text) == []


def test_a_stale_block_is_rewritten_and_an_unknown_one_refused(tmp_path):
    page = tmp_path / "page.md"
    text = ("<!-- BEGIN GENERATED file:configs/hardware/cpu.yaml -->\nold\n"
            "<!-- END GENERATED file:configs/hardware/cpu.yaml -->\n")
    fresh = includes.refresh(text, REPO_ROOT, page)
    assert "old" not in fresh and "per_device_train_batch_size" in fresh
    assert includes.refresh(fresh, REPO_ROOT, page) == fresh
    with pytest.raises(ValueError, match="unknown generated block 'nope'"):
        includes.refresh("<!-- BEGIN GENERATED nope -->\n<!-- END GENERATED nope -->",
                         REPO_ROOT, page)


def test_named_keys_modules_and_paths_are_checked():
    assert missing_key("simulation.roundz") and not missing_key("simulation.rounds")
    assert not missing_key("rem.scorers.<name>.state_value")
    assert not missing_key("simulation.patient.*")
    assert module_name_missing("medpref.simulation.graders.no_such_grader")
    assert not module_name_missing("medpref.simulation.graders.register_grader")
    assert yaml.safe_load((REPO_ROOT / "params.yaml").read_text())["simulation"]["rounds"] \
        in key_values(["simulation.rounds"])


def test_a_markdown_include_is_the_file_as_markdown(tmp_path):
    """``md:PATH`` puts a generated Markdown table in a page as Markdown, not as code; a
    missing file is an error naming the block."""
    page = tmp_path / "page.md"
    name = "md:docs/index.md"
    text = f"<!-- BEGIN GENERATED {name} -->\nold\n<!-- END GENERATED {name} -->\n"
    fresh = includes.refresh(text, REPO_ROOT, page)
    body = (REPO_ROOT / "docs/index.md").read_text(encoding="utf-8").rstrip()
    assert f"<!-- BEGIN GENERATED {name} -->\n{body}\n<!-- END" in fresh
    assert "```" not in fresh.split(body)[0]
    with pytest.raises(FileNotFoundError, match="md:no/such.md"):
        includes.refresh("<!-- BEGIN GENERATED md:no/such.md -->\n"
                         "<!-- END GENERATED md:no/such.md -->", REPO_ROOT, page)
