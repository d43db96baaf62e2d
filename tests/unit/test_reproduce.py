"""The combined report from captured runs of the four studies (no root)."""
import json
import os
import re
import shutil

from nslab.store.reporting import md_escape
from nslab.cmdline.reproduce import ordered_studies, write_report
from nslab.store.stats import VERDICTS
from tests.conftest import data

RUNS = (("alias", "alias_run", "nlc945"), ("ecmp", "ecmp_run", "nle9b7"),
        ("rfc2544", "rfc2544_run", "nlb9f9"), ("ecmp-failover", "failover_run", "nlf4a1"))


def reproduction(tmp_path, leave_out=()):
    """A reproduction directory of the stored runs (but ``leave_out``)."""
    root = tmp_path / "reproduce" / "x"
    for study, src, rid in RUNS:
        if study not in leave_out:
            shutil.copytree(data(src), root / study / rid)
    (root / "mode").write_text("quick\n")
    return root


def own_claims(root):
    """Every claim of every study run in ``root``, by study, as its own report judges it."""
    out = {}
    for study, _, rid in RUNS:
        run = root / study / rid
        if run.exists():
            out[study] = ordered_studies()[study]().report(str(run)).claims
    return out


def first_screen(md):
    """The header, the first table's rows (its header first) and the rest: the
    first screen is everything before the first study's heading."""
    head, _, rest = md.partition("\n## ")
    rows = [[c.strip() for c in line.strip()[1:-1].split(" | ")]
            for line in head.splitlines() if line.startswith("| ")]
    return head, rows, rest


def test_combined_report_from_captured_runs(tmp_path):
    root = reproduction(tmp_path)
    paths = write_report(str(root))
    md = open(paths["md"]).read()
    htm = open(paths["html"]).read()
    for title in ("Study 1: IP aliases", "Study 2: ECMP hashing", "Study 3: RFC 2544",
                  "Study 4: ECMP failover"):
        assert title in md and title in htm
    # each study's own report is nested under the study's heading, images re-pointed
    assert "#### Comparison with the posts" in md
    for img in ("alias/nlc945/alias.png", "ecmp/nle9b7/ecmp.png", "rfc2544/nlb9f9/rfc2544.png",
                "ecmp-failover/nlf4a1/plots.png"):
        assert f"]({img})" in md and f'src="{img}"' in htm and os.path.exists(root / img)
    assert "<table>" in htm and "<script" not in htm


def test_the_first_table_lists_every_claim_once(tmp_path):
    root = reproduction(tmp_path)
    md = open(write_report(str(root))["md"]).read()
    head, rows, rest = first_screen(md)
    assert rows[0][:6] == ["study", "claim", "verdict", "what we measured", "published", "why"]
    rows = rows[1:]  # past the header
    claims = own_claims(root)
    want = [(study, c) for study, cs in claims.items() for c in cs]
    # 21 claims, less the failover file's two on points its quick run did not
    # measure (not made: test_claims_on_points_a_run_did_not_plan_are_not_made)
    assert len(want) == 19 and set(claims) == {s for s, _, _ in RUNS}
    assert [(r[0], r[1]) for r in rows] == [(md_escape(s), md_escape(c.claim)) for s, c in want]
    for (study, c), row in zip(want, rows):
        assert row[2] == f"**{c.verdict}**"
        assert row[3] == md_escape(c.measured) and row[5] == md_escape(c.why)
        assert row[4] == md_escape(c.published)
    # every study with published numbers shows them, from the published data
    shown = {s: [c.published for c in cs if c.published] for s, cs in claims.items()}
    assert all(shown.values()), shown
    assert "66.2 kfps (Table 3)" in shown["rfc2544"]
    assert any("SUM 991 Mbit/s" in p for p in shown["ecmp"])
    assert any("+7.6 %" in p for p in shown["alias"])
    assert "expected under 300 ms" in shown["ecmp-failover"]
    # no claim table follows: no claim's text appears again
    assert "| claim |" not in rest
    for _, c in want:
        assert md_escape(c.claim) not in rest, c.claim


def test_the_header_says_how_the_run_went(tmp_path):
    root = reproduction(tmp_path)
    md = open(write_report(str(root))["md"]).read()
    head, _, _ = first_screen(md)
    verdicts = [c.verdict for cs in own_claims(root).values() for c in cs]
    counts = {v: verdicts.count(v) for v in VERDICTS}
    decided = counts["agrees"] + counts["disagrees"]
    m = re.search(r"\*\*(\d+) of (\d+) claims decided \((\d+) %\)\*\*: (\d+) agree, "
                  r"(\d+) disagree, (\d+) undecided\.", head)
    assert m, head
    assert [int(x) for x in m.groups()] == [
        decided, len(verdicts), round(100 * decided / len(verdicts)), counts["agrees"],
        counts["disagrees"], counts["undecided"]]
    # the failover run measured the host's noise; the others predate it
    noise = json.loads((root / "ecmp-failover" / "nlf4a1" / "provenance.json").read_text())
    noise = noise["host_noise"]
    assert (f"ecmp-failover {noise['p50_us']:.0f} / {noise['p99_us']:.0f} us" in head
            and "alias " not in head.split("Host noise")[1].splitlines()[0])
    assert "Tools: iperf 2.1.8, FRR 8.4.4, Open vSwitch 3.1.0, iproute2 6.1.0, Python 3.11.2." in head
    assert "interference" not in head  # no run recorded any: nothing is invented


def test_a_study_not_run_shows_as_such(tmp_path):
    root = reproduction(tmp_path, leave_out=("ecmp",))
    paths = write_report(str(root))
    md = open(paths["md"]).read()
    head, rows, rest = first_screen(md)
    assert [r[:3] for r in rows if r[0] == "ecmp"] == [["ecmp", "(its claims)", "not run"]]
    assert "- Not run: ecmp." in head
    assert "Study 2: ECMP hashing" in rest and "Not run." in rest.split("## Study 3")[0]
    total = sum(len(cs) for cs in own_claims(root).values())
    assert f"of {total} claims decided" in head


def test_the_html_first_screen_is_the_same_table(tmp_path):
    root = reproduction(tmp_path)
    htm = open(write_report(str(root))["html"]).read()
    first = htm.split("<h2")[0]
    claims = [c for cs in own_claims(root).values() for c in cs]
    assert first.count("<tr>") == len(claims) + 1 and "claims decided" in first
    later = htm.split("<h2", 1)[1]
    assert "<th>what we measured</th>" not in later


def test_each_study_report_still_lists_its_claims(tmp_path):
    root = reproduction(tmp_path)
    write_report(str(root))
    for study, claims in own_claims(root).items():
        (run,) = (root / study).iterdir()
        text = (run / "report.md").read_text()
        assert "| claim | verdict | what we measured | published | why |" in text
        for c in claims:
            assert md_escape(c.claim) in text and md_escape(c.published) in text


def test_interference_is_shown_when_a_run_recorded_it(tmp_path):
    root = reproduction(tmp_path)
    recs = root / "rfc2544" / "nlb9f9" / "records.jsonl"
    lines = recs.read_text().splitlines()
    first = json.loads(lines[0])
    first["host"] = {"other_pct": {"0": 2.0, "1": 41.5}, "worst_cpu": 1, "worst_pct": 41.5,
                     "source": "schedstat", "reruns": 3, "disturbed": True, "threshold_pct": 10.0}
    recs.write_text("\n".join([json.dumps(first)] + lines[1:]) + "\n")
    head, _, _ = first_screen(open(write_report(str(root))["md"]).read())
    assert ("- Host interference: rfc2544 3 trial(s) re-run, 1 excluded (at worst 42 % of a "
            "bed CPU's time went to other tasks).") in head
    # a search's disturbed pass, which stands, is counted apart
    first["measurements"]["probes"][1].update(
        stands=True, invalid=["host interference: the DUT CPU ran 50 % slower (1 tries)"])
    recs.write_text("\n".join([json.dumps(first)] + lines[1:]) + "\n")
    head, _, _ = first_screen(open(write_report(str(root))["md"]).read())
    assert "rfc2544 3 trial(s) re-run, 1 excluded, 1 disturbed pass(es) kept (at worst" in head
    del first["measurements"]["probes"][1]["stands"]
    first["measurements"]["probes"][1]["invalid"] = []
    # a probe that ran while the host slowed the DUT's CPU: its own figure
    first["measurements"]["probes"][0]["dut_slowdown_pct"] = 181.4
    recs.write_text("\n".join([json.dumps(first)] + lines[1:]) + "\n")
    head, _, _ = first_screen(open(write_report(str(root))["md"]).read())
    assert ("(at worst 42 % of a bed CPU's time went to other tasks, and the host slowed a bed "
            "CPU by up to 181 %).") in head


def test_interference_is_read_from_the_trials(tmp_path):
    """Records whose trials carry the accounting (re-runs, an exclusion for
    host interference, other tasks' share per CPU) give the counts; records
    without any give nothing, not zeros."""
    from nslab.cmdline.reproduce import interference_of_records
    run = tmp_path / "run"
    run.mkdir()
    (run / "provenance.json").write_text("{}")
    plain = {"kind": "point", "params": {}, "measurements": {"trials": [{"invalid": []}]}}
    (run / "records.jsonl").write_text(json.dumps(plain) + "\n")
    assert interference_of_records(str(run)) is None
    trials = [
        {"interference": {"dut": {"other_pct": 3.0}, "gen": {"other_pct": 1.0}},
         "interference_reruns": 0, "invalid": []},
        {"interference": {"dut": {"other_pct": 12.5, "slowdown_pct": 41.0},
                          "gen": {"other_pct": 0.0, "slowdown_pct": 122.3}},
         "interference_reruns": 2, "invalid": []},
        {"interference": {"dut": {"other_pct": 55.0}}, "interference_reruns": 2,
         "invalid": ["host interference: 55 % of the DUT CPU's time went to other tasks (3 tries)"]},
    ]
    rec = {"kind": "point", "params": {}, "measurements": {"trials": trials,
                                                           "probe": {"interference_reruns": 1}}}
    # a throughput search's probes keep the figures flat
    probes = [{"interference_reruns": 0, "invalid": [], "dut_other_pct": 2.0,
               "gen_other_pct": 0.5, "dut_slowdown_pct": 3.0, "gen_slowdown_pct": 0.0},
              {"interference_reruns": 0, "invalid": [], "dut_other_pct": 1.0,
               "gen_other_pct": 0.5, "dut_slowdown_pct": 181.4, "gen_slowdown_pct": 9.0}]
    # a disturbed pass of a search stands: kept, not excluded
    probes.append({"interference_reruns": 0, "dut_slowdown_pct": 90.0, "stands": True,
                   "invalid": ["host interference: the DUT CPU ran 90 % slower (1 tries)"]})
    search = {"kind": "point", "params": {}, "measurements": {"probes": probes}}
    with open(run / "records.jsonl", "a") as f:
        f.write(json.dumps(rec) + "\n")
    got = interference_of_records(str(run))
    assert (got.reruns, got.excluded, got.worst_other_pct) == (5, 1, 55.0)
    # the host's slowing of a CPU is its own figure, not folded into other tasks'
    assert got.worst_slowdown_pct == 122.3
    with open(run / "records.jsonl", "a") as f:
        f.write(json.dumps(search) + "\n")
    got = interference_of_records(str(run))
    assert (got.worst_other_pct, got.worst_slowdown_pct) == (55.0, 181.4)
    assert (got.excluded, got.kept) == (1, 1)


def test_html_escapes_what_the_markdown_carries(tmp_path):
    from nslab.store.reporting import to_html
    page = to_html("# A <b>\n\nx & y <script>alert(1)</script>\n\n| a |\n|---|\n| <i>1</i> |\n", "t")
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "x &amp; y" in page and "<table>" in page and "<i>" not in page


def test_claims_on_points_a_run_did_not_plan_are_not_made(tmp_path):
    """The failover file's quick preset measures neither a killed bgpd nor L3
    hashing: those two claims get no verdict from it (not undecided: not
    made), and its report says which and why."""
    from nslab.run.registry import studies
    root = reproduction(tmp_path)
    run = next((root / "ecmp-failover").iterdir())
    rep = studies()["ecmp-failover"]().report(str(run))
    made = [c.claim for c in rep.claims]
    assert len(made) == 5 and not any("crashed bgpd" in c for c in made)
    text = (run / "report.md").read_text()
    assert "Not made in this run" in text
    assert ("A crashed bgpd is no silent failure: the kernel closes its sessions, outage under 1 s "
            "without BFD: this run's sweep has no vars.failure=bgpd-killed") in text
    assert "this run's sweep has no sysctl.server2.net.ipv4.fib_multipath_hash_policy=0" in text


def test_the_header_says_how_each_study_sampled(tmp_path):
    root = reproduction(tmp_path)
    path = root / "ecmp" / "nle9b7" / "provenance.json"
    prov = json.loads(path.read_text())
    prov["sampling"] = {"rounds": 3, "budget_s": 90, "rounds_run": 2,
                        "stopped": "every claim decided after round 2"}
    path.write_text(json.dumps(prov))
    head, _, _ = first_screen(open(write_report(str(root))["md"]).read())
    assert ("- Sampling to a decision (intervals at 1 - 0.05/rounds): ecmp 2 of 3 rounds (every "
            "claim decided after round 2).") in head
