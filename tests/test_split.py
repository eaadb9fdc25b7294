"""The written dialogue split: every embedded dialogue in exactly one part, errors that
name the file, the line and the part."""

from __future__ import annotations

import pytest

from medpref.contracts import ContractError, Dialogue, read_jsonl
from medpref.data.split import load_split
from medpref.params import load_params, repo_path


def test_every_embedded_dialogue_is_in_one_part():
    split = load_split(repo_path(load_params().shared.split))
    ids = [d.id for d in read_jsonl(repo_path("data/embedded/dialogues.jsonl"), Dialogue)]
    assert sorted(split.parts) == sorted(ids)
    assert all(split.ids(p) for p in ("train", "dev", "eval"))


def test_select_keeps_order_and_refuses_unlisted(tmp_path):
    f = tmp_path / "split.yaml"
    f.write_text("train: [a, c]\ndev: [b]\neval: []\n")
    split = load_split(f)
    assert split.select(["c", "b", "a"], "train", key=str) == ["c", "a"]
    assert split.select(["c", "b", "a"], ["train", "dev"], key=str) == ["c", "b", "a"]
    with pytest.raises(KeyError, match="'z' is in no part"):
        split.select(["z"], "train", key=str)


@pytest.mark.parametrize("text, where", [
    ("train: [a]\ntest: [b]\n", r"split.yaml:2: field 'test': unknown part"),
    ("train: [a]\ndev:\n  - b\n  - a\n",
     r"split.yaml:4: field 'dev': dialogue 'a' is also in 'train'"),
    ("train: a\n", r"split.yaml:1: field 'train': must be a list"),
])
def test_bad_split_files_name_file_line_and_part(tmp_path, text, where):
    f = tmp_path / "split.yaml"
    f.write_text(text)
    with pytest.raises(ContractError, match=where):
        load_split(f)
