"""The CSPT adapter on our own fixture (tests/fixtures/cspt), as a folder and as a zip."""

from __future__ import annotations

import json
import logging
import shutil
import zipfile
from pathlib import Path

import pytest

from medpref.contracts import ContractError
from medpref.data.adapters import SP_CASE_SOURCES
from medpref.data.cspt import case_key, department_of, load_cspt, pair_messages

FIXTURE = Path(__file__).parent / "fixtures" / "cspt"
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
