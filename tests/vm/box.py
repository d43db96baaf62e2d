"""What each of the two boxes does, run inside its QEMU guest by test_two_boxes.py.

    box.py server   box B: the posts' server.sh (nslab alias serve) and a frame sink
    box.py client   box A: ethtool, the alias sweep across its uplink, an RFC 2544
                    trial across the wire, then a crash and `nslab clean`

Each box finds its NIC by MAC (``NIC_MAC``), gives it a configuration a user's
NIC would have (up, an address), snapshots it, and writes what it saw to
``BOX_OUT/<role>.json``. Progress lines go to stdout.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

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



def udp_rcvbuf_errors() -> int:
    """Datagrams this box's kernel dropped because a socket's buffer was full."""
    lines = [l.split() for l in open("/proc/net/snmp") if l.startswith("Udp:")]
    return int(dict(zip(lines[0], lines[1]))["RcvbufErrors"])

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


def server(out: str, nic: str) -> dict:
    """Box B: aliases with an iperf2 server each, and a frame sink, until told to stop."""
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
    result["udp_rcvbuf_errors_before"] = udp_rcvbuf_errors()
    say("B-READY")
    line = sys.stdin.readline()  # the host says when box A is done
    say(f"host says: {line.strip()!r}")
    sink.send_signal(signal.SIGINT)
    result["sink"] = json.loads(sink.communicate(timeout=30)[0].strip().splitlines()[-1])
    result["rx_after"] = int(open(f"/sys/class/net/{nic}/statistics/rx_packets").read())
    result["udp_rcvbuf_errors_after"] = udp_rcvbuf_errors()
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


def client(out: str, nic: str) -> dict:
    """Box A: ethtool there and back, the alias sweep through the lab's OVS uplink,
    an RFC 2544 trial across the wire, a crash and clean."""
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
    from nslab.shaping import frame_rate
    from nslab.topo import Topology
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


def main() -> int:
    role, out = sys.argv[1], os.environ["BOX_OUT"]
    nic = nic_by_mac(os.environ["NIC_MAC"])
    say(f"box {role}: NIC {nic}")
    result = (server if role == "server" else client)(out, nic)
    with open(os.path.join(out, f"{role}.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)
    say(f"box {role}: done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
