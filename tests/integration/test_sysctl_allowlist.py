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
import subprocess

import pytest

from nslab.model import sysctls

pytestmark = [pytest.mark.root, pytest.mark.kernel]

#: In a new namespace: the key's value, then write $2 and show the value again.
WRITE = 'cat "$1" && printf "%s\\n" "$2" > "$1" && cat "$1"'


def proc(key):
    return "/proc/sys/" + key.replace(".", "/")


def words(text):
    return " ".join(text.split())  # multi-value keys read back tab-separated


def in_new_namespace(*argv):
    return subprocess.run(["unshare", "--net", "--", *argv], capture_output=True, text=True,
                          timeout=30)


@pytest.mark.parametrize("key", sorted(sysctls.listed()))
def test_an_allowed_sysctl_is_per_namespace_and_undone_with_it(key):
    if key.startswith("net.ipv6.") and not os.path.isdir("/proc/sys/net/ipv6"):
        pytest.skip("IPv6 is off on this kernel (ipv6.disable=1)")
    path = proc(key)
    with open(path) as f:
        host = f.read()
    fresh = in_new_namespace("cat", path)
    assert fresh.returncode == 0, f"{key}: not in a new namespace on this kernel: {fresh.stderr}"
    before = words(fresh.stdout)
    new = next(v for v in sysctls.values(key) if words(v) != before)
    try:
        res = in_new_namespace("sh", "-c", WRITE, "sh", path, new)
    finally:
        with open(path) as f:
            after = f.read()
        if after != host:  # it reached the host: put the host's value back, then fail
            with open(path, "w") as f:
                f.write(host)
    assert after == host, f"{key}={new} in a namespace changed the host's value: " \
                          f"{host!r} -> {after!r}"
    assert res.returncode == 0, f"{key}={new}: {res.stderr}"
    shown = res.stdout.splitlines()
    assert words(shown[0]) == before and words(shown[-1]) == words(new), res.stdout
    again = in_new_namespace("cat", path)
    assert words(again.stdout) == before, \
        f"{key}: a new namespace has {again.stdout!r}, not {before!r}: the value outlived " \
        "the namespace it was written in"

