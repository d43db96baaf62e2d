"""What each of the two boxes does in the two-box flows, run inside its QEMU
guest by pair_box.py (the pair of tests/vm/conftest.py):

    server(out, nic, until)   box B: the posts' server.sh (nslab alias serve) and a
                              frame sink, until ``until()`` returns; then a crash
                              and `nslab clean`
    client(out, nic)          box A: ethtool, the alias sweep across its uplink, an
                              RFC 2544 trial across the wire, then a crash and
                              `nslab clean`

Each box finds its NIC by MAC, gives it a configuration a user's NIC would
have (up, an address), snapshots it, and returns what it saw (pair_box.py
writes it to ``BOX_OUT/<role>.json``). Progress lines go to stdout.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)  # the venv this runs in (make VENV=...)
NSLAB = os.path.join(BIN, "nslab")
PKTGEN = os.path.join(BIN, "nslab-pktgen")
#: Box B's own address (its NIC is configured like a user's) and the aliases' template.
B_ADDR, A_ADDR = "10.77.0.2/24", "10.77.0.1/24"
ALIASES = 16
SINK_PORT = 9
#: Seconds per alias point. On an emulated CPU a sample (one `ss`) takes ~1 s,
#: so a 3 s point fails the fidelity checks (measured): 15 s leaves a window.
DURATION = "15"



#: Box B's counters of a received frame it dropped, by stage: the NIC (no receive
#: descriptor: QEMU's e1000 drops the frame and counts it in MPC, read as
#: rx_missed_errors; FIFO), the driver and stack (rx_dropped), the backlog queue
#: (softnet_stat), IP (discards) and UDP (InErrors, which includes a full socket buffer).
DROP_KEYS = ("rx_missed_errors", "rx_fifo_errors", "rx_dropped", "softnet_dropped",
             "ip_InDiscards", "udp_InErrors")


def drop_counters(nic: str) -> dict:
    """This box's drop counters (:data:`DROP_KEYS`) and UDP datagrams received,
    read from sysfs and /proc (cheap enough to sample twice a second)."""
    out = {k: int(open(f"/sys/class/net/{nic}/statistics/{k}").read())
           for k in ("rx_missed_errors", "rx_fifo_errors", "rx_dropped")}
    out["softnet_dropped"] = sum(int(l.split()[1], 16) for l in open("/proc/net/softnet_stat"))
    snmp = [l.split() for l in open("/proc/net/snmp")]
    for proto, keys in (("Ip:", ("InDiscards",)), ("Udp:", ("InErrors", "InDatagrams"))):
        rows = [r for r in snmp if r[0] == proto]
        table = dict(zip(rows[0], rows[1]))
        out.update({f"{proto[:-1].lower()}_{k}": int(table[k]) for k in keys})
    return out


class TrialWindow(threading.Thread):
    """Samples :func:`drop_counters` twice a second while box B serves. The RFC
    2544 trial is the only UDP flood B receives (the alias sweep is TCP), so
    its window is the run of samples where UDP datagrams arrive (>= 50 per
    sample), widened by two samples each side; the drops counted in it are
    the trial's (the guests' clocks differ, so A's times cannot say)."""

    def __init__(self, nic: str) -> None:
        super().__init__(daemon=True)
        self.nic, self.samples, self.done = nic, [], threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.5):
            self.samples.append((time.monotonic(), drop_counters(self.nic)))

    def trial(self) -> dict:
        self.done.set()
        self.join()
        s = self.samples
        busy = [i for i in range(1, len(s))
                if s[i][1]["udp_InDatagrams"] - s[i - 1][1]["udp_InDatagrams"] >= 50]
        if not busy:
            return {"found": False, "samples": len(s)}
        lo, hi = max(busy[0] - 3, 0), min(busy[-1] + 2, len(s) - 1)
        return {"found": True, "seconds": round(s[hi][0] - s[lo][0], 2),
                "udp_in": s[hi][1]["udp_InDatagrams"] - s[lo][1]["udp_InDatagrams"],
                "drops": {k: s[hi][1][k] - s[lo][1][k] for k in DROP_KEYS}}


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def nic_by_mac(mac: str) -> str:
    for link in json.loads(subprocess.check_output(["ip", "-j", "link", "show"])):
        if link.get("address") == mac:
            return link["ifname"]
    raise SystemExit(f"no NIC with MAC {mac}")


def snapshot(nic: str) -> dict:
    sys.path.insert(0, ROOT)
    from nslab.ovs.uplink import snapshot as snap
    s = snap(nic)
    s.pop("ethtool", None)  # negotiated state is compared apart (it may take time to settle)
    eth = subprocess.run(["ethtool", nic], capture_output=True, text=True).stdout
    s["link"] = {k: v for k, v in (l.strip().split(": ", 1) for l in eth.splitlines()
                                   if ": " in l and l.strip().split(":")[0] in
                                   ("Speed", "Duplex", "Auto-negotiation"))}
    s["driver"] = subprocess.run(["ethtool", "-i", nic], capture_output=True,
                                 text=True).stdout.splitlines()[0].split(": ")[1]
    return s


def configure(nic: str, addr: str) -> None:
    subprocess.run(["ip", "link", "set", "dev", nic, "up"], check=True)
    subprocess.run(["ip", "addr", "add", addr, "dev", nic], check=True)
    time.sleep(2)  # carrier


def run(argv, timeout=600, **kw) -> subprocess.CompletedProcess:
    say("$ " + " ".join(argv))
    res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    for line in (res.stdout + res.stderr).strip().splitlines()[-15:]:
        print("    " + line, flush=True)
    return res


def wait_for(pred, timeout: float, step: float = 0.5) -> bool:
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(step)
    return False


def server(out: str, nic: str, until: Callable[[], str]) -> dict:
    """Box B: aliases with an iperf2 server each, and a frame sink, until
    ``until()`` returns (what it says is logged)."""
    configure(nic, B_ADDR)
    result: dict = {"nic": nic, "before": snapshot(nic)}
    serve = subprocess.Popen([NSLAB, "alias", "serve", "--iface", nic, "--aliases", str(ALIASES),
                              "--for", "1500"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    for line in serve.stdout:
        print("    serve: " + line.rstrip(), flush=True)
        if "Started" in line:
            break
    sink = subprocess.Popen([PKTGEN, "recv", "--port", str(SINK_PORT), "--duration", "1500"],
                            stdout=subprocess.PIPE, text=True)
    assert "ready" in sink.stdout.readline()
    result["rx_before"] = int(open(f"/sys/class/net/{nic}/statistics/rx_packets").read())
    window = TrialWindow(nic)
    window.start()
    say("B-READY")
    say(f"told: {until()}")  # box A's part is done
    sink.send_signal(signal.SIGINT)
    result["sink"] = json.loads(sink.communicate(timeout=30)[0].strip().splitlines()[-1])
    result["rx_after"] = int(open(f"/sys/class/net/{nic}/statistics/rx_packets").read())
    result["trial_window"] = window.trial()
    serve.send_signal(signal.SIGINT)
    serve.communicate(timeout=60)
    result["serve_rc"] = serve.returncode
    result["after_teardown"] = snapshot(nic)
    # A crash: SIGKILL the server mid-serve, then `nslab clean` restores the NIC.
    crash = subprocess.Popen([NSLAB, "alias", "serve", "--iface", nic, "--aliases", "4",
                              "--for", "600"], stdout=subprocess.PIPE, text=True)
    while "Started" not in (crash.stdout.readline() or "Started"):
        pass
    result["with_crashed_aliases"] = len(snapshot(nic)["addrs"])
    crash.kill()
    crash.wait()
    result["clean"] = run([NSLAB, "clean"]).returncode
    result["after_clean"] = snapshot(nic)
    return result


def client(out: str, nic: str, after_wire: Callable[[], None] = lambda: None) -> dict:
    """Box A: ethtool there and back, the alias sweep through the lab's OVS uplink,
    an RFC 2544 trial across the wire, a crash and clean. ``after_wire`` is
    called once nothing more crosses the wire (before the crash and clean,
    which stay on this box), so box B's part can end beside them."""
    configure(nic, A_ADDR)
    result: dict = {"nic": nic, "before": snapshot(nic)}
    # 1. ethtool: ask for 10 Mbit/s half duplex, see what the link says, then back.
    forced = run([NSLAB, "ethtool", nic, "--speed", "10", "--duplex", "half"])
    result["ethtool_forced"] = {"rc": forced.returncode, "out": forced.stdout + forced.stderr}
    back = run([NSLAB, "ethtool", nic, "--speed", "100", "--duplex", "full"])
    result["ethtool_back"] = {"rc": back.returncode, "out": back.stdout + back.stderr}
    wait_for(lambda: snapshot(nic)["link"] == result["before"]["link"], 20)
    result["after_ethtool"] = snapshot(nic)
    # 2. The alias sweep across the uplink, once box B serves (it may still be booting).
    results = os.path.join(out, "results")
    for attempt in range(30):
        res = run([NSLAB, "--results", results, "run", "alias", "--uplink", nic, "--aliases",
                   f"1,{ALIASES}", "--duration", DURATION, "--repeat", "1"], timeout=900)
        if res.returncode == 0 or "no alias server answers" not in res.stderr:
            break
        say(f"box B not serving yet (attempt {attempt + 1})")
        time.sleep(5)
    result["alias"] = {"rc": res.returncode, "stderr": res.stderr[-3000:],
                       "records": _records(os.path.join(results, "alias"))}
    result["after_alias"] = snapshot(nic)
    # 3. An RFC 2544 trial at 1518 bytes across the wire: the generator behind the
    #    lab's OVS bridge, box B's sink on its NIC (all B's aliases answer on it).
    result["rfc2544"] = rfc2544_trial(nic)
    result["after_rfc2544"] = snapshot(nic)
    after_wire()
    # 4. A crash with the NIC in the lab's bridge, then `nslab clean`.
    crash = subprocess.Popen([NSLAB, "--results", results, "topo", "up", "single", "--k", "1",
                              "--switch", "ovs", "--uplink", nic], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    in_ovs = wait_for(lambda: subprocess.run(["ovs-vsctl", "port-to-br", nic],
                                             capture_output=True).returncode == 0, 300)
    result["crash_in_ovs"] = in_ovs
    crash.kill()
    crash.wait()
    result["clean"] = run([NSLAB, "clean"]).returncode
    result["after_clean"] = snapshot(nic)
    return result


def rfc2544_trial(nic: str, size: int = 1518, seconds: float = 3.0) -> dict:
    sys.path.insert(0, ROOT)
    from nslab import Lab
    from nslab.model.shaping import frame_rate
    from nslab.model.topo import Topology
    t = Topology(name="rfc2544-wire", switch_type="ovs")
    t.add_host("gen", ip="192.168.1.3/16")
    t.add_switch("s1", uplink=nic)
    t.add_link("gen", "s1")
    speed = int(snapshot(nic)["link"].get("Speed", "100Mb/s").split("Mb")[0])
    line = frame_rate(speed * 1e6, size)
    fps = round(0.5 * line)  # half the NIC's line rate: an emulated NIC's ceiling is lower
    with Lab(t) as lab:
        gen = lab["gen"]
        gen.run(["ping", "-c", "3", "-W", "2", "192.168.2.1"], check=False)  # ARP, link up
        tx0 = int(open(f"/sys/class/net/{nic}/statistics/tx_packets").read())
        res = gen.run([PKTGEN, "send", "--dst", "192.168.2.1", "--port", str(SINK_PORT), "--size",
                       str(size), "--rate", str(fps), "--duration", str(seconds)], timeout=120)
        time.sleep(1)
        tx1 = int(open(f"/sys/class/net/{nic}/statistics/tx_packets").read())
    g = json.loads(res.stdout.strip().splitlines()[-1])
    say(f"rfc2544: offered {fps} fps of {size} B for {seconds} s: generator sent {g['sent']}, "
        f"NIC tx {tx1 - tx0}")
    return {"size": size, "target_fps": fps, "line_fps": line, "seconds": seconds,
            "gen": g, "nic_tx": tx1 - tx0}


def _records(path: str) -> list:
    out = []
    for run_dir in sorted(os.listdir(path)) if os.path.isdir(path) else []:
        rec = os.path.join(path, run_dir, "records.jsonl")
        if os.path.exists(rec):
            out += [json.loads(l) for l in open(rec) if l.strip()]
    return out
