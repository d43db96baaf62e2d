"""`nslab ps` on real labs: two labs up are listed with their names, node
counts and owners; a third of a name that is up is refused in one line; `nslab
watch` with both up names each one. Two `pair` labs: a few seconds."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

pytestmark = pytest.mark.root

NSLAB = os.path.join(os.path.dirname(sys.executable), "nslab")


def nslab(*args, timeout=60):
    return subprocess.run([NSLAB, *args], capture_output=True, text=True, timeout=timeout)


def ps():
    res = nslab("ps", "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


class Up:
    """`nslab topo up ...` in the background until it says the lab is built."""

    def __init__(self, tmp_path, *args):
        self.p = subprocess.Popen([NSLAB, "--results", str(tmp_path), "topo", "up", *args,
                                   "--for", "120"], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.out = []
        threading.Thread(target=lambda: self.out.extend(self.p.stdout), daemon=True).start()
        deadline = time.monotonic() + 30
        while not any("built in" in line for line in self.out):
            assert time.monotonic() < deadline and self.p.poll() is None, "".join(self.out)
            time.sleep(0.05)

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()


def test_ps_lists_two_real_labs_and_a_third_of_a_name_up_is_refused(tmp_path):
    before = {r["run"] for r in ps()}
    labs = []
    try:
        labs.append(Up(tmp_path, "pair", "--again"))  # whatever else this machine runs
        again = nslab("--results", str(tmp_path), "topo", "up", "pair", "--for", "0")
        assert again.returncode == 2, again.stdout + again.stderr
        assert len(again.stderr.strip().splitlines()) == 1, again.stderr
        assert "topology 'pair' is already up: nl" in again.stderr and "--again" in again.stderr
        labs.append(Up(tmp_path, "pair", "--name", "pair-b"))
        rows = [r for r in ps() if r["run"] not in before]
        assert sorted((r["topology"], r["nodes"], r["pid"], r["role"]) for r in rows) == [
            ("pair", 2, labs[0].p.pid, "local"), ("pair-b", 2, labs[1].p.pid, "local")]
        assert all(0 <= r["age_s"] < 60 for r in rows)
        table = nslab("ps")
        assert table.returncode == 0 and all(r["run"] in table.stdout for r in rows)
        if not before:  # nothing else up: watch must be told which, and names both
            watch = nslab("watch", "--count", "1")
            assert watch.returncode == 2
            for r in rows:
                assert f"{r['run']} ({r['topology']}, 2 nodes, up " in watch.stderr
    finally:
        for lab in labs:
            lab.stop()
    assert not {r["run"] for r in ps()} - before
