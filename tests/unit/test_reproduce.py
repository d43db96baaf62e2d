"""The combined report from captured runs of the three studies (no root)."""
import os
import shutil

from nslab.reproduce import write_report
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
    assert "L3 hashing keeps -P3 on one link" in md
    assert "Linux IP aliasing adds no measurable overhead" in md
    assert "A router adds about 5 us of latency over a bridge" in md
    # each study's own report is nested under the study's heading, images re-pointed
    assert "#### Comparison with the posts" in md
    for img in ("alias/nlc945/alias.png", "ecmp/nle9b7/ecmp.png", "rfc2544/nlb9f9/rfc2544.png"):
        assert f"]({img})" in md and f'src="{img}"' in htm and os.path.exists(root / img)
    assert "<table>" in htm and "<script" not in htm


def test_html_escapes_what_the_markdown_carries(tmp_path):
    from nslab.reporting import to_html
    page = to_html("# A <b>\n\nx & y <script>alert(1)</script>\n\n| a |\n|---|\n| <i>1</i> |\n", "t")
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "x &amp; y" in page and "<table>" in page and "<i>" not in page
