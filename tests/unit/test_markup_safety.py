"""No user string becomes markup or a script link (issue 31): Markdown reports
escape every template value and keep only http(s) and relative link targets;
pictures draw names as text. No root.

The stored failover run (tests/data/failover_run) is re-rendered with the
issue's hostile title, and every stored study run with hostile provenance
strings; hypothesis checks that no accepted name or title changes the shape of
the HTML or of the SVG (no element, attribute or link of its own).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from types import SimpleNamespace

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nslab.cmdline.reproduce import first_screen
from nslab.store.draw import available, to_graph
from nslab.model.fields import LABEL_RE
from nslab.store.reporting import Claim, environment, md_escape, render, safe_url, to_html
from nslab.model.topo import Topology

DATA = os.path.join(os.path.dirname(__file__), "..", "data")
NSLAB = os.path.join(os.path.dirname(sys.executable), "nslab")
FILESTUDY = os.path.join(os.path.dirname(__file__), "..", "..", "experiments", "filestudy",
                         "templates")
OPEN_ME = "[Open me](javascript:alert(document.domain))"
URL_ATTRS = ("href", "src")


class Tags(HTMLParser):
    """Start tags with their attributes, and the text, as a browser's tokenizer reads them."""

    def __init__(self, page):
        super().__init__(convert_charrefs=True)
        self.tags, self.text = [], []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    handle_startendtag = handle_starttag

    def handle_data(self, data):
        self.text.append(data)

    def urls(self):
        return [(t, k, v) for t, attrs in self.tags for k, v in attrs.items() if k in URL_ATTRS]

    def shape(self):
        return [(t, sorted(attrs)) for t, attrs in self.tags]


def no_script_link(page):
    """No address in ``page`` is anything but http(s) or relative, as a browser reads it."""
    bad = [u for u in Tags(page).urls() if not safe_url(u[2])]
    assert not bad, bad


# -- the link filter ------------------------------------------------------------------------
@pytest.mark.parametrize("url", [
    "javascript:alert(1)", "JAVASCRIPT:alert(1)", " javascript:alert(1)", "\tjavascript:x",
    "java\tscript:alert(1)", "java\nscript:alert(1)", "java&#x09;script:alert(1)",
    "java&#9;script:alert(1)", "&#106;avascript:alert(1)", "&#x6A;avascript:alert(1)",
    "javascript&colon;alert(1)", "&amp;#106;avascript:alert(1)", "jav&Tab;ascript:alert(1)",
    "\x01javascript:alert(1)", "data:text/html;base64,PHNjcmlwdD4=", "DATA:image/svg+xml,x",
    "vbscript:msgbox(1)", "file:///etc/passwd", "mailto:a@example.org", "x-javascript:1",
])
def test_unsafe_targets_are_refused(url):
    assert not safe_url(url)


@pytest.mark.parametrize("url", [
    "https://example.org/a?b=c&d=e#f", "http://example.org", "HTTPS://example.org",
    "plots.png", "sub/dir/topology-x.svg", "../other/report.html", "#claims", "?q=1", "",
    "//example.org/x", "a%3Ab", "path/with:colon",
])
def test_http_and_relative_targets_are_kept(url):
    assert safe_url(url)


@pytest.mark.parametrize("md", [
    "[x](javascript:alert(1))", "[x](JAVASCRIPT:alert(1))", "[x]( javascript:alert(1))",
    "[x](java&#x09;script:alert(1))", "[x](&#106;avascript:alert(1))",
    "[x](javascript&colon;alert(1))", "[x](<javascript:alert(1)>)",
    "[x](data:text/html;base64,PHNjcmlwdD4=)", "[x](vbscript:msgbox(1))",
    "[x][r]\n\n[r]: javascript:alert(1)", "[x](`javascript:alert(1)`)",
    "![x](javascript:alert(1))", "![x](data:image/svg+xml,<svg onload=alert(1)>)",
    "<javascript:alert(1)>", "<a href=\"javascript:alert(1)\">x</a>",
    "<mailto:a@example.org>",
])
def test_markdown_links_to_scripts_lose_their_target(md):
    page = to_html(md, "t")
    tags = Tags(page)
    assert not any(k in URL_ATTRS for _, attrs in tags.tags for k in attrs), tags.tags
    assert "x" in "".join(tags.text) or "javascript" in "".join(tags.text) or "mailto" in md


def test_markdown_links_that_are_safe_are_kept():
    page = to_html("[a](https://example.org/?q=1&r=2) [b](plots.html#x) ![c](plots.png) "
                   "[d](#claims)", "t")
    assert [(t, k, v) for t, k, v in Tags(page).urls()] == [
        ("a", "href", "https://example.org/?q=1&r=2"), ("a", "href", "plots.html#x"),
        ("img", "src", "plots.png"), ("a", "href", "#claims")]


def test_the_page_allows_no_script():
    page = to_html("x", "t")
    (meta,) = [a for t, a in Tags(page).tags if t == "meta" and "http-equiv" in a]
    assert meta["http-equiv"] == "Content-Security-Policy"
    assert "default-src 'none'" in meta["content"] and "script" not in meta["content"]


# -- template values are text ---------------------------------------------------------------
def test_every_template_value_is_escaped_whatever_its_filter(tmp_path):
    """HTML escaping would leave ``[x](javascript:...)`` a link: every value is
    escaped for Markdown (``finalize``), in a heading (``{{k}}={{v}}``), a
    table cell with or without ``cell``, and a link target (``url``)."""
    (tmp_path / "t.md.j2").write_text(
        "### {{ k }}={{ v }}\n\n| a | b |\n|---|---|\n| {{ v }} | {{ v | cell }} |\n\n"
        "{{ v | upper }} {{ n }} {{ x | num(1) }}\n\n![{{ v }}]({{ v | url }})\n")
    v = OPEN_ME + " <b>x</b> `c` *e* _f_ | &amp; \\ \n# h"
    md = render(str(tmp_path), "t.md.j2", k=v, v=v, n=3, x=-1.25)
    assert "\n# h" not in md and "<b>" not in md
    assert not re.search(r"(?<!\\)\]\(javascript", md)
    page = to_html(md, "t")
    tags = Tags(page)
    assert [t for t, _ in tags.tags if t not in ("html", "head", "meta", "title", "style",
                                                 "body")] == \
        ["h3", "table", "thead", "tr", "th", "th", "tbody", "tr", "td", "td", "p", "p", "img"]
    (img,) = [a for t, a in tags.tags if t == "img"]
    assert safe_url(img["src"]) and ":" not in img["src"]
    cells = [t for t in tags.text if OPEN_ME in t]
    assert len(cells) >= 3  # heading, both cells, paragraph: the value as text
    assert "-1.2" in page and " 3 " in page


def test_a_value_in_a_code_block_cannot_close_it():
    env = environment(FILESTUDY)
    md = env.from_string("```\n{{ t | code }}\n```\n\nafter\n").render(
        t="[  3] x\n```\n[x](javascript:alert(1))\n~~~")
    page = to_html(md, "t")
    assert [t for t, _ in Tags(page).tags if t in ("pre", "code", "a", "p")] == \
        ["pre", "code", "p"]
    assert "[  3] x" in page and "<a " not in page


ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
MD_TEMPLATES = sorted(
    [os.path.join("nslab", "templates", f) for f in os.listdir(os.path.join(ROOT, "nslab",
                                                                              "templates"))
     if f.endswith(".md.j2")]
    + [os.path.join("experiments", d, "templates", f)
       for d in sorted(os.listdir(os.path.join(ROOT, "experiments")))
       if os.path.isdir(os.path.join(ROOT, "experiments", d, "templates"))
       for f in os.listdir(os.path.join(ROOT, "experiments", d, "templates")) if f.endswith(".j2")])


def test_the_template_audit_covers_every_report_template():
    assert len(MD_TEMPLATES) >= 6, MD_TEMPLATES
    assert {os.path.basename(os.path.dirname(os.path.dirname(t))) for t in MD_TEMPLATES} >= \
        {"alias", "ecmp", "filestudy", "rfc2544"}


@pytest.mark.parametrize("name", MD_TEMPLATES)
def test_report_templates_place_values_where_escaping_holds(name):
    """What md_escape cannot see, a template must not do: follow a value at
    the start of a line with '.' or ')' ("0" then ". " numbers a list), use
    ``code`` outside a fenced block or ``url`` outside a link target."""
    text = open(os.path.join(ROOT, name)).read()
    environment(os.path.dirname(os.path.join(ROOT, name))).parse(text)  # it compiles
    assert not re.search(r"(?m)^[ \t]*\{\{[^}]*\}\}[.)]", text)
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if "| code" in line:
            assert fenced, line
        for m in re.finditer(r"\{\{[^}]*\| url[^}]*\}\}", line):
            assert line[:m.start()].endswith("](") and line[m.end():].startswith(")"), line


def test_md_escape_keeps_text_readable():
    assert md_escape("outage-probe.gap_ms 1.5 %") == "outage-probe.gap_ms 1.5 %"
    assert md_escape("_x_ a*b [c](d) e|f <g> &h; \\") == \
        "\\_x\\_ a\\*b \\[c\\](d) e\\|f &lt;g> &amp;h; \\\\"
    assert md_escape(None) == "" and md_escape("a\r\nb\nc") == "a b c"


# -- stored runs, re-rendered ---------------------------------------------------------------
def test_the_stored_failover_run_with_a_script_link_title(tmp_path):
    """The issue's reproduction: a stored file-study run whose study.yaml title
    is a Markdown link to javascript: gave href="javascript:..." after
    `nslab report`. Now the title (and a source with raw HTML and an image
    link) is text: no address but the plots', no event handler; a plot title
    that matplotlib would parse as mathtext (and fail on) is drawn as text."""
    run = tmp_path / "run"
    shutil.copytree(os.path.join(DATA, "failover_run"), run)
    study = yaml.safe_load((run / "study.yaml").read_text())
    source = '<img src=x onerror=alert(1)> ![i](javascript:alert(2))'
    study.update(title=OPEN_ME, source=source)
    study["plots"][0]["title"] = r"$\foo$ [x](javascript:1)"  # text, not mathtext
    (run / "study.yaml").write_text(yaml.safe_dump(study))
    res = subprocess.run([NSLAB, "--results", str(tmp_path / "results"), "report", str(run)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    (path,) = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path) for f in fs
               if f == "report.html"]
    page = open(path).read()
    no_script_link(page)
    tags = Tags(page)
    assert tags.urls() == [("img", "src", "plots.png")]
    assert not any(k.startswith("on") for _, a in tags.tags for k in a)
    text = "".join(tags.text)
    assert OPEN_ME in text and source in text and f"<title>{OPEN_ME}</title>" in page


@pytest.mark.parametrize("name", ["alias_run", "ecmp_run", "failover_run", "rfc2544_run"])
def test_every_study_template_escapes_what_a_stored_run_says(name, tmp_path):
    """Provenance is a stored file too: its host, kernel and CPU model reach
    every study's report as text."""
    from nslab.run.registry import studies, study_from_file
    run = tmp_path / name
    shutil.copytree(os.path.join(DATA, name), run)
    prov_path = run / "provenance.json"
    prov = json.loads(prov_path.read_text())
    hostile = OPEN_ME + " <script>alert(1)</script>"
    prov.update(host=hostile, kernel=hostile, cpu_model=hostile)
    prov_path.write_text(json.dumps(prov))
    kept = run / "study.yaml"
    cls = study_from_file(str(kept)) if kept.exists() else studies()[prov["experiment"]]
    rep = cls().report(str(run))
    page = open(rep.files["html"]).read()
    no_script_link(page)
    tags = Tags(page)
    assert "script" not in [t for t, _ in tags.tags]
    assert hostile in "".join(tags.text)


# -- properties -----------------------------------------------------------------------------
labels = st.from_regex(LABEL_RE, fullmatch=True)
PROPERTY = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])


def filestudy_page(s):
    """The file study's report, every user string ``s``."""
    claims = [Claim(claim=s, measured=s, verdict="agrees", why=s, source=s)]
    rows = [{"params": {s: s, "vars.failure": s}, "n": 2, "invalid": 1, "cells": {s: s}}]
    events = [{"at": 1.5, "do": s, "target": s, "late_ms": 1.0, "n": 2}]
    md = render(FILESTUDY, "report.md.j2", spec=SimpleNamespace(title=s, source=s),
                prov={"host": s, "kernel": s, "cpus": s}, cfg={"duration": s, "repeat": s},
                keys=[s], values=[s], rows=rows, claims=claims,
                topologies=[f"topology-{s}.svg"], events=events, n=2, plots=True)
    return to_html(md, s)


BASELINE = Tags(filestudy_page("plain"))


@PROPERTY
@given(labels)
def test_no_accepted_title_or_name_changes_the_report(s):
    """Whatever a study title, claim, parameter, event or file name says (any
    string the model accepts), the report's HTML has the same elements and
    attributes as with a plain word, every address is safe, and the claim
    reads as the string."""
    page = filestudy_page(s)
    tags = Tags(page)
    assert tags.shape() == BASELINE.shape()
    no_script_link(page)
    (img,) = [a for t, a in tags.tags if t == "img" and "topology" in a.get("alt", "")]
    assert ":" not in img["src"] and img["src"].startswith("topology-")
    cells = [t.strip() for t in tags.text]
    assert s.strip() in cells  # a table cell: the claim, as it was written


CORE_TEMPLATES = os.path.join(ROOT, "nslab", "templates")


def reproduction_page(s):
    """The combined report's first screen and a study section, every string
    a stored run gives it ``s`` (claims, published figures, names, provenance)."""
    claim = Claim(claim=s, measured=s, verdict="disagrees", why=s, source=s, published=s)
    prov = {"host": s, "kernel": s, "cpus": s, "cpu_model": s, "git_commit": s, "python": s,
            "versions": {"iperf2": s, "frr": s}}
    sections = [{"name": s, "title": s, "source": s, "run_dir": s, "prov": prov,
                 "claims": [claim], "body": "", "noise": None, "interference": None},
                {"name": s, "title": s, "source": s, "run_dir": None, "claims": []}]
    notes = first_screen(sections)
    md = render(CORE_TEMPLATES, "reproduce.md.j2", mode=s, sections=sections,
                counts={"agrees": 0, "disagrees": 1, "undecided": 0}, total=1, decided=1,
                provs=[prov], notes=notes)
    return to_html(md, s)


REPRODUCTION_BASELINE = Tags(reproduction_page("plain"))


@PROPERTY
@given(labels)
def test_no_accepted_string_changes_the_reproduction_report(s):
    """Whatever a study file's claim or a stored run's provenance says, the
    combined report's first table keeps its rows and cells (no element of
    its own), and the claim reads as the string."""
    page = reproduction_page(s)
    tags = Tags(page)
    assert tags.shape() == REPRODUCTION_BASELINE.shape()
    no_script_link(page)
    assert s.strip() in [t.strip() for t in tags.text]


@pytest.mark.skipif(not available(), reason="Graphviz (dot) is not installed")
@PROPERTY
@given(labels)
def test_no_accepted_topology_name_changes_the_picture(s):
    """Any name the topology model accepts is drawn as its text: the SVG has
    the elements of a plainly named one, no attribute of it holds the name's
    markup or a script address, and the live page's check passes it."""
    from nslab.traffic.webwatch import clean_svg
    t = Topology(name=s)
    t.add_host("h1")
    t.add_host("h2")
    t.add_link("h1", "h2")
    svg = to_graph(t).pipe(format="svg").decode()
    root = ET.fromstring(clean_svg(svg))
    assert [e.tag for e in root.iter()] == PLAIN_SVG_TAGS
    assert not any("javascript" in v.lower() for e in root.iter() for v in e.attrib.values())
    label = root.find("{http://www.w3.org/2000/svg}g/{http://www.w3.org/2000/svg}text")
    assert label.text.replace("\xa0", " ") == s  # Graphviz keeps runs of spaces as no-break ones


def _plain_svg_tags():
    if not available():
        return []
    t = Topology(name="plain")
    t.add_host("h1")
    t.add_host("h2")
    t.add_link("h1", "h2")
    svg = to_graph(t).pipe(format="svg").decode()
    return [e.tag for e in ET.fromstring(svg[svg.index("<svg"):]).iter()]


PLAIN_SVG_TAGS = _plain_svg_tags()


# -- the terminal ---------------------------------------------------------------------------
RICH_HOSTILE = "[link=javascript:alert(1)]x[/link] [bold red]b :warning:"


def test_the_lab_table_shows_names_as_text(capsys):
    """The lab table's title is the topology name: rich would read
    ``[link=...]`` as a terminal hyperlink, ``[bold]`` as style and
    ``:warning:`` as an emoji. It reads them as text."""
    from nslab.cmdline.cliutil import print_lab
    lab = SimpleNamespace(run_id="nl0001", topology=SimpleNamespace(name=RICH_HOSTILE),
                          build_seconds=1.0,
                          describe=lambda max_intfs: [("h1", "host", "[red]h1-eth0", "x")])
    print_lab(lab)
    out = capsys.readouterr().out
    # the title wraps to the table's width, at spaces
    assert f"lab nl0001: {RICH_HOSTILE} (built in 1.00 s)" in " ".join(out.split())
    assert "[red]h1-eth0" in out and "\N{WARNING SIGN}" not in out


def test_the_watch_table_shows_names_as_text():
    import io

    from rich.console import Console

    from nslab.traffic.watch import Rate, table
    console = Console(file=io.StringIO(), width=200, color_system="truecolor",
                      force_terminal=True)
    console.print(table("[link=https://example.org]nl0001[/link]",
                        [Rate("[b]h1", "[link=x]e", 0, 0, 0, 0, 0)]))
    out = console.file.getvalue()
    assert "[link=https://example.org]nl0001[/link]" in out and "[b]h1" in out
    assert "\x1b]8;" not in out  # no OSC 8 hyperlink
