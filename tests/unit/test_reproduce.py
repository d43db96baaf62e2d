"""The combined report from captured runs of the three studies (no root)."""
import os
import shutil

from nslab.reproduce import render_html, render_md, write_report
from tests.conftest import data


def test_combined_report_from_captured_runs(tmp_path):
    root = tmp_path / "reproduce" / "x"
    for study, src, rid in (("alias", "alias_run", "nlc945"), ("ecmp", "ecmp_run", "nle9b7"),
                            ("rfc2544", "rfc2544_run", "nlb9f9")):
        shutil.copytree(data(src), root / study / rid)
    (root / "mode").write_text("quick\n")
    paths = write_report(str(root))
    md = open(paths["md"]).read()
    htm = open(paths["html"]).read()
    for title in ("Study 1: IP aliases", "Study 2: ECMP hashing", "Study 3: RFC 2544"):
        assert title in md and title in htm
    assert "L3 hashing keeps -P3 on one link" in md and "| reproduced |" in md
    assert "the rise appears only in the summed client reports" in md
    assert "router minus bridge latency" in md
    for img in ("alias/nlc945/alias.png", "ecmp/nle9b7/ecmp.png", "rfc2544/nlb9f9/rfc2544.png"):
        assert img in md and f"src='{img}'" in htm and os.path.exists(root / img)
    assert "<table>" in htm and "<script" not in htm


def test_renderers_escape_and_agree():
    blocks = [("h2", "A <b>"), ("p", "x & y"), ("table", (["a"], [("1",)])), ("list", ["z"])]
    assert "A &lt;b&gt;" in render_html(blocks) and "x &amp; y" in render_html(blocks)
    assert "## A <b>" in render_md(blocks) and "| 1 |" in render_md(blocks)
