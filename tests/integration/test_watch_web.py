"""`nslab watch --web` in a real browser: headless Chromium (Debian's chromium and
chromium-driver, driven by selenium) loads the live page of a two-host lab, sees
the topology, sees the link's rate rise above 100 Mbit/s while iperf runs across
it and fall back when it stops."""
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from nslab.runtime.testing import needs
from nslab.topologies import pair
from nslab.traffic.iperf import wait_listening

pytestmark = pytest.mark.root
NSLAB = os.path.join(os.path.dirname(sys.executable), "nslab")
#: Debian's names first; Ubuntu's chromium and chromium-browser are snap stubs
#: that fail without snapd, so a browser counts only if it answers --version.
BROWSERS = ("chromium", "chromium-browser", "google-chrome-stable", "google-chrome")


def _runs(path):
    try:
        return subprocess.run([path, "--version"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def find_browser():
    """(browser, driver) that run here, or (None, why not)."""
    driver = shutil.which("chromedriver")
    if driver is None or not _runs(driver):
        return None, "no chromedriver that runs (Debian: make setup installs chromium-driver)"
    for name in BROWSERS:
        path = shutil.which(name)
        if path and _runs(path):
            return path, driver
    return None, f"no browser that runs headless among {', '.join(BROWSERS)} (on Ubuntu these " \
                 "are snaps: install one, or skip the browser tests)"


CHROMIUM, CHROMEDRIVER = find_browser()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def browser():
    if CHROMIUM is None:
        pytest.skip(CHROMEDRIVER)
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1000,800"):
        opts.add_argument(arg)
    # the Debian driver, never a download (selenium-manager is not asked)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    yield driver
    driver.quit()


def link_bps(driver, link_id: str):
    """The larger direction of ``link_id``'s rate as the page shows it (None before
    the first event)."""
    got = driver.execute_script(
        "const g = document.getElementById(arguments[0]);"
        "return g && g.dataset.abBps !== undefined ? [g.dataset.abBps, g.dataset.baBps] : null;",
        link_id)
    return None if got is None else max(float(v) for v in got)


def label_text(driver, link_id: str) -> str:
    return driver.execute_script(
        "const t = document.getElementById('rate-' + arguments[0]); return t ? t.textContent : '';",
        link_id)


@needs("iperf")
def test_web_page_shows_a_link_rising_and_falling(make_lab, browser, tmp_path):
    lab = make_lab(pair(bw="1Gbit"))
    port = free_port()
    log = open(tmp_path / "watch.log", "w")
    server = subprocess.Popen([NSLAB, "watch", lab.run_id, "--web", "--port", str(port),
                               "--interval", "0.5"], stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, (tmp_path / "watch.log").read_text()
                time.sleep(0.2)
        browser.get(url)
        # the topology: both hosts and the link between them, drawn by Graphviz
        titles = browser.execute_script(
            "return [...document.querySelectorAll('#picture svg g.node title')]"
            ".map(t => t.textContent);")
        assert sorted(titles) == ["h1", "h2"]
        assert browser.execute_script("return document.querySelectorAll('g.link').length") == 1
        deadline = time.monotonic() + 10
        while link_bps(browser, "link0") is None:
            assert time.monotonic() < deadline, "no rates reached the page"
            time.sleep(0.2)
        assert link_bps(browser, "link0") < 1e6
        srv = lab["h2"].popen(["iperf", "-s", "-B", "10.0.0.2"], name="iperf-server")
        wait_listening(lab["h2"])
        # 2 s of traffic: a reading every 0.5 s (plus the sampling), so at least
        # three cover it, two of them wholly, each well above 100 Mbit/s
        client = lab["h1"].popen(["iperf", "-c", "10.0.0.2", "-t", "2"], name="iperf-client")
        during, shot = [], False
        while client.popen.poll() is None:
            during.append(link_bps(browser, "link0") or 0)
            if during[-1] > 100e6 and not shot:
                # the label of that very reading, before the (slower) screenshot
                busy_label, shot = label_text(browser, "link0"), True
                browser.save_screenshot(str(tmp_path / "watch-busy.png"))
            time.sleep(0.25)
        srv.stop()
        assert max(during) > 100e6, during
        assert "Mbit/s" in busy_label, busy_label
        deadline = time.monotonic() + 5
        while link_bps(browser, "link0") > 1e6:
            assert time.monotonic() < deadline, "the rate did not fall back after iperf stopped"
            time.sleep(0.25)
    finally:
        server.terminate()
        server.wait(timeout=10)
        log.close()


def test_web_refuses_an_address_that_is_not_one():
    """One line naming the option and a non-zero exit, before any lab is looked for."""
    res = subprocess.run([NSLAB, "watch", "--web", "--bind", "localhost; rm -rf /"],
                         capture_output=True, text=True)
    assert res.returncode != 0
    assert "--bind 'localhost; rm -rf /': not an IP address" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
