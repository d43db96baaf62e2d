"""Changing a running lab's links, without a lab: the typed change from the
command line, what a link carries after changes add up, the tc and ip
commands run at each end (recorded, not run), the record and the journal
item, a kernel without netem refusing a delay, and reset. No root."""
import json
import os

import pytest

from nslab.errors import CapabilityError, InputError
from nslab.model.checks import LinkChange
from nslab.model.shaping import Shaping
from nslab.model.topo import Topology
from nslab.runtime import caps, clean
from nslab.runtime.proc import Result
from nslab.traffic import linkset
from nslab.traffic.capture import LabMap
from nslab.cmdline.linkcli import change_of

RUN = "nl1234"


def topo():
    t = Topology(name="t")
    for n in ("h1", "h2"):
        t.add_host(n)
    t.add_switch("s1", type="ovs")
    t.add_link("h1", "s1", bw="1Gbit")
    t.add_link("h2", "s1")
    t.add_link("h1", "h2", None, None, delay="5ms")
    return t.validate()


def lab_map():
    return LabMap(RUN, ["h1", "h2", "s1"], [("h1", "h1-eth0", "s1", "s1-eth1"),
                                             ("h2", "h2-eth0", "s1", "s1-eth2"),
                                             ("h1", "h1-eth1", "h2", "h2-eth1")],
                  {"h1": f"{RUN}-h1", "h2": f"{RUN}-h2", "s1": None},
                  {"s1": {"s1-eth1": f"{RUN}-p0", "s1-eth2": f"{RUN}-p1"}})


@pytest.fixture
def lab(tmp_path, monkeypatch):
    """A lab whose commands are recorded, in a state directory of the test's."""
    monkeypatch.setattr(clean, "STATE_DIR", str(tmp_path))
    os.makedirs(clean.workdir(RUN))
    clean.write_journal(RUN, {"run": RUN, "pid": os.getpid(), "pid_start": 1.0,
                              "restore": [{"what": "uplink eth9", "argv": []}]})
    monkeypatch.setattr(clean, "run_is_live", lambda j: j is not None)
    ran = []

    def fake_run(netns, argv, run_id, input=None, where=""):
        ran.append((netns, argv, input))
        return Result(argv, 0, "", "")
    monkeypatch.setattr(linkset, "run_in", fake_run)
    monkeypatch.setattr(caps, "require", lambda names, what="": {})
    live = linkset.LiveLab(RUN, topo(), lab_map())
    live.ran = ran
    return live


def test_the_command_line_gives_the_same_typed_change_a_file_does():
    assert change_of({"link": "h1-s1", "delay": "50ms", "loss": "1%", "state": None}) == \
        LinkChange(link="h1-s1", delay=50.0, loss=1.0)
    for values, says in (
            ({"link": "h1-s1", "delay": "50 parsecs"}, "--delay 50 parsecs: bad delay"),
            ({"link": "h1-s1", "loss": "2x"}, "--loss 2x: '2x' is not a percentage"),
            ({"link": "h1-s1", "rate": "-5"}, "--rate -5: bad rate"),
            ({"link": "h1"}, "LINK: 'h1' is not a link"),
            ({"link": "h1-s1"}, "give --rate, --delay, --jitter, --loss, --down or --up"),
            ({"link": "h1-s1", "jitter": "\x1b[2J"}, "--jitter \\x1b[2J")):
        with pytest.raises(InputError) as err:
            change_of(values)
        assert says in str(err.value) and "\n" not in str(err.value)


def test_changes_add_up_over_the_topology_s_shaping():
    now = linkset.RunTime().then(LinkChange(link="h1-s1", rate="10Mbit"))
    now = now.then(LinkChange(link="h1-s1", delay="50ms", jitter="5ms"))
    now = now.then(LinkChange(link="s1-h1", state="down"))
    assert now == linkset.RunTime(rate=10_000_000, delay_ms=50.0, jitter_ms=5.0, down="s1")
    assert now.describe() == "rate 10.0 Mbit/s, delay 50ms, jitter 5ms, down at s1"
    base = Shaping(rate=1_000_000_000, overhead=24, qdisc="tbf")
    assert now.shaping(base) == Shaping(rate=10_000_000, overhead=24, qdisc="tbf",
                                        delay_ms=50.0, jitter_ms=5.0)
    assert now.then(LinkChange(link="h1-s1", state="up")).down is None
    assert now.then(LinkChange(link="h1-s1", reset=True)).empty
    assert linkset.RunTime().shaping(None) is None
    with pytest.raises(InputError, match="jitter needs a delay"):
        linkset.RunTime(jitter_ms=5.0).shaping(None)
    assert linkset.RunTime.from_json(now.to_json()) == now
    assert linkset.RunTime.from_json({"rate": "1; reboot", "down": "a b", "loss_pct": True}) \
        == linkset.RunTime()


def test_a_link_is_found_by_its_two_nodes_with_its_ends_where_they_are_now():
    ll = linkset.find_link(topo(), lab_map(), "s1", "h1")
    assert ll.name == "h1-s1" and ll.link.bw == 1_000_000_000
    assert ll.ends == (linkset.LinkEnd("s1", "s1-eth1", None, f"{RUN}-p0"),
                       linkset.LinkEnd("h1", "h1-eth0", f"{RUN}-h1", "h1-eth0"))
    with pytest.raises(InputError, match="no link between h2 and h9|no node 'h9'"):
        linkset.find_link(topo(), lab_map(), "h2", "h9")
    t = topo()
    t.add_host("h3")
    with pytest.raises(InputError, match=r"no link between h3 and h1 \(h3 is linked to: nothing"):
        linkset.find_link(t, lab_map(), "h3", "h1")
    elsewhere = lab_map()
    del elsewhere.netns["h2"]
    with pytest.raises(InputError, match="h2 is not on this host"):
        linkset.find_link(topo(), elsewhere, "h1", "h2")


def test_a_rate_is_put_on_both_ends_and_recorded_with_a_journal_item(lab):
    ll, now = linkset.set_link(lab, LinkChange(link="s1-h1", rate="10Mbit"))
    assert now == linkset.RunTime(rate=10_000_000)
    # each end: its root qdisc replaced by the topology's shaping with the new rate
    (ns1, del1, _), (ns2, batch, text), (ns3, del2, _), (ns4, _, text2) = lab.ran
    assert (ns1, del1) == (None, ["tc", "qdisc", "del", "dev", f"{RUN}-p0", "root"])
    assert (ns2, batch) == (None, ["tc", "-batch", "-"])
    assert "rate 10000000bit" in text and f"dev {RUN}-p0" in text
    assert ns3 == f"{RUN}-h1" and del2[-3:] == ["dev", "h1-eth0", "root"] and "h1-eth0" in text2
    record = json.load(open(os.path.join(clean.workdir(RUN), linkset.RECORD)))
    assert record["links"] == {"h1-s1": {"rate": 10_000_000, "delay_ms": None,
                                         "jitter_ms": None, "loss_pct": None, "down": None}}
    restore = clean.read_journal(RUN)["restore"]
    assert restore[0] == {"what": "uplink eth9", "argv": []}      # what was there stays
    assert restore[1]["link"] == "h1-s1" and restore[1]["argv"] == []
    assert "rate 10.0 Mbit/s" in restore[1]["what"]


def test_down_is_the_first_end_and_up_brings_both_back(lab):
    linkset.set_link(lab, LinkChange(link="h2-h1", state="down"))
    assert lab.ran == [(f"{RUN}-h2", ["ip", "link", "set", "dev", "h2-eth1", "down"], None)]
    lab.ran.clear()
    ll, now = linkset.set_link(lab, LinkChange(link="h1-h2", state="up"))
    assert now.empty
    assert lab.ran == [(f"{RUN}-h1", ["ip", "link", "set", "dev", "h1-eth1", "up"], None),
                       (f"{RUN}-h2", ["ip", "link", "set", "dev", "h2-eth1", "up"], None)]
    # nothing left to record: the journal item goes
    assert [r.get("link") for r in clean.read_journal(RUN)["restore"]] == [None]


def test_a_kernel_without_netem_refuses_a_delay_and_changes_nothing(lab, monkeypatch):
    def no_netem(names, what=""):
        raise CapabilityError(f"{what} needs netem, which this machine lacks (a kernel with "
                              "sch_netem)")
    monkeypatch.setattr(caps, "require", no_netem)
    with pytest.raises(CapabilityError, match="a delay, jitter or loss on link h1-s1 .* needs "
                                              "netem"):
        linkset.set_link(lab, LinkChange(link="h1-s1", delay="50ms"))
    assert lab.ran == [] and linkset.read_record(RUN) == {}
    # a rate needs no netem; a link the topology delays already had it when it was built
    linkset.set_link(lab, LinkChange(link="h1-s1", rate="10Mbit"))
    linkset.set_link(lab, LinkChange(link="h1-h2", loss=1))


def test_an_end_that_refuses_the_shaping_puts_the_other_back(lab, monkeypatch):
    calls = []

    def second_fails(netns, argv, run_id, input=None, where=""):
        calls.append((netns, argv))
        ok = not (argv[:2] == ["tc", "-batch"] and netns == f"{RUN}-h1")
        return Result(argv, 0 if ok else 2, "", "" if ok else "RTNETLINK answers: Invalid")
    monkeypatch.setattr(linkset, "run_in", second_fails)
    with pytest.raises(Exception, match="h1:h1-eth0: tc refused the shaping: RTNETLINK"):
        linkset.set_link(lab, LinkChange(link="s1-h1", rate="10Mbit"))
    # s1's end was changed first, then put back to the topology's 1 Gbit/s
    last_batch = [a for ns, a in calls if ns is None][-1]
    assert last_batch == ["tc", "-batch", "-"] and linkset.read_record(RUN) == {}


def test_reset_puts_every_changed_link_back(lab):
    linkset.set_link(lab, LinkChange(link="h1-s1", rate="10Mbit"))
    linkset.set_link(lab, LinkChange(link="h2-h1", state="down"))
    lab.ran.clear()
    assert linkset.reset_links(lab) == ["h1-h2", "h1-s1"]
    assert linkset.read_record(RUN) == {}
    assert [r.get("link") for r in clean.read_journal(RUN)["restore"]] == [None]
    downs = [a for _, a, _ in lab.ran if a[:3] == ["ip", "link", "set"]]
    assert sorted(a[4] for a in downs) == ["h1-eth0", "h1-eth1", "h2-eth1", f"{RUN}-p0"]
    assert {a[5] for a in downs} == {"up"}


def test_show_gives_each_link_its_state_shaping_and_run_time_change(lab, monkeypatch):
    linkset.set_link(lab, LinkChange(link="h1-s1", rate="10Mbit"))
    monkeypatch.setattr(linkset, "_live_states", lambda live: {
        (f"{RUN}-h1", "h1-eth0"): "UP", (None, f"{RUN}-p0"): "UP",
        (f"{RUN}-h1", "h1-eth1"): "DOWN", (f"{RUN}-h2", "h2-eth1"): "LOWERLAYERDOWN"})
    rows = linkset.show_links(lab)
    assert rows[0] == ("h1-s1", "h1:h1-eth0 s1:s1-eth1", "up/up", "10.0 Mbit/s (htb)",
                       "rate 10.0 Mbit/s")
    assert rows[1][2] == "absent/absent" and rows[1][3] == "none"
    assert rows[2] == ("h1-h2", "h1:h1-eth1 h2:h2-eth1", "down/lowerlayerdown", "delay 5ms", "")
