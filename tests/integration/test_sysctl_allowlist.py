"""Every sysctl a node may set (the allow-list of nslab.model.sysctls) is per
network namespace and undone with it, on this kernel (issue 51): written in a
throwaway namespace, it reads back as written there, the host's value does
not move, and a namespace made afterwards has the value a new one had before.

Marked kernel: the stock-kernel tier runs it on Debian 12's and Debian 13's
kernels, and the host tier on this machine's. It writes only keys of the
allow-list, and only inside namespaces of their own (``unshare --net``, gone
when the command ends); the host's namespace is only read. A key that moved
the host's value would fail here, and its old value is written back.
"""
import os

import pytest

from nslab.model import sysctls

pytestmark = [pytest.mark.root, pytest.mark.kernel]

CLONE_NEWNET = 0x40000000


def proc(key):
    return "/proc/sys/" + key.replace(".", "/")


def words(text):
    return " ".join(text.split())  # multi-value keys read back tab-separated


def in_own_namespace(work):
    """``work()`` (returning text) in a child forked into a network namespace of
    its own, gone when it exits; its text back. A fork, not ``unshare`` the
    program: no program to start per key (under TCG each costs seconds)."""
    import ctypes
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            os.close(r)
            if ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "unshare")
            out = work()
            code = 0
        except BaseException as exc:  # noqa: BLE001 - reported through the pipe
            out = f"error: {exc!r}"
        os.write(w, out.encode())
        os._exit(code)
    os.close(w)
    chunks = []
    while True:
        data = os.read(r, 65536)
        if not data:
            break
        chunks.append(data)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    text = b"".join(chunks).decode()
    assert os.waitstatus_to_exitcode(status) == 0, text
    return text


def read(path):
    with open(path) as f:
        return f.read()


def write_and_read(path, value):
    before = read(path)
    with open(path, "w") as f:
        f.write(value + "\n")
    return before + "|" + read(path)


def candidates(key):
    """The key's test values this kernel can take: a congestion control outside
    the initial namespace must be one of tcp_allowed_congestion_control."""
    vals = list(sysctls.values(key) or ())
    if key == "net.ipv4.tcp_congestion_control":
        have = read("/proc/sys/net/ipv4/tcp_allowed_congestion_control").split()
        vals = [v for v in vals if v in have] + have
    return vals


def test_every_allowed_sysctl_is_per_namespace_and_undone_with_it():
    keys = [k for k in sorted(sysctls.listed())
            if os.path.isdir("/proc/sys/net/ipv6") or not k.startswith("net.ipv6.")]
    assert keys
    host = {k: read(proc(k)) for k in keys}
    missing, moved, bad, outlived = [], {}, {}, {}
    try:
        for key in keys:
            path = proc(key)
            try:
                before = words(in_own_namespace(lambda: read(path)))
            except AssertionError as exc:
                missing.append(f"{key}: {exc}")
                continue
            new = next(v for v in candidates(key) if words(v) != before)
            try:
                was, now = in_own_namespace(lambda: write_and_read(path, new)).split("|")
            except AssertionError as exc:
                bad[key] = (before, new, str(exc).splitlines()[0])
                continue
            if words(was) != before or words(now) != words(new):
                bad[key] = (before, new, words(was), words(now))
            again = words(in_own_namespace(lambda: read(path)))
            if again != before:
                outlived[key] = (before, again)
    finally:
        for key, value in host.items():
            now = read(proc(key))
            if now != value:  # it reached the host: put the host's value back, then fail
                moved[key] = (value, now)
                with open(proc(key), "w") as f:
                    f.write(value)
    assert not missing, f"not in a new namespace on this kernel: {missing}"
    assert not moved, f"written in a namespace, these changed the host's value: {moved}"
    assert not bad, ("key: (a new namespace's value, written, then read before and after, or "
                     f"why the write failed): {bad}")
    assert not outlived, ("a new namespace reads another value than one did before (the value "
                          f"outlived the namespace it was written in): {outlived}")
