"""The CSPT per-item script labels (data/embedded/sp_script_items_cspt.jsonl, issue 41):
their shape always; with CSPT's archives ($MEDPREF_CSPT) also that they still name the
cases' items and the grader's floor on them (scripts/cspt_item_check.py)."""

from __future__ import annotations

import os
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

from medpref import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "scripts"))
import cspt_item_check as check  # noqa: E402

CSPT = os.environ.get("MEDPREF_CSPT")


def test_the_labels_store_no_cspt_text_and_split_by_case():
    rows = check.load_labels()
    assert len(rows) == 226 and len({r["case"] for r in rows}) == 25
    assert not any(re.search(r"[\u4e00-\u9fff]", str(r)) for r in rows)   # hashes only
    split = {}
    for r in rows:
        assert split.setdefault(r["case"], r["split"]) == r["split"]      # a case is one half
        assert re.fullmatch(r"[0-9a-f]{12}", r["item_sha"])
        assert bool(r["by"]) == r["covered"] == (r["kind"] in ("words", "topic"))
    assert Counter(split.values()) == {"dev": 13, "test": 12}


@pytest.mark.slow
@pytest.mark.skipif(not CSPT or not Path(CSPT).is_dir(),
                    reason="CSPT's archives are not here (set MEDPREF_CSPT)")
def test_the_grader_credits_what_the_cspt_scripts_ask():
    """The script control earns the items the clinician's script asks (test half, scored
    once after change zh-history-headings was fixed: recall 0.966, precision 0.975) and
    the negative controls none."""
    scores, _ = check.run(CSPT, "test")
    got = {r["doctor"]: r for r in scores}
    assert got["control_script"]["recall"] >= 0.9
    assert got["control_script"]["precision"] >= 0.9
    assert all(got[d]["credited"] == 0 for d in check.CONTROLS if d != "control_script")
