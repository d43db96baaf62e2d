"""`nslab watch` in a real terminal (tmux): a two-host lab, iperf across it, the
rate on the watched link rises above 100 Mbit/s and falls back when iperf stops."""
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from nslab.runtime.testing import needs
from nslab.topologies import pair

pytestmark = pytest.mark.root
NSLAB = os.path.join(os.path.dirname(sys.executable), "nslab")
RATE = re.compile(r"h1\s+│?\s*h1-eth0\s+│?\s*([\d.]+) (bit|kbit|Mbit|Gbit)/s\s+│?\s*([\d.]+) "
                  r"(bit|kbit|Mbit|Gbit)/s")
SCALE = {"bit": 1, "kbit": 1e3, "Mbit": 1e6, "Gbit": 1e9}


def tx_of_h1(screen: str):
    """h1-eth0's tx rate on the screen, bit/s (None if not shown yet)."""
    found = RATE.findall(screen)
    if not found:
        return None
    _, _, tx, unit = found[-1]
    return float(tx) * SCALE[unit]


def pane(name: str) -> str:
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", name], capture_output=True,
                          text=True).stdout


@needs("iperf")
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_watch_shows_a_link_rising_and_falling(make_lab):
    lab = make_lab(pair(bw="1Gbit"))
    name = f"nslab-watch-{os.getpid()}"
    subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "160", "-y", "40",
                    f"{NSLAB} watch {lab.run_id} --interval 0.5 --count 60"], check=True)
    try:
        srv = lab["h2"].popen(["iperf", "-s", "-B", "10.0.0.2"], name="iperf-server")
        # The first rate row needs the CLI up and two samples: polled, not a
        # fixed sleep (a slow machine may take longer than one).
        deadline, idle = time.monotonic() + 20, None
        while idle is None and time.monotonic() < deadline:
            time.sleep(0.25)
            idle = tx_of_h1(pane(name))
        assert idle is not None and idle < 1e6, pane(name)
        # 2 s of traffic: a refresh every 0.5 s (plus the sampling), so at least
        # three readings cover it, two of them wholly, each well above 100 Mbit/s
        client = lab["h1"].popen(["iperf", "-c", "10.0.0.2", "-t", "2"], name="iperf-client")
        during = []
        while client.popen.poll() is None:
            during.append(tx_of_h1(pane(name)))
            time.sleep(0.25)
        # down within two seconds (four refreshes) of the traffic stopping:
        # polled, the last look at the deadline
        deadline = time.monotonic() + 2
        while True:
            after = tx_of_h1(pane(name))
            if (after is not None and after < 1e6) or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        srv.stop()
        assert max(v or 0 for v in during) > 100e6, during
        assert after is not None and after < 1e6, after
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], check=False)
