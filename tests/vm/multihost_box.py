"""A lab across two machines, run inside two QEMU guests by test_multihost_guests.py.

    multihost_box.py host         box B: its NIC up, an sshd, until told to stop
    multihost_box.py controller   box A: its NIC up, an sshd, then, across A and B:
                                  a 2x2 clos that must converge, the ECMP study's
                                  quick preset, and a crash followed by
                                  `nslab clean --hosts`

The guests boot Debian's stock kernel (VXLAN, FRR's needs: all modules) and
are joined by emulated Intel NICs (e1000) over a QEMU socket: the underlay.
The sshd is the one scripts/setup-sshd.sh unpacked; the keys and configs come
from the test (BOX_OUT). What A saw is written to BOX_OUT/controller.json.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NSLAB = os.path.join(ROOT, ".venv", "bin", "nslab")
PY = os.path.join(ROOT, ".venv", "bin", "python")
SSHD = os.path.join(ROOT, ".cache", "sshd", "usr", "sbin", "sshd")
ADDR = {"controller": "10.77.1.1", "host": "10.77.1.2"}
HOSTS = "10.77.1.1,10.77.1.2"


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def nic_by_mac(mac: str) -> str:
    for link in json.loads(subprocess.check_output(["ip", "-j", "link", "show"])):
        if link.get("address") == mac:
            return link["ifname"]
    raise SystemExit(f"no NIC with MAC {mac}")


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


def setup(out: str, role: str) -> subprocess.Popen:
    nic = nic_by_mac(os.environ["NIC_MAC"])
    subprocess.run(["ip", "addr", "add", f"{ADDR[role]}/24", "dev", nic], check=True)
    subprocess.run(["ip", "link", "set", nic, "up"], check=True)
    say(f"{role}: {nic} {ADDR[role]}")
    return start_sshd(out, ADDR[role])


def ssh(out: str, host: str, command: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["ssh", "-F", os.path.join(out, "ssh_config"), host, "--", command],
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


LEFT = ("ip netns list | grep -c '^nl' ; ip -o link show type vxlan | wc -l ; "
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
    script = ("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null | "
              f"grep -Eq '{pattern}' && echo ${{p#/proc/}}; done; true")
    return [int(p) for p in ssh(out, host, script).stdout.split()]


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
    # 1. a clos split over the two boxes converges
    script = os.path.join(out, "converge.py")
    with open(script, "w") as f:
        f.write(f"""
import json
from nslab.remote import MultiLab
from nslab.frr import wait_for_ecmp
from nslab.topologies.clos import clos, expected_routes
out = {{}}
with MultiLab(clos(spines=2, servers=2), {{h: h for h in {HOSTS!r}.split(",")}},
              ssh_config={os.path.join(out, "ssh_config")!r}) as lab:
    out["placement"] = lab.placement
    out["tunnels"] = len(lab.tunnels)
    out["build_s"] = lab.build_seconds
    out["converged_s"] = wait_for_ecmp(lab, expected_routes(lab.topology), timeout=240)
    out["ping"] = lab["server2"].run(["ping", "-c", "3", "10.0.200.1"], check=False).returncode
print(json.dumps(out))
""")
    say("clos across both boxes")
    r = subprocess.run([PY, script], capture_output=True, text=True, timeout=900, cwd=ROOT)
    result["clos"] = {"rc": r.returncode, "stderr": r.stderr[-3000:],
                      "out": json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0
                      else None}
    say(f"clos: {result['clos']['out'] or r.stderr[-500:]}")
    result["after_clos"] = leftovers(out)
    # 2. the ECMP study's quick preset, unchanged, across the boxes
    results = os.path.join(out, "results")
    say("ecmp --quick across both boxes")
    r = subprocess.run([NSLAB, "--results", results, "run", "ecmp", "--quick", "--hosts", HOSTS,
                        "--ssh-config", os.path.join(out, "ssh_config")], capture_output=True,
                       text=True, timeout=1500, cwd=ROOT)
    recs = []
    for d in sorted(os.listdir(os.path.join(results, "ecmp"))) if os.path.isdir(
            os.path.join(results, "ecmp")) else []:
        path = os.path.join(results, "ecmp", d, "records.jsonl")
        if os.path.exists(path):
            recs += [json.loads(l) for l in open(path) if l.strip()]
    result["ecmp"] = {"rc": r.returncode, "stdout": r.stdout[-3000:], "stderr": r.stderr[-3000:],
                      "records": recs}
    say(f"ecmp: exit {r.returncode}\n{r.stdout[-1500:]}")
    result["after_ecmp"] = leftovers(out)
    # 3. a crash on both boxes (agents killed, then the controller), then clean
    say("crash and clean")
    lab = subprocess.Popen([NSLAB, "--results", results, "topo", "up", "clos", "--spines", "2",
                            "--servers", "2", "--hosts", HOSTS, "--ssh-config",
                            os.path.join(out, "ssh_config"), "--for", "900"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    for line in lab.stdout:  # the table of nodes is printed once every part is up
        if line.startswith("lab ") or " lab nl" in line:
            break
    time.sleep(1)
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
                       timeout=300)
    result["clean"] = {"rc": r.returncode, "out": r.stdout + r.stderr}
    result["after_clean"] = leftovers(out)
    say(f"after clean: {result['after_clean']}")
    return result


def main() -> int:
    role, out = sys.argv[1], os.environ["BOX_OUT"]
    sshd = setup(out, role)
    try:
        if role == "host":
            say("B-READY")
            line = sys.stdin.readline()
            say(f"host says: {line.strip()!r}")
        else:
            res = controller(out)
            with open(os.path.join(out, "controller.json"), "w") as f:
                json.dump(res, f, indent=1, default=str)
    finally:
        sshd.terminate()
        sshd.wait(timeout=10)
    say(f"{role}: done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
