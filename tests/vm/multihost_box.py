"""A lab across two machines, run inside the two QEMU guests of the two-box
tier by pair_box.py (the pair of tests/vm/conftest.py):

    setup(out, role, mac)   either box: its underlay NIC up, an sshd
    controller(out)         box A, across A and B: a 2x2 clos (`nslab topo up
                            --hosts`) that must converge over VXLAN, then a crash
                            of every agent and of the controller, then `nslab
                            clean --hosts`

The guests boot Debian's stock kernel (VXLAN, FRR's needs: all modules) and
are joined by emulated Intel NICs (e1000) over a QEMU socket: the underlay.
The sshd is the one scripts/setup-sshd.sh unpacked; the keys and configs come
from the test (``out``). What A saw is returned (pair_box.py writes it to
``MH_OUT/controller.json``).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NSLAB = os.path.join(os.path.dirname(sys.executable), "nslab")  # this venv's
PY = sys.executable
SSHD = os.path.join(ROOT, ".cache", "sshd", "usr", "sbin", "sshd")
ADDR = {"controller": "10.77.1.1", "host": "10.77.1.2"}
HOSTS = "10.77.1.1,10.77.1.2"

from box import nic_by_mac, say  # noqa: E402 - the two-box script, beside this one


def start_sshd(out: str, addr: str) -> subprocess.Popen:
    """The guest's /etc is its own (an overlay): the privilege-separation user
    is added there, never on the machine that runs the guests."""
    # the passwd the test prepared: with the user `sshd`, and root's shell /bin/sh
    # (a remote command then skips root's ~/.bashrc, which starts pyenv here)
    with open(os.path.join(out, "passwd")) as src, open("/etc/passwd", "w") as dst:
        dst.write(src.read())
    os.makedirs("/run/sshd", exist_ok=True)
    # virtme-ng gives the guest an /etc/shadow of its own (a tmpfs file) in
    # which every account is locked ("!"), and sshd refuses a locked root even
    # with a key: unlock root there ("*": no password, keys only). Only a
    # tmpfs /etc/shadow, the guest's own, is ever touched.
    with open("/proc/mounts") as f:
        own = any(l.split()[1] == "/etc/shadow" and l.split()[2] == "tmpfs" for l in f)
    if not own:
        raise SystemExit("refusing to touch an /etc/shadow that is not the guest's own")
    with open("/etc/shadow") as f:
        shadow = f.read()
    with open("/etc/shadow", "w") as f:
        f.write("".join("root:*:" + l[len("root:!:"):] if l.startswith("root:!:") else l
                        for l in shadow.splitlines(keepends=True)))
    return subprocess.Popen([SSHD, "-D", "-e", "-f", os.path.join(out, f"sshd_config-{addr}")],
                            stdout=subprocess.DEVNULL, stderr=open(f"/tmp/sshd-{addr}.log", "w"))


def setup(out: str, role: str, mac: str) -> subprocess.Popen:
    nic = nic_by_mac(mac)
    subprocess.run(["ip", "addr", "add", f"{ADDR[role]}/24", "dev", nic], check=True)
    subprocess.run(["ip", "link", "set", nic, "up"], check=True)
    say(f"{role}: {nic} {ADDR[role]}")
    return start_sshd(out, ADDR[role])


#: the test's own commands share one connection per box (a handshake between
#: two TCG guests takes seconds); nslab's own SSH is left as a user has it
MUX = ["-o", "ControlMaster=auto", "-o", "ControlPath=/tmp/nslab-test-%C",
       "-o", "ControlPersist=600"]


def ssh(out: str, host: str, command: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["ssh", "-F", os.path.join(out, "ssh_config"), *MUX, host, "--", command],
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


LEFT = ("ip netns list | grep -c '^nl' ; "
        "{ ip -o link show type vxlan; for n in $(ip netns list | cut -d' ' -f1); do "
        "ip -n $n -o link show type vxlan; done; } | wc -l ; "
        "ls -A /run/nslab 2>/dev/null | wc -l ; "
        "grep -l -a NSLAB_RUN= /proc/[0-9]*/environ 2>/dev/null | grep -vc self")


def leftovers(out: str) -> dict:
    """Namespaces, VXLAN devices, state files, tagged processes on each box."""
    res = {}
    for host in HOSTS.split(","):
        r = ssh(out, host, LEFT)
        res[host] = [int(x) for x in r.stdout.split()] if r.returncode in (0, 1) else r.stderr
    return res


def pids(out: str, host: str, pattern: str) -> list:
    """The processes on host whose command line matches the extended regex
    (anchored with ^, it cannot match the shell that runs pgrep)."""
    return [int(p) for p in ssh(out, host, f"pgrep -f '{pattern}'; true").stdout.split()]


def close_mux(out: str) -> None:
    """End the test's shared connections (their masters are this box's)."""
    for host in HOSTS.split(","):
        subprocess.run(["ssh", "-F", os.path.join(out, "ssh_config"), *MUX, "-O", "exit", host],
                       capture_output=True, timeout=20)


def controller(out: str) -> dict:
    result: dict = {}
    other = HOSTS.split(",")[1]
    t0 = time.monotonic()
    while ssh(out, other, "true", timeout=20).returncode != 0:
        if time.monotonic() - t0 > 300:
            raise SystemExit(f"no ssh to {other} after 300 s")
        time.sleep(2)
    result["ssh_wait_s"] = time.monotonic() - t0
    # the underlay on each box: its NIC's driver (the real one, e1000)
    result["underlay_driver"] = {
        h: ssh(out, h, "ethtool -i $(ip -o -4 addr show to 10.77.1.0/24 | awk '{print $2}') "
                       "| sed -n 's/^driver: //p'").stdout.strip() for h in HOSTS.split(",")}
    say(f"ssh to {other} after {result['ssh_wait_s']:.0f} s")
    # 1. a clos split over the two boxes, built by the CLI as a user would
    results = os.path.join(out, "results")
    say("clos across both boxes")
    t0 = time.monotonic()
    lab = subprocess.Popen([NSLAB, "--results", results, "topo", "up", "clos", "--spines", "2",
                            "--servers", "2", "--hosts", HOSTS, "--ssh-config",
                            os.path.join(out, "ssh_config"), "--for", "1500"],
                           stdout=subprocess.PIPE, stderr=open(os.path.join(out, "up.err"), "w"),
                           text=True, cwd=ROOT)
    run_id = None
    for line in lab.stdout:  # the table's title: "lab nlXXXX: clos (built in ...)"
        if "lab nl" in line:
            run_id = line.split("lab ", 1)[1].split(":")[0]
            break
    result["up_s"] = time.monotonic() - t0
    result["run_id"] = run_id
    say(f"lab {run_id} up after {result['up_s']:.0f} s")
    # 2. ECMP everywhere: each server's route to the other over both spines
    where = {}
    for host in HOSTS.split(","):
        for ns in ssh(out, host, "ip netns list").stdout.split():
            if ns.startswith(f"{run_id}-"):
                where[ns.split("-", 1)[1]] = host
    result["placement"] = where
    t1 = time.monotonic()
    routes = {}
    while time.monotonic() - t1 < 300:
        routes = {}
        for node, dst in (("server1", "10.0.200.2"), ("server2", "10.0.200.1")):
            r = ssh(out, where[node], f"ip netns exec {run_id}-{node} ip -j route show {dst}")
            got = json.loads(r.stdout or "[]")
            routes[node] = len(got[0].get("nexthops", [])) if got else 0
        if all(n == 2 for n in routes.values()):
            break
        time.sleep(2)
    result["ecmp_s"] = time.monotonic() - t1
    result["nexthops"] = routes
    result["ping"] = ssh(out, where["server2"], f"ip netns exec {run_id}-server2 ping -c 3 "
                                                "10.0.200.1").returncode
    result["vxlan"] = {h: ssh(out, h, "for n in $(ip netns list | cut -d' ' -f1); do ip -n $n -d -j "
                                      "link show type vxlan; done").stdout for h in HOSTS.split(",")}
    say(f"ECMP {routes} after {result['ecmp_s']:.0f} s more; ping {result['ping']}")
    # 3. a crash on both boxes (agents killed, then the controller), then clean
    result["crash_before"] = leftovers(out)
    for host in HOSTS.split(","):
        for pid in pids(out, host, "^[^ ]*python[^ ]* [^ ]*nslab agent up"):
            ssh(out, host, f"kill -9 {pid}")
    lab.send_signal(signal.SIGKILL)
    lab.wait()
    time.sleep(2)
    result["crash_left"] = leftovers(out)
    r = subprocess.run([NSLAB, "clean", "--hosts", HOSTS, "--ssh-config",
                        os.path.join(out, "ssh_config")], capture_output=True, text=True,
                       timeout=600)
    result["clean"] = {"rc": r.returncode, "out": r.stdout + r.stderr}
    result["after_clean"] = leftovers(out)
    say(f"after clean: {result['after_clean']}")
    return result
