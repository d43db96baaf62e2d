"""Two machines on one: pseudo-hosts for the multi-host tests.

Each pseudo-host is a set of fresh Linux namespaces made by ``unshare``: its own
network (one veth to the other pseudo-host, the underlay), mounts (a private
``/run``, so its lab journals and ``/run/netns`` are its own) and PIDs (its
``nslab clean`` sees only its processes), running the OpenSSH server that
``scripts/setup-sshd.sh`` unpacked, bound to its underlay address. A lab across
``10.99.0.1,10.99.0.2`` then goes through real SSH, agents, VXLAN and FRR, as it
would across two machines; only the kernel is shared.

Everything is made from the test's temporary directory and the namespaces die
with the ``unshare`` processes: nothing is left on the machine.
"""
from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import time
from typing import List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SSHD = os.path.join(os.environ.get("NSLAB_SSHD_CACHE", os.path.join(ROOT, ".cache", "sshd")),
                    "usr", "sbin", "sshd")
SSHD_LIBS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(SSHD))), "usr", "lib",
                         "x86_64-linux-gnu")
NET = "10.99.0"


def available() -> Optional[str]:
    """None when pseudo-hosts can be made here, else why not."""
    if os.geteuid() != 0:
        return "needs root"
    if not os.access(SSHD, os.X_OK):
        return f"no OpenSSH server unpacked at {SSHD} (scripts/setup-sshd.sh)"
    for tool in ("unshare", "nsenter", "ssh", "ssh-keygen"):
        if not shutil.which(tool):
            return f"{tool} is missing"
    return None


def write_keys(d: str, net: str) -> str:
    """A client key and a host key in ``d``, the client key authorised, and an
    ``ssh -F`` file for the hosts ``net.*``; returns that file. Also a copy of
    passwd with the user `sshd` (privilege separation), for a private mount."""
    key = os.path.join(d, "id")
    hostkey = os.path.join(d, "hostkey")
    for path in (key, hostkey):
        for old in (path, path + ".pub"):
            if os.path.exists(old):
                os.unlink(old)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", path], check=True)
    shutil.copy(key + ".pub", os.path.join(d, "authorized_keys"))
    config = os.path.join(d, "ssh_config")
    with open(config, "w") as f:
        f.write(f"Host {net}.*\n  User root\n  IdentityFile {key}\n  IdentitiesOnly yes\n"
                "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n"
                "  LogLevel ERROR\n  ConnectTimeout 10\n")
    nobody = pwd.getpwnam("nobody")
    with open("/etc/passwd") as src, open(os.path.join(d, "passwd"), "w") as dst:
        text = src.read().rstrip("\n") + "\n"
        # root's shell /bin/sh there: a remote command then does not run root's
        # ~/.bashrc (Debian's bash reads it under sshd; this machine's starts
        # pyenv, seconds per command in a TCG guest)
        text = "".join(root_shell_sh(l) for l in text.splitlines(keepends=True))
        dst.write(text)
        if not any(l.startswith("sshd:") for l in text.splitlines()):
            dst.write(f"sshd:x:{nobody.pw_uid}:{nobody.pw_gid}::/run/sshd:/usr/sbin/nologin\n")
    # sshd refuses a locked root ("!" in shadow) even with a key; Debian locks
    # root when the installer set up sudo, and virtme-ng's guests lock every
    # account: a copy with root unlocked ("*": no password, keys only), for
    # the same private mounts
    with open("/etc/shadow") as src:
        lines = src.read().splitlines(keepends=True)
    with open(os.path.join(d, "shadow"), "w") as dst:
        dst.write("".join("root:*:" + l.split(":", 2)[2] if l.startswith("root:!") else l
                          for l in lines))
    os.chmod(os.path.join(d, "shadow"), 0o600)
    return config


def root_shell_sh(line: str) -> str:
    """A passwd line, with root's login shell set to /bin/sh."""
    if not line.startswith("root:"):
        return line
    fields = line.rstrip("\n").split(":")
    fields[6] = "/bin/sh"
    return ":".join(fields) + "\n"


def write_sshd_config(d: str, addr: str, name: str = "sshd_config") -> str:
    """An sshd configuration: root by key only, bound to ``addr``, keys from ``d``."""
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write(f"ListenAddress {addr}\nHostKey {d}/hostkey\n"
                f"AuthorizedKeysFile {d}/authorized_keys\nStrictModes no\n"
                "UsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                "PermitRootLogin prohibit-password\nPidFile none\nMaxSessions 100\n"
                "MaxStartups 100:30:200\nLogLevel ERROR\n")
        # OpenSSH 9.8+ (Debian 13) runs each session in sshd-session (and from
        # 10.0 authenticates in sshd-auth), found at a compiled-in path; the
        # unpacked server has them beside its own tree, so name them.
        libexec = os.path.join(os.path.dirname(os.path.dirname(SSHD)), "lib", "openssh")
        for option, helper in (("SshdSessionPath", "sshd-session"), ("SshdAuthPath", "sshd-auth")):
            if os.path.exists(os.path.join(libexec, helper)):
                f.write(f"{option} {os.path.join(libexec, helper)}\n")
    return path


class PseudoHosts:
    """``n`` pseudo-hosts ``10.99.0.1`` ... on one underlay (a chain of veths for
    two, the only case the tests need)."""

    def __init__(self, workdir: str, n: int = 2, tag: str = "ph") -> None:
        assert n == 2, "two pseudo-hosts"
        self.dir = workdir
        self.n = n
        self.tag = tag
        self.procs: List[subprocess.Popen] = []
        self.inner: List[int] = []
        self.addrs = [f"{NET}.{i + 1}" for i in range(n)]
        self.ssh_config = os.path.join(workdir, "ssh_config")

    # -- set-up -------------------------------------------------------------------
    def _keys(self) -> None:
        write_keys(self.dir, NET)

    def _sshd_config(self, i: int) -> str:
        return write_sshd_config(self.dir, self.addrs[i], f"sshd_config{i}")

    def start(self) -> None:
        self._keys()
        for i in range(self.n):
            dev = f"{self.tag}{i}"
            script = "; ".join([
                "set -e", "mount -t tmpfs nslab-run /run", "mkdir -p /run/sshd /run/netns",
                f"mount --bind {self.dir}/passwd /etc/passwd",
                f"mount --bind {self.dir}/shadow /etc/shadow", "ip link set lo up",
                f"while ! ip link show {dev} >/dev/null 2>&1; do sleep 0.05; done",
                f"ip addr add {self.addrs[i]}/24 dev {dev}", f"ip link set {dev} up",
                # libraries scripts/setup-sshd.sh unpacked beside the server
                f"exec env LD_LIBRARY_PATH={SSHD_LIBS} {SSHD} -D -e -f {self._sshd_config(i)}"])
            log = open(os.path.join(self.dir, f"host{i}.log"), "w")
            self.procs.append(subprocess.Popen(
                ["unshare", "--mount", "--net", "--pid", "--fork", "--mount-proc",
                 "--propagation", "private", "--", "/bin/sh", "-c", script],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        for p in self.procs:  # unshare's child is pid 1 of the pseudo-host
            self.inner.append(self._child(p.pid))
        a, b = f"{self.tag}0", f"{self.tag}1"
        subprocess.run(["ip", "link", "add", a, "netns", str(self.inner[0]), "type", "veth",
                        "peer", "name", b, "netns", str(self.inner[1])], check=True)
        deadline = time.monotonic() + 20
        for i in range(self.n):
            while self.run(i, ["ss", "-Htln", "sport = :22"]).stdout.strip() == "":
                if time.monotonic() > deadline or self.procs[i].poll() is not None:
                    raise RuntimeError(f"pseudo-host {i}: sshd did not start: "
                                       + open(os.path.join(self.dir, f"host{i}.log")).read())
                time.sleep(0.1)

    @staticmethod
    def _child(pid: int, timeout: float = 10) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{pid}/task/{pid}/children") as f:
                    kids = f.read().split()
                if kids:
                    return int(kids[0])
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError(f"unshare {pid} has no child")

    # -- use ----------------------------------------------------------------------
    def argv(self, i: int, argv: List[str]) -> List[str]:
        """``argv`` inside pseudo-host ``i`` (its network, mounts and PIDs)."""
        return ["nsenter", "-t", str(self.inner[i]), "-m", "-n", "-p", "-r", "-w", "--"] + list(argv)

    def run(self, i: int, argv: List[str], timeout: float = 60, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(i, argv), capture_output=True, text=True, timeout=timeout,
                              **kw)

    def popen(self, i: int, argv: List[str], **kw) -> subprocess.Popen:
        return subprocess.Popen(self.argv(i, argv), text=True, start_new_session=True, **kw)

    def leftovers(self, i: int) -> List[str]:
        """What a lab left on pseudo-host ``i``: namespaces, VXLAN devices, journals,
        tagged processes."""
        out = [f"netns {n}" for n in self.run(i, ["ip", "netns", "list"]).stdout.split()
               if n.startswith("nl")]
        out += [f"vxlan {l}" for l in self.run(i, ["ip", "-o", "link", "show", "type", "vxlan"])
                .stdout.splitlines()]
        out += [f"state {f}" for f in self.run(i, ["ls", "-A", "/run/nslab"]).stdout.split()]
        tagged = self.run(i, ["sh", "-c", "grep -l -a NSLAB_RUN= /proc/[0-9]*/environ 2>/dev/null"
                                           " || true"]).stdout.split()
        out += [f"process {p}" for p in tagged if "/self/" not in p]
        return out

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        for p in self.procs:
            p.wait(timeout=10)
