"""The SP-test transcript page: escaped, complete, linked, marked and self-contained."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from medpref.simulation.transcripts_html import render_transcripts_html, write_transcripts_html

FIXTURE = Path(__file__).parent / "fixtures" / "sp_transcripts" / "records.jsonl"


def load_records() -> list[dict]:
    return [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]


class Outline(HTMLParser):
    """What the tests look at: ids, links, sections, consultations, item rows, turns."""

    def __init__(self, page: str):
        super().__init__()
        self.ids: list[str] = []
        self.hrefs: list[str] = []
        self.tags: list[str] = []
        self.sections: dict[str, dict] = {}     # id → lang, title, doctors
        self.rows: dict[str, dict] = {}         # item id → class, text
        self.turns: dict[str, dict] = {}        # turn id → class, text
        self._section: str | None = None
        self._open: list[tuple[str, dict]] = []  # elements whose text we are collecting
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        if "id" in a:
            self.ids.append(a["id"])
        if tag == "a" and a.get("href"):
            self.hrefs.append(a["href"])
        if tag == "section" and "case" in a.get("class", ""):
            self._section = a["id"]
            self.sections[a["id"]] = {"lang": a.get("lang"), "title": "", "doctors": []}
        if tag == "details" and self._section:
            self.sections[self._section]["doctors"].append(a.get("data-doctor"))
        kind = {"tr": self.rows, "li": self.turns}.get(tag)
        if kind is not None and "id" in a:
            kind[a["id"]] = {"class": a.get("class", ""), "text": ""}
            self._open.append((tag, kind[a["id"]]))
        if tag == "h2" and self._section:
            self._open.append((tag, self.sections[self._section]))

    def handle_endtag(self, tag):
        if self._open and self._open[-1][0] == tag:
            self._open.pop()
        if tag == "section":
            self._section = None

    def handle_data(self, data):
        for tag, target in self._open:
            target["title" if tag == "h2" else "text"] += data


@pytest.fixture(scope="module")
def records():
    return load_records()


@pytest.fixture(scope="module")
def page(records):
    return render_transcripts_html(records)


@pytest.fixture(scope="module")
def outline(page):
    return Outline(page)


def test_fixture_has_three_cases_two_doctors_and_a_chinese_case(records):
    assert len({r["case"] for r in records}) == 3
    assert {r["doctor"] for r in records} == {"base", "dpo_agent"}
    assert any(r["lang"] == "zh" for r in records)


def test_every_case_and_doctor_has_a_section(records, outline):
    by_case: dict[str, list[str]] = {}
    for r in records:
        by_case.setdefault(r["case"], []).append(r["doctor"])
    titles = {s["title"].split()[0]: s for s in outline.sections.values()}
    assert set(titles) == set(by_case)
    for case, doctors in by_case.items():
        assert titles[case]["doctors"] == doctors, case


def test_markup_in_the_records_is_escaped():
    record = {"case": "x<1>", "department": "A&E", "doctor": '"><img src=x onerror=alert(1)>',
              "chief_complaint": "pain </td>",
              "turns": [{"role": "patient", "text": "<script>alert('x')</script>"},
                        {"role": "doctor", "text": "Any <b>fever</b>?"}],
              "items": [{"category": "symptoms", "item": "<i>fever</i>", "passed": True,
                         "evidence_turn": 1, "evidence": "Any <b>fever</b>?"}]}
    page = render_transcripts_html([record], title="<title>")
    assert "<script" not in page and "<img" not in page and "<b>fever" not in page
    assert "<i>fever" not in page and "pain </td>" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "<mark>Any &lt;b&gt;fever&lt;/b&gt;?</mark>" in page
    assert 'data-doctor="&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"' in page
    assert "<title>&lt;title&gt;</title>" in page


def test_item_states(outline):
    rows = [r for i, r in outline.rows.items() if i.startswith("c0-sp-0001-d0-i")]
    assert [r["class"].split()[-1] for r in rows] == \
        ["fail", "pass", "pass", "abstain", "pass", "pass", "pass"]
    blurred = next(r for r in rows if "blurred vision" in r["text"])
    assert "? abstained" in blurred["text"]
    weight = next(r for r in rows if "weight loss" in r["text"])
    assert "✗ fail" in weight["text"] and "echo, not credited" in weight["text"]
    assert "You have been losing weight." in weight["text"]


def test_scores_per_category(page):
    # sp-0001/base: symptoms 0.5 from 2 passed, 1 failed, 1 abstained of 4 items
    assert "<tr><td>symptoms</td><td>50 %</td><td>2</td><td>1</td><td>1</td><td>4</td></tr>" \
        in page
    # sp-0002 has no disease item: its Dis. score is empty, shown as a dash
    assert "<tr><td>diseases</td><td>—</td><td>0</td><td>0</td><td>0</td><td>0</td></tr>" in page
    assert "Sym. 100 % · Test 50 % · Dis. —" in page


def test_every_link_has_a_target_and_evidence_links_its_turn(outline):
    ids = set(outline.ids)
    assert len(ids) == len(outline.ids), "duplicate ids"
    assert outline.hrefs and all(h.startswith("#") and h[1:] in ids for h in outline.hrefs)
    # polyuria (item 1 of sp-0001/base) was earned in turn index 3
    assert "#c0-sp-0001-d0-t3" in outline.hrefs
    turn = outline.turns["c0-sp-0001-d0-t3"]
    assert "evidence" in turn["class"].split()
    assert "Do you pass urine more often, also at night?" in turn["text"]
    assert "polyuria / nocturia" in turn["text"]            # the turn links back
    assert "#c0-sp-0001-d0-i1" in outline.hrefs
    # an item that failed with no evidence turn frames no turn
    assert not any("evidence" in t["class"].split()
                   for i, t in outline.turns.items() if i.startswith("c0-sp-0001-d1-"))


def test_evidence_sentence_is_highlighted(page):
    assert "<mark>Do you pass urine more often, also at night?</mark>" in page
    assert "<mark>可能是胃食管反流病。</mark>" in page


def test_echo_unsupported_and_dont_know_are_marked(page):
    assert ('<span class="echo">You have been losing weight.</span>'
            '<span class="tag tag-echo">echo (not credited)</span>') in page
    assert ('<span class="unsupported">My father had a heart attack last year.</span>'
            '<span class="tag tag-unsupported">not in the case</span>') in page
    assert '<span class="dont-know">我不清楚有没有幽门螺杆菌。</span>' in page
    assert page.count("echo (not credited)") == 4 + 1   # four echo sentences, one legend
    assert "How to read this page" in page


def test_chinese_case_has_its_lang_and_utf8(outline, page, tmp_path):
    zh = [s for s in outline.sections.values() if s["title"].startswith("sp-zh-01")]
    assert [s["lang"] for s in zh] == ["zh"]
    assert all(s["lang"] == "en" for s in outline.sections.values() if s not in zh)
    head = page.encode("utf-8")[:1024]
    assert b'<meta charset="utf-8">' in head
    path = write_transcripts_html(load_records(), tmp_path / "t.html")
    assert "胃部烧灼感两个月" in path.read_bytes().decode("utf-8")


def test_page_is_self_contained(page, outline):
    assert not re.search(r"https?:|//[a-z]", page, re.IGNORECASE)
    assert not re.search(r"url\(|@import|\ssrc=|<link|<iframe|<object", page, re.IGNORECASE)
    assert "script" not in outline.tags
    assert outline.tags.count("style") == 1


def test_csp_allows_exactly_the_inline_stylesheet(page):
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page).group(1)
    assert "default-src 'none'" in csp and "script-src" not in csp  # scripts: default none
    style = re.search(r"<style>(.*?)</style>", page, re.DOTALL).group(1)
    digest = base64.b64encode(hashlib.sha256(style.encode("utf-8")).digest()).decode()
    assert re.findall(r"'sha256-([^']+)'", csp) == [digest]
    assert " style=" not in page       # an inline style attribute would be refused


def test_missing_optional_keys_do_not_crash():
    records = [{"case": "bare"},
               {"case": "odd", "doctor": "d", "scores": None, "turns": [{"role": "doctor"}],
                "items": [{"item": "x"}, {"item": "y", "passed": True, "evidence_turn": 7},
                          {"item": "z", "passed": True, "evidence_turn": True}]}]
    page = render_transcripts_html(records)
    outline = Outline(page)
    assert all(h[1:] in outline.ids for h in outline.hrefs)
    assert "turn 7 not found" in page and "not scored" in page
    assert "No transcript." in page
    assert render_transcripts_html([]).count("<section class=\"case\"") == 0


def test_write_is_atomic_and_deterministic(tmp_path, monkeypatch, records):
    import medpref.contracts

    target = tmp_path / "06_simulation" / "transcripts.html"
    assert write_transcripts_html(records, target) == target
    assert target.read_text(encoding="utf-8") == render_transcripts_html(records)
    assert [p.name for p in target.parent.iterdir()] == ["transcripts.html"]

    def refuse(*_):
        raise OSError("disk full")

    monkeypatch.setattr(medpref.contracts.os, "replace", refuse)
    with pytest.raises(OSError):
        write_transcripts_html(records[:1], target)
    assert target.read_text(encoding="utf-8") == render_transcripts_html(records)
    assert [p.name for p in target.parent.iterdir()] == ["transcripts.html"]
