"""The SP-test transcripts as one self-contained HTML page, for clinicians to read.

One record per case × doctor (the transcript, the score per category and every checklist
item with its verdict, evidence turn and echo exclusions) becomes one ``<details>`` section
under its case. The page needs no server and loads nothing: no script, inline CSS only, and
a Content-Security-Policy that allows exactly that stylesheet (by its sha256), so a page
that tried to load anything else would be refused by the browser. Every text is escaped.
Output is deterministic (no timestamp), so the same records give the same bytes.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from medpref.contracts import atomic_write_text
from medpref.simulation.grading import CATEGORIES

SHORT = {"symptoms": "Sym.", "tests": "Test", "diseases": "Dis."}
METHOD = {"echo_aware": "echo-aware match", "judge": "judge", "embedding": "embedding",
          "abstain": "—"}
VERDICT = {True: ("pass", "✓ pass"), False: ("fail", "✗ fail"), None: ("abstain", "? abstained")}

CSS = """
:root { --doc: #1f5fa8; --doc-bg: #eef4fb; --pat: #7a5a1e; --pat-bg: #faf5ea;
  --pass: #1b7a3a; --fail: #b3261e; --muted: #6b6b6b; --ev: #fff3b0; }
body { font-family: system-ui, "Segoe UI", "Noto Sans", "Noto Sans CJK SC", "PingFang SC",
  "Microsoft YaHei", sans-serif; line-height: 1.45; margin: 0 auto; max-width: 62rem;
  padding: 1rem 1.5rem 4rem; color: #1d1d1d; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { margin-top: 2.2rem; }
table { border-collapse: collapse; width: 100%; margin: .5rem 0 1rem; font-size: .95rem; }
th, td { border-bottom: 1px solid #ddd; padding: .3rem .5rem; text-align: left;
  vertical-align: top; }
th { background: #f3f3f3; }
.sub, .meta { color: var(--muted); }
.legend { border: 1px solid #ddd; border-radius: 6px; padding: .4rem 1rem; background: #fcfcfc; }
.legend dt { float: left; clear: left; width: 11rem; } .legend dd { margin-left: 12rem; }
.case { border-top: 3px solid #ccc; }
.complaint { font-size: 1.05rem; }
details.consult { border: 1px solid #ccc; border-radius: 6px; margin: .8rem 0; }
details.consult > summary { cursor: pointer; padding: .5rem .8rem; background: #f6f6f6;
  font-weight: 600; }
details.consult[open] > summary { border-bottom: 1px solid #ccc; }
.consult-body { padding: .3rem 1rem 1rem; }
.transcript { list-style: none; padding: 0; }
.turn { margin: .4rem 0; padding: .4rem .7rem; border-radius: 6px; border-left: 5px solid; }
.turn.doctor { background: var(--doc-bg); border-color: var(--doc); margin-right: 4rem; }
.turn.patient { background: var(--pat-bg); border-color: var(--pat); margin-left: 4rem; }
.turn.other { background: #f3f3f3; border-color: var(--muted); }
.who { font-weight: 700; font-size: .85rem; text-transform: uppercase; letter-spacing: .03em; }
.doctor .who { color: var(--doc); } .patient .who { color: var(--pat); }
.turn-no { color: var(--muted); font-size: .8rem; margin-left: .4rem; }
.turn.evidence { box-shadow: 0 0 0 2px #d4b106; }
.turn:target, tr:target { outline: 3px solid #d4b106; }
.earned { font-size: .85rem; margin-top: .2rem; }
mark { background: var(--ev); }
.echo { color: var(--muted); text-decoration: line-through; }
.unsupported { text-decoration: underline wavy var(--fail); }
.dont-know { font-style: italic; }
.tag { display: inline-block; font-size: .75rem; padding: 0 .35rem; border-radius: 4px;
  margin: 0 .2rem; border: 1px solid; white-space: nowrap; }
.tag-echo { color: var(--muted); } .tag-unsupported { color: var(--fail); }
.tag-dont-know { color: var(--pat); } .tag-control { color: var(--muted); }
.verdict { font-weight: 700; white-space: nowrap; }
.verdict.pass { color: var(--pass); } .verdict.fail { color: var(--fail); }
.verdict.abstain { color: var(--muted); }
.excluded { font-size: .85rem; color: var(--muted); }
.error { color: var(--fail); }
"""


def _e(value: Any) -> str:
    """Escaped text of any value (None → empty)."""
    return "" if value is None else escape(str(value), quote=True)


def _slug(text: Any) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", str(text)).strip("-") or "x"


def _lang(record: Mapping) -> str:
    lang = record.get("lang")
    return f' lang="{_e(lang)}"' if lang else ""


def _percent(value: Any) -> str:
    """A c/m share as a percentage; None (an empty category) as a dash."""
    if value is None:
        return "—"
    try:
        return f"{100 * float(value):.0f} %"
    except (TypeError, ValueError):
        return _e(value)


def _categories(record: Mapping) -> list[str]:
    """The paper's categories first, then any other a record names, in order seen."""
    scores = record.get("scores")
    seen = list(CATEGORIES)
    for cat in [*(scores if isinstance(scores, Mapping) else {}),
                *(i.get("category") for i in _items(record))]:
        if cat is not None and cat not in seen:
            seen.append(cat)
    return seen


def _items(record: Mapping) -> list[Mapping]:
    return [i for i in record.get("items") or [] if isinstance(i, Mapping)]


def _turns(record: Mapping) -> list[Mapping]:
    return [t for t in record.get("turns") or [] if isinstance(t, Mapping)]


def _evidence_index(item: Mapping, n_turns: int) -> int | None:
    """The item's evidence turn when it is a valid index into the transcript, else None."""
    i = item.get("evidence_turn")
    return i if isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n_turns else None


def group_by_case(records: Sequence[Mapping]) -> list[tuple[str, list[Mapping]]]:
    """Records grouped by case, cases and doctors in the order they first appear."""
    groups: dict[str, list[Mapping]] = {}
    for r in records:
        groups.setdefault(str(r.get("case", "?")), []).append(r)
    return list(groups.items())


# -- pieces of the page ------------------------------------------------------------------


def _scores_inline(record: Mapping) -> str:
    scores = record.get("scores")
    if not isinstance(scores, Mapping):
        return "not scored"
    return " · ".join(f"{_e(SHORT.get(c, c))} {_percent(scores.get(c))}"
                      for c in _categories(record))


def _scores_table(record: Mapping) -> str:
    scores, items = record.get("scores"), _items(record)
    scores = scores if isinstance(scores, Mapping) else {}
    rows = []
    for cat in _categories(record):
        mine = [i.get("passed") for i in items if i.get("category") == cat]
        counts = [sum(v is s for v in mine) for s in (True, False, None)]
        rows.append(f"<tr><td>{_e(cat)}</td><td>{_percent(scores.get(cat))}</td>"
                    + "".join(f"<td>{n}</td>" for n in counts) + f"<td>{len(mine)}</td></tr>")
    return ('<table class="scores"><thead><tr><th>Category</th><th>Score (c/m)</th>'
            "<th>Passed</th><th>Failed</th><th>Abstained</th><th>Items</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def _item_row(item: Mapping, item_id: str, prefix: str, n_turns: int) -> str:
    css, label = VERDICT.get(item.get("passed"), VERDICT[None])
    method = item.get("method")
    turn = _evidence_index(item, n_turns)
    evidence = f"“{_e(item['evidence'])}”" if item.get("evidence") else ""
    if turn is not None:
        evidence = f'<a href="#{prefix}-t{turn}">turn {turn + 1}</a> {evidence}'
    elif item.get("evidence_turn") is not None:
        evidence += f' <span class="meta">(turn {_e(item["evidence_turn"])} not found)</span>'
    excluded = "".join(f'<div class="excluded">echo, not credited: <span class="echo">'
                       f"{_e(s)}</span></div>" for s in item.get("echo_excluded") or [])
    return (f'<tr id="{item_id}" class="item {css}"><td>{_e(item.get("category"))}</td>'
            f'<td>{_e(item.get("item"))}</td><td class="verdict {css}">{label}</td>'
            f"<td>{_e(METHOD.get(method, method))}</td><td>{evidence}{excluded}</td></tr>")


def _items_table(record: Mapping, prefix: str) -> str:
    items, n_turns = _items(record), len(_turns(record))
    if not items:
        return '<p class="meta">No checklist items graded.</p>'
    rows = "".join(_item_row(item, f"{prefix}-i{k}", prefix, n_turns)
                   for k, item in enumerate(items))
    return ('<table class="items"><thead><tr><th>Category</th><th>Checklist item</th>'
            "<th>Result</th><th>Decided by</th><th>Evidence (doctor turn)</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>")


def _marked(text: str, phrases: Sequence[str]) -> str:
    """Escaped ``text`` with each occurrence of a phrase wrapped in ``<mark>``."""
    phrases = sorted({p for p in phrases if p}, key=len, reverse=True)
    if not phrases:
        return _e(text)
    parts = re.split("(" + "|".join(map(re.escape, phrases)) + ")", text)
    return "".join(f"<mark>{_e(p)}</mark>" if k % 2 else _e(p) for k, p in enumerate(parts))


def _sentence(s: Mapping, evidence: Sequence[str]) -> str:
    text = _marked(str(s.get("text") or ""), evidence)
    if s.get("echo"):
        return (f'<span class="echo">{text}</span>'
                '<span class="tag tag-echo">echo (not credited)</span>')
    if s.get("unsupported"):
        return (f'<span class="unsupported">{text}</span>'
                '<span class="tag tag-unsupported">not in the case</span>')
    if s.get("dont_know"):
        return f'<span class="dont-know">{text}</span><span class="tag tag-dont-know">' \
               "doesn’t know</span>"
    if s.get("nothing_asked"):
        return f'<span class="dont-know">{text}</span><span class="tag tag-dont-know">' \
               "nothing asked</span>"
    return text


def _turn_text(turn: Mapping, evidence: Sequence[str]) -> str:
    sentences = [s for s in turn.get("sentences") or [] if isinstance(s, Mapping)]
    if sentences:
        return " ".join(_sentence(s, evidence) for s in sentences)
    return _marked(str(turn.get("text") or ""), evidence)


def _item_links(pairs: Sequence[tuple[str, Mapping]]) -> str:
    return ", ".join(f'<a href="#{item_id}">{_e(i.get("item"))}</a>'
                     f' <span class="meta">({_e(i.get("category"))})</span>'
                     for item_id, i in pairs)


def _turn(turn: Mapping, k: int, prefix: str, cited_by: Sequence[tuple[str, Mapping]]) -> str:
    role = turn.get("role")
    css = role if role in ("doctor", "patient") else "other"
    who = {"doctor": "Doctor", "patient": "Patient"}.get(role, _e(role) or "?")
    credited = [(item_id, i) for item_id, i in cited_by if i.get("passed") is True]
    cited = [(item_id, i) for item_id, i in cited_by if i.get("passed") is not True]
    body = _turn_text(turn, [str(i.get("evidence") or "") for _, i in credited])
    note = "".join(f'<div class="earned">{label}: {_item_links(pairs)}</div>'
                   for label, pairs in (("✓ earned", credited), ("cited, not credited", cited))
                   if pairs)
    if credited:
        css += " evidence"
    return (f'<li id="{prefix}-t{k}" class="turn {css}"><span class="who">{who}</span>'
            f'<span class="turn-no">turn {k + 1}</span><div>{body}</div>{note}</li>')


def _transcript(record: Mapping, prefix: str) -> str:
    turns = _turns(record)
    if not turns:
        return '<p class="meta">No transcript.</p>'
    by_turn: dict[int, list[tuple[str, Mapping]]] = {}
    for k, item in enumerate(_items(record)):
        turn = _evidence_index(item, len(turns))
        if turn is not None:
            by_turn.setdefault(turn, []).append((f"{prefix}-i{k}", item))
    return ('<ol class="transcript">'
            + "".join(_turn(t, k, prefix, by_turn.get(k, [])) for k, t in enumerate(turns))
            + "</ol>")


def _doctor_label(record: Mapping) -> str:
    """The doctor's name, tagged when it is a control (turns written from the case, no
    model): a reader must never take a control's row for a model's."""
    name = _e(record.get("doctor", "?"))
    if record.get("kind") == "control":
        return f'{name} <span class="tag tag-control">control</span>'
    return name


def _consultation(record: Mapping, prefix: str) -> str:
    facts = []
    if record.get("rounds") is not None:
        facts.append(f"{_e(record['rounds'])} round{'' if record['rounds'] == 1 else 's'}")
    if record.get("ended_by"):
        facts.append(f"ended by {_e(record['ended_by'])}")
    error = f'<p class="error">Error: {_e(record["error"])}</p>' if record.get("error") else ""
    return (f'<details class="consult" id="{prefix}" data-doctor="{_e(record.get("doctor"))}">'
            f'<summary>Doctor: {_doctor_label(record)} — {_scores_inline(record)}'
            f' <span class="meta">{", ".join(facts)}</span></summary>'
            f'<div class="consult-body">{error}<h4>Score per category</h4>'
            f"{_scores_table(record)}<h4>Checklist</h4>{_items_table(record, prefix)}"
            f"<h4>Transcript</h4>{_transcript(record, prefix)}</div></details>")


def _case_id(n: int, case: str) -> str:
    return f"c{n}-{_slug(case)}"


def _case_section(n: int, case: str, records: Sequence[Mapping]) -> str:
    first, cid = records[0], _case_id(n, case)
    consults = "".join(_consultation(r, f"{cid}-d{m}") for m, r in enumerate(records))
    return (f'<section class="case" id="{cid}"{_lang(first)}>'
            f'<h2>{_e(case)} <span class="sub">· {_e(first.get("department", ""))}</span></h2>'
            f'<p class="complaint"><b>Chief complaint:</b> {_e(first.get("chief_complaint"))}'
            f"</p>{consults}</section>")


def _toc(groups: Sequence[tuple[str, list[Mapping]]]) -> str:
    rows = []
    for n, (case, records) in enumerate(groups):
        cid, first = _case_id(n, case), records[0]
        doctors = "<br>".join(f'<a href="#{cid}-d{m}">{_doctor_label(r)}</a> '
                              f'<span class="meta">{_scores_inline(r)}</span>'
                              for m, r in enumerate(records))
        rows.append(f'<tr><td><a href="#{cid}">{_e(case)}</a></td>'
                    f'<td>{_e(first.get("department"))}</td>'
                    f'<td{_lang(first)}>{_e(first.get("chief_complaint"))}</td>'
                    f"<td>{doctors}</td></tr>")
    return ('<nav aria-label="Cases"><h2>Cases</h2><table class="toc"><thead><tr>'
            "<th>Case</th><th>Department</th><th>Chief complaint</th>"
            "<th>Doctors (score per category)</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></nav>")


LEGEND = """<section class="legend" aria-label="Legend"><h2>How to read this page</h2><dl>
<dt>Doctor / Patient</dt><dd>Doctor turns are blue on the
left, patient turns sand on the right. Click a doctor's line under a case to open it.</dd>
<dt>Score (c/m)</dt><dd>Per category, the share of the case's checklist items the doctor
covered (PLPF Eq. 6). — means the case has no item in that category.</dd>
<dt><span class="verdict pass">✓ pass</span> <span class="verdict fail">✗ fail</span>
<span class="verdict abstain">? abstained</span></dt><dd>The grade of one checklist item;
abstained: no grader gave a usable answer, so the item is neither passed nor failed.</dd>
<dt><mark>highlighted</mark></dt><dd>The doctor sentence that earned an item; its turn is
framed, and the item links to it (and back).</dd>
<dt><span class="echo">struck through</span></dt><dd>echo (not credited): the doctor only
repeated what the patient said, so the sentence earns nothing.</dd>
<dt><span class="unsupported">wavy underline</span></dt><dd>not in the case: a patient
sentence the case does not support.</dd>
<dt><span class="dont-know">italic</span></dt><dd>doesn’t know: the patient said the case
does not tell; nothing asked: the doctor's turn asked nothing, and the patient said so
neutrally.</dd>
<dt><span class="tag tag-control">control</span></dt><dd>a control doctor, not a model: its
turns are written from the case (the case's own script, a recital of the checklist, a
lecture, an echo of the patient) to show what the test can and cannot tell apart.</dd>
</dl></section>"""


def _csp(css: str) -> str:
    """Nothing may load or run; only the page's own stylesheet, named by its sha256."""
    digest = base64.b64encode(hashlib.sha256(css.encode("utf-8")).digest()).decode("ascii")
    return (f"default-src 'none'; style-src 'sha256-{digest}'; base-uri 'none'; "
            "form-action 'none'")


def render_transcripts_html(records: Sequence[Mapping], title: str = "SP test transcripts"
                            ) -> str:
    """The whole page as a string: legend, contents by case, one section per case × doctor."""
    groups = group_by_case(records)
    doctors = {str(r.get("doctor")) for r in records}
    summary = (f"{len(groups)} cases, {len(doctors)} doctors, {len(records)} consultations")
    sections = "".join(_case_section(n, case, recs) for n, (case, recs) in enumerate(groups))
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{_csp(CSS)}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{_e(title)}</title><style>{CSS}</style></head><body>"
            f'<header><h1>{_e(title)}</h1><p class="sub">{summary}</p></header>'
            f"{LEGEND}{_toc(groups)}<main>{sections}</main></body></html>\n")


def write_transcripts_html(records: Sequence[Mapping], path: Path,
                           title: str = "SP test transcripts") -> Path:
    """Render the page and write it atomically (temp file + rename); returns ``path``."""
    path = Path(path)
    atomic_write_text(path, render_transcripts_html(records, title))
    return path
