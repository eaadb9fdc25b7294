"""The CSPT adapter on our own fixtures, in every form the data set comes in.

``tests/fixtures/cspt`` holds the awkward shapes (copy marks, junk, unmatched halves);
``tests/fixtures/cspt_published`` is the published layout with all five departments and
family informants, from which the tests build the two published archives (scripts,
checklists) and their variants.
"""

from __future__ import annotations

import json
import logging
import shutil
import zipfile
from pathlib import Path

import pytest

from medpref.contracts import ContractError
from medpref.data.adapters import SP_CASE_SOURCES
from medpref.data.cspt import (
    CsptNotFoundError,
    case_key,
    cspt_cases,
    department_of,
    is_informant,
    load_cspt,
    pair_messages,
)

FIXTURE = Path(__file__).parent / "fixtures" / "cspt"
PUBLISHED = Path(__file__).parent / "fixtures" / "cspt_published"
PUBLISHED_DEPARTMENTS = {"internal_medicine": 1, "surgery": 2, "gynecology": 1,
                         "pediatrics": 2, "psychiatry": 2}
EXPECTED_IDS = ["cspt-gynecology-01", "cspt-internal_medicine-01", "cspt-internal_medicine-02",
                "cspt-surgery-01"]


def _zip(folder: Path, target: Path, prefix: str = "") -> Path:
    """Zip ``folder`` (junk included) under ``prefix`` inside the archive."""
    with zipfile.ZipFile(target, "w") as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                zf.write(path, prefix + path.relative_to(folder).as_posix())
    return target


def _check_fixture_result(cases, report):
    by_id = {c.id: c for c in cases}
    assert sorted(by_id) == EXPECTED_IDS
    assert all(c.lang == "zh" and c.source == "cspt" for c in cases)

    chest = by_id["cspt-internal_medicine-01"]
    assert chest.department == "internal_medicine"
    assert chest.chief_complaint == "活动后胸痛三周"
    assert chest.patient_info["既往史"] == "高血压十年。"
    # the patient's opening message and the last unanswered doctor message are dropped;
    # the two doctor messages in a row are joined without a space (Chinese)
    assert chest.script == [
        {"doctor": "您好。哪里不舒服？", "patient": "走快了胸口闷。"},
        {"doctor": "休息后能缓解吗？", "patient": "歇五分钟就好。"},
        {"doctor": "抽烟吗？", "patient": "抽了三十年。"},
    ]
    assert chest.checklist.symptoms == ["胸痛的诱因", "持续时间及缓解方式", "吸烟史"]
    assert chest.checklist.tests == ["心电图", "运动平板试验"]
    assert chest.checklist.diseases == ["稳定型心绞痛"]

    # "2_腹泻" folder matched "02_腹泻.json"; no chief_complaint.txt: 主诉 stands in
    diarrhoea = by_id["cspt-internal_medicine-02"]
    assert diarrhoea.chief_complaint == "腹泻两天"
    assert diarrhoea.patient_info["现病史"] == "两天前进食海鲜后腹泻，每日6次。\n无发热。"
    # "01_阑尾炎 copy" folder matched "01_阑尾炎.json"
    appendix = by_id["cspt-surgery-01"]
    assert appendix.meta["script_folder"].endswith("外科/01_阑尾炎 copy")
    assert appendix.checklist.diseases == ["急性阑尾炎"]
    # "1_月经不调 copy.json" matched folder "01_月经不调"; its empty test list stays empty
    gyn = by_id["cspt-gynecology-01"]
    assert gyn.checklist.tests == [] and gyn.meta["checklist_file"] == "1_月经不调 copy.json"

    assert report.cases == 4 and not report.clean
    assert [s.split("script/", 1)[1] for s in report.unmatched_scripts] == ["儿科/01_发热"]
    assert [s.split("check_list/", 1)[1] for s in report.unmatched_checklists] == [
        "精神科/01_失眠.json"]
    assert len(report.incomplete) == 1 and "2_腹泻: no chief_complaint.txt" in report.incomplete[0]
    assert report.duplicates == [] and report.bad == [] and report.unknown_departments == []
    assert report.dropped_messages == 2
    assert report.junk_skipped == 3   # __MACOSX/..., ._script.json, .DS_Store
    assert report.departments == {"internal_medicine": 2, "surgery": 1, "gynecology": 1,
                                  "pediatrics": 0, "psychiatry": 0}
    assert report.missing_departments == ["pediatrics", "psychiatry"]
    assert all(c.informant is None for c in cases)


def test_fixture_folder():
    _check_fixture_result(*load_cspt(FIXTURE))


def test_fixture_zip_with_a_root_folder_and_junk(tmp_path):
    archive = _zip(FIXTURE, tmp_path / "CSPT.zip", prefix="CSPT/")
    with zipfile.ZipFile(archive) as zf:
        assert any(n.startswith("CSPT/__MACOSX/") for n in zf.namelist())
    cases, report = load_cspt(archive)
    _check_fixture_result(cases, report)
    from_folder = load_cspt(FIXTURE)[0]
    assert [c.model_dump(exclude={"meta"}) for c in cases] == [
        c.model_dump(exclude={"meta"}) for c in from_folder]
    assert cases[0].meta["script_folder"].startswith("CSPT/script/")


def test_zip_with_legacy_gbk_names(tmp_path, monkeypatch):
    """Zips made on Chinese Windows store GBK names without the UTF-8 flag."""
    # zipfile writes any non-ASCII name as flagged UTF-8; write the raw bytes instead
    monkeypatch.setattr(zipfile.ZipInfo, "_encodeFilenameFlags",
                        lambda self: (self.filename.encode("cp437"), self.flag_bits))
    archive = tmp_path / "gbk.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(FIXTURE.rglob("*")):
            if path.is_file() and "__MACOSX" not in path.parts:
                info = zipfile.ZipInfo(path.relative_to(FIXTURE).as_posix())
                info.filename = info.filename.encode("gbk").decode("cp437")
                zf.writestr(info, path.read_bytes())
    monkeypatch.undo()
    with zipfile.ZipFile(archive) as zf:
        assert not any("内科" in n for n in zf.namelist())   # Python cannot read them as is
    cases, _ = load_cspt(archive)
    assert sorted(c.id for c in cases) == EXPECTED_IDS


def test_registry_and_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="medpref.data.cspt"):
        cases = SP_CASE_SOURCES["cspt"](FIXTURE)
    assert len(cases) == 4
    assert "1 unmatched scripts: script/儿科/01_发热" in caplog.text


def test_duplicate_checklists_prefer_the_one_without_copy(tmp_path):
    root = tmp_path / "cspt"
    shutil.copytree(FIXTURE, root)
    original = root / "check_list" / "外科" / "01_阑尾炎.json"
    shutil.copy(original, original.with_name("01_阑尾炎 copy.json"))
    data = json.loads(original.read_text(encoding="utf-8"))
    data["diagnostic"] = ["不同的诊断"]
    original.with_name("01_阑尾炎 copy.json").write_text(json.dumps(data, ensure_ascii=False),
                                                      encoding="utf-8")
    cases, report = load_cspt(root)
    surgery = next(c for c in cases if c.id == "cspt-surgery-01")
    assert surgery.checklist.diseases == ["急性阑尾炎"]
    assert len(report.duplicates) == 1 and "kept '01_阑尾炎.json'" in report.duplicates[0]


def test_broken_json_names_the_member_and_line(tmp_path):
    root = tmp_path / "cspt"
    shutil.copytree(FIXTURE, root)
    bad = root / "script" / "外科" / "01_阑尾炎 copy" / "script.json"
    bad.write_text('{"title": "x",\n "messages": [\n', encoding="utf-8")
    with pytest.raises(ContractError) as err:
        load_cspt(root)
    assert err.value.field == "<json>" and err.value.line == 3
    assert "01_阑尾炎 copy/script.json:3" in str(err.value)
    # in a zip the location is archive!member
    with pytest.raises(ContractError, match=r"broken\.zip!script/外科/01_阑尾炎 copy/script\.json"):
        load_cspt(_zip(root, tmp_path / "broken.zip"))
    cases, report = load_cspt(root, skip_bad=True)
    assert len(cases) == 3 and len(report.bad) == 1


def test_unknown_sender_and_empty_complaint_are_contract_errors(tmp_path):
    root = tmp_path / "cspt"
    shutil.copytree(FIXTURE, root)
    script = root / "script" / "妇科" / "01_月经不调" / "script.json"
    script.write_text(json.dumps({"messages": [{"sender_name": "护士", "content": "?"}]},
                                 ensure_ascii=False), encoding="utf-8")
    with pytest.raises(ContractError, match=r"field 'messages\.0\.sender_name'.*护士"):
        load_cspt(root)
    script.write_text(json.dumps({"messages": []}), encoding="utf-8")
    (root / "script" / "妇科" / "01_月经不调" / "chief_complaint.txt").write_text("  \n")
    with pytest.raises(ContractError, match=r"patient\.json: field 'chief_complaint'"):
        load_cspt(root)


def test_not_a_folder_or_zip(tmp_path):
    (tmp_path / "x.txt").write_text("hello")
    with pytest.raises(FileNotFoundError, match="not a folder or a zip"):
        load_cspt(tmp_path / "x.txt")


def test_name_matching_rules():
    assert case_key("01_胸痛") == case_key("1_胸痛 copy") == case_key("001_胸痛.json") == "1"
    assert case_key("胸痛 副本") == case_key("胸痛 (2).json") == "胸痛"
    assert case_key("12 case") != case_key("1 case")
    assert department_of("内科 copy") == "internal_medicine"
    assert department_of("精神科") == "psychiatry" and department_of("眼科") is None


def test_pair_messages_golden():
    messages = [{"sender_name": "患者", "content": "hello"},
                {"sender_name": "医生", "content": "What brings you in?"},
                {"sender_name": "医生", "content": "Take your time."},
                {"sender_name": "患者", "content": "A cough."},
                {"sender_name": "医生", "content": ""},            # empty: skipped
                {"sender_name": "患者", "content": "For a week."},   # joins the answer
                {"sender_name": "医生", "content": "Any fever?"}]
    pairs, dropped = pair_messages(messages)
    assert pairs == [{"doctor": "What brings you in? Take your time.",
                      "patient": "A cough. For a week."}]
    assert dropped == 2


def test_gbk_file_contents_and_copied_case_files(tmp_path):
    root = tmp_path / "cspt"
    shutil.copytree(FIXTURE, root)
    folder = root / "script" / "内科" / "01_胸痛"
    (folder / "chief_complaint.txt").write_bytes("胸口疼三周".encode("gbk"))
    (folder / "patient copy.json").write_text(json.dumps({"患者": "旧的副本"}, ensure_ascii=False),
                                              encoding="utf-8")
    cases, _ = load_cspt(root)
    chest = next(c for c in cases if c.id == "cspt-internal_medicine-01")
    assert chest.chief_complaint == "胸口疼三周"
    assert chest.patient_info["患者"] == "男，58岁"
    # in a zip the copy may come after the original: the original still wins
    archive = tmp_path / "late_copy.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        files = sorted(p for p in root.rglob("*") if p.is_file())
        for path in sorted(files, key=lambda p: p.name == "patient copy.json"):
            zf.write(path, path.relative_to(root).as_posix())
        assert zf.namelist()[-1].endswith("patient copy.json")
    chest = next(c for c in load_cspt(archive)[0] if c.id == "cspt-internal_medicine-01")
    assert chest.patient_info["患者"] == "男，58岁"


# ------------------------------------------------------------------ the published form


def _zip_dir(folder: Path, target: Path, arcroot: str) -> Path:
    """Zip ``folder``'s files under ``arcroot`` (e.g. ``script/`` as published)."""
    with zipfile.ZipFile(target, "w") as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                zf.write(path, arcroot + path.relative_to(folder).as_posix())
    return target


def _published_archives(folder: Path, inner: bool = True) -> tuple[Path, Path]:
    """The two published archives in ``folder``: scripts and checklists, each holding its
    ``script/`` or ``check_list/`` folder (``inner=False``: the departments at the top)."""
    folder.mkdir(parents=True, exist_ok=True)
    return (_zip_dir(PUBLISHED / "script", folder / "script.zip", "script/" * inner),
            _zip_dir(PUBLISHED / "check_list", folder / "check_list.zip", "check_list/" * inner))


def _content(cases):
    return [c.model_dump(exclude={"meta"}) for c in cases]


def _check_published(cases, report):
    by_id = {c.id: c for c in cases}
    assert len(cases) == 8 and report.clean and report.duplicates == []
    assert report.departments == PUBLISHED_DEPARTMENTS and report.missing_departments == []
    assert {k: c.informant for k, c in by_id.items() if c.informant} == {
        "cspt-pediatrics-01": "患儿家属", "cspt-pediatrics-02": "患者母亲",
        "cspt-surgery-02": "患者父亲", "cspt-psychiatry-02": "病人家属"}
    assert report.informants == {"患儿家属": 1, "患者母亲": 1, "患者父亲": 1, "病人家属": 1}
    # the informant answers on the patient side; the child speaks once in between,
    # and the "（代诉）" note after the mother's name is dropped from her name
    cough = by_id["cspt-pediatrics-02"]
    assert cough.script == [
        {"doctor": "咳嗽几天了？", "patient": "五天了。"},
        {"doctor": "小朋友，哪里不舒服？", "patient": "嗓子疼。"},
        {"doctor": "晚上咳得厉害吗？", "patient": "晚上更厉害。"}]
    assert cough.meta["patient_side"] == {"患者母亲": 2, "患儿": 1}
    assert by_id["cspt-pediatrics-01"].script[1] == {"doctor": "一天几次？",
                                                     "patient": "五次左右，像水一样。"}
    voices = by_id["cspt-psychiatry-02"]
    assert voices.meta["patient_side"] == {"病人家属": 2, "患者": 1}
    assert by_id["cspt-psychiatry-01"].informant is None
    assert by_id["cspt-gynecology-01"].checklist.tests == []


def test_published_layout_unpacked():
    _check_published(*load_cspt(PUBLISHED))


def test_folder_holding_the_two_published_archives(tmp_path):
    script_zip, checklist_zip = _published_archives(tmp_path / "download")
    cases, report = load_cspt(tmp_path / "download")
    _check_published(cases, report)
    assert _content(cases) == _content(load_cspt(PUBLISHED)[0])
    assert cases[0].meta["script_folder"].startswith("script/script/")   # archive/member
    # the two archives named together load the same
    both, _ = load_cspt([script_zip, checklist_zip])
    assert _content(both) == _content(cases)


def test_archives_without_an_inner_folder_and_an_archive_of_archives(tmp_path):
    _published_archives(tmp_path / "flat", inner=False)   # script.zip: 内科/01_头痛/...
    _check_published(*load_cspt(tmp_path / "flat"))
    outer = _zip_dir(tmp_path / "flat", tmp_path / "CSPT.zip", "CSPT/")
    cases, report = load_cspt(outer)
    _check_published(cases, report)


def test_archives_next_to_their_unpacked_copy_load_once(tmp_path):
    folder = tmp_path / "download"
    _published_archives(folder)
    for half in ("script", "check_list"):
        shutil.copytree(PUBLISHED / half, folder / half)
    cases, report = load_cspt(folder)
    _check_published(cases, report)
    assert report.repeats == 16 and "found twice" in report.summary()
    assert not any(c.meta["script_folder"].startswith("script/script/") for c in cases)


def test_one_archive_alone_is_an_error_that_says_what_is_missing(tmp_path):
    script_zip, checklist_zip = _published_archives(tmp_path / "download")
    with pytest.raises(CsptNotFoundError) as err:
        load_cspt(script_zip)
    message = str(err.value)
    assert "no CSPT case loaded" in message and "8 script case folder(s)" in message
    assert "pediatrics 2" in message and "0 checklist file(s)" in message
    assert "the checklists archive (check_list/...) is missing" in message
    assert "check_list/<department>/<NN_case>.json" in message        # what is expected
    with pytest.raises(CsptNotFoundError, match=r"the scripts archive \(script/\.\.\.\) is"):
        load_cspt(checklist_zip)


def test_a_folder_without_cases_is_an_error(tmp_path):
    (tmp_path / "notes.txt").write_text("nothing here")
    _zip_dir(FIXTURE / "check_list" / "外科", tmp_path / "other.zip", "a/")  # not CSPT-shaped
    with pytest.raises(CsptNotFoundError) as err:
        load_cspt(tmp_path)
    message = str(err.value)
    assert "Found 2 file(s) (read from 1 archive(s)" in message and "other.zip" in message
    assert "0 script case folder(s)" in message and "Expected both halves" in message


def test_load_report_is_logged_per_department(caplog):
    with caplog.at_level(logging.INFO, logger="medpref.data.cspt"):
        assert len(cspt_cases(PUBLISHED)) == 8
    record = next(r for r in caplog.records if r.name == "medpref.data.cspt")
    assert record.levelno == logging.INFO
    assert ("per department: internal_medicine 1, surgery 2, gynecology 1, pediatrics 2, "
            "psychiatry 2") in record.getMessage()


def test_informant_names():
    for name in ("患儿家属", "病人家属", "患者母亲", "患者父亲", "家属", "患者家属", "妈妈",
                 "患者的女儿", "患者母亲（代诉）", "mother", "Patient's father", "family member"):
        assert is_informant(name), name
    for name in ("患者", "患儿", "医生", "护士", "patient", "doctor", "母亲节"):
        assert not is_informant(name), name
