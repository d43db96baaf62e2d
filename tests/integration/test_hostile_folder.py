"""A lab folder from anyone cannot take root (issue 31), run as a student
would: `sudo nslab ...` from inside the folder. The folder ships an `nslab/`
package that would write a marker if imported, a results tree of links to a
file outside, a study with a probe flow (nslab starts its own Python), a
topology asking for an uplink, a controller and force, a 10^9-point sweep,
10,000-deep YAML, and HTML in names and titles. Nothing outside the folder
and the lab is touched, the marker is never written, and each refusal is one
line naming the file, line and field."""
import os
import shutil
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest

pytestmark = pytest.mark.root

NSLAB = os.path.join(os.path.dirname(sys.executable), "nslab")
DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")

PROBE_STUDY = """\
name: probe
title: "[Open me](javascript:alert(document.domain)) <b>bold</b>"
topology:
  inline:
    name: '<<TABLE HREF="javascript:alert(1)"><TR><TD>x</TD></TR></TABLE>>'
    nodes: {h1: {ip: 10.9.0.1/24}, h2: {ip: 10.9.0.2/24}}
    links: [[h1, h2]]
duration: 1.5
settle: 0
traffic:
  - {id: probe, kind: probe, src: h1, dst: h2, rate: 100}
metrics:
  - {metric: outage, flow: probe}
repeat: 2
"""

EVIL_TOPO = """\
name: evil
switch: ovs
nodes:
  h1: {ip: 10.0.0.1/24}
  s1:
    kind: switch
    uplink: IFACE
    force: true
    controller: tcp:203.0.113.9:6653
links:
  - [h1, s1]
"""

HUGE_SWEEP = """\
name: huge
title: a billion points
topology:
  inline:
    nodes: {h1: {ip: 10.9.0.1/24}, h2: {ip: 10.9.0.2/24}}
    links: [[h1, h2]]
duration: 1
traffic:
  - {id: probe, kind: probe, src: h1, dst: h2, rate: 100}
events:
  - {at: 0.5, when: {vars.a: 1}, do: link-down, link: [h1, h2]}
sweep:
  vars.a: [%s]
  vars.b: [%s]
  vars.c: [%s]
metrics:
  - {metric: outage, flow: probe}
""" % ((", ".join(str(i) for i in range(1000)),) * 3)


SVG = "{http://www.w3.org/2000/svg}"


class _Attrs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.found = []

    def handle_starttag(self, tag, attrs):
        self.found += [(tag, k, v or "") for k, v in attrs]


def unsafe_html(html):
    """Elements or attributes a hostile string could have made active: script
    links, inline handlers, elements from the strings themselves."""
    p = _Attrs()
    p.feed(html)
    return [(t, k, v) for t, k, v in p.found
            if "javascript:" in v.replace(" ", "").lower() or k.startswith("on") or t in ("b", "table")]


def unsafe_svg(svg):
    bad = []
    for el in ET.fromstring(svg).iter():
        if el.tag in (SVG + "a", SVG + "script", SVG + "foreignObject"):
            bad.append(el.tag)
        for k, v in el.attrib.items():
            if "javascript:" in v.lower() or k.lower().startswith("on"):
                bad.append((el.tag, k, v))
    return bad


def host_state():
    def out(argv):
        return subprocess.run(argv, capture_output=True, text=True).stdout
    return {"netns": sorted(l.split()[0] for l in out(["ip", "netns", "list"]).splitlines()
                            if l.strip()),
            "links": sorted(l.split(":")[1].strip() for l in out(["ip", "-o", "link"]).splitlines()),
            "ovs": out(["ovs-vsctl", "--timeout=5", "list-br"]) if shutil.which("ovs-vsctl") else ""}


@pytest.fixture
def folder(tmp_path):
    """The hostile folder, and a victim file outside it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text("precious\n")
    lab = tmp_path / "lab"
    (lab / "nslab").mkdir(parents=True)
    marker = tmp_path / "marker"
    (lab / "nslab" / "__init__.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran as root from the folder')\n")
    (lab / "studies").mkdir()
    (lab / "studies" / "probe.yaml").write_text(PROBE_STUDY)
    (lab / "studies" / "huge.yaml").write_text(HUGE_SWEEP)
    (lab / "deep.yaml").write_text("[" * 10000 + "]" * 10000 + "\n")
    # a stored run whose report.md is a link to the victim
    stored = lab / "results" / "alias" / "nl0bad"
    shutil.copytree(os.path.join(DATA, "alias_run"), stored)
    if (stored / "report.md").exists():
        (stored / "report.md").unlink()
    os.symlink(victim, stored / "report.md")
    return {"lab": lab, "marker": marker, "victim": victim, "outside": outside}


def nslab(folder, *args, timeout=300):
    return subprocess.run([NSLAB, *args], cwd=folder["lab"], capture_output=True, text=True,
                          timeout=timeout)


def one_line(res):
    err = res.stderr.strip()
    assert res.returncode != 0 and "Traceback" not in err, res
    assert len(err.splitlines()) == 1, err
    return err


def untouched(folder):
    assert not folder["marker"].exists(), "code from the folder ran"
    assert folder["victim"].read_text() == "precious\n"
    assert os.listdir(folder["outside"]) == ["victim.txt"]


@pytest.mark.slow
def test_a_study_with_a_probe_flow_runs_no_code_from_the_folder(folder):
    before = host_state()
    res = nslab(folder, "run", "studies/probe.yaml")
    assert res.returncode == 0, res.stderr[-2000:]
    untouched(folder)
    runs = os.listdir(folder["lab"] / "results" / "probe")
    assert len(runs) == 1
    run = folder["lab"] / "results" / "probe" / runs[0]
    html = (run / "report.html").read_text()
    assert "<b>bold</b>" not in html
    assert not unsafe_html(html)
    for svg in run.glob("*.svg"):
        assert not unsafe_svg(svg.read_text()), svg
    assert host_state() == before


def test_the_cli_imports_nothing_from_the_folder(folder):
    res = nslab(folder, "--version")
    assert res.returncode == 0, res
    res = nslab(folder, "run", "--list")
    assert res.returncode == 0, res
    untouched(folder)


def test_a_report_never_writes_through_a_link_the_folder_ships(folder):
    res = nslab(folder, "report", "results/alias/nl0bad")
    assert res.returncode == 0, res
    untouched(folder)
    # the report went to a new directory, whose path it printed
    printed = [w for w in (res.stdout + res.stderr).split() if "results/reports/" in w]
    assert printed, res.stdout + res.stderr
    assert any(os.path.isfile(os.path.join(folder["lab"], p.strip(":,()"), "report.md"))
               or os.path.isfile(os.path.join(folder["lab"], p.strip(":,()")))
               for p in printed), printed


def test_a_results_root_that_is_a_link_is_refused_in_one_line(folder):
    shutil.rmtree(folder["lab"] / "results")
    os.symlink(folder["outside"], folder["lab"] / "results")
    before = host_state()
    err = one_line(nslab(folder, "run", "studies/probe.yaml"))
    assert "symbolic link" in err
    untouched(folder)
    assert host_state() == before


def test_host_network_fields_of_a_file_need_the_command_line(folder):
    iface = "nslabevil0"  # a dummy-like veth of the test's own, never attached
    subprocess.run(["ip", "link", "add", iface, "type", "veth", "peer", "name", iface + "p"],
                   check=True)
    try:
        (folder["lab"] / "evil.yaml").write_text(EVIL_TOPO.replace("IFACE", iface))
        before = host_state()
        err = one_line(nslab(folder, "topo", "up", "evil.yaml", "--for", "0"))
        assert "evil.yaml:7: nodes.s1.uplink" in err and f"--uplink {iface}" in err
        err = one_line(nslab(folder, "topo", "up", "evil.yaml", "--for", "0", "--uplink", iface))
        assert "evil.yaml:8: nodes.s1.force" in err
        err = one_line(nslab(folder, "topo", "up", "evil.yaml", "--for", "0", "--uplink", iface,
                             "--force"))
        assert "evil.yaml:9: nodes.s1.controller" in err and "--allow-controller" in err
        assert host_state() == before
        master = subprocess.run(["ip", "-o", "link", "show", iface], capture_output=True,
                                text=True).stdout
        assert "master" not in master
    finally:
        subprocess.run(["ip", "link", "del", iface], check=False)
    untouched(folder)


def test_a_billion_point_sweep_is_refused_at_once(folder):
    t0 = time.monotonic()
    err = one_line(nslab(folder, "study", "check", "studies/huge.yaml"))
    assert time.monotonic() - t0 < 20
    assert "huge.yaml" in err and "sweep" in err
    untouched(folder)


def test_deep_yaml_is_one_line(folder):
    err = one_line(nslab(folder, "topo", "up", "deep.yaml", "--for", "0"))
    assert "deep.yaml" in err
    untouched(folder)


def test_html_in_a_topology_name_is_drawn_as_text(folder):
    path = folder["lab"] / "html.yaml"
    path.write_text(textwrap.dedent("""\
        name: '<<TABLE HREF="javascript:alert(1)"><TR><TD>x</TD></TR></TABLE>>'
        nodes: {h1: {}, h2: {}}
        links: [[h1, h2]]
        """))
    res = nslab(folder, "topo", "draw", "html.yaml", "-o", "html.svg")
    if res.returncode != 0 and "Graphviz" in res.stderr:
        pytest.skip("no Graphviz")
    assert res.returncode == 0, res
    svg = (folder["lab"] / "html.svg").read_text()
    assert not unsafe_svg(svg)
    # the name is drawn as text (Graphviz also writes it, escaped, in a comment)
    assert any("TABLE" in (t.text or "") for t in ET.fromstring(svg).iter(SVG + "text"))
    untouched(folder)
