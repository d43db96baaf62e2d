import pytest


class Bystanders:
    """Objects the lab did not create, named close to the lab's: a namespace,
    an OVS bridge and an iperf2 server in that namespace. Names are unique to
    this test run, so a run killed before its cleanup cannot break the next."""

    def __init__(self, port: int) -> None:
        import secrets
        import subprocess
        tag = secrets.token_hex(3)
        self.ns, self.br, self.port = f"usertest-{tag}", f"utbr-{tag}", port
        self.server = None
        try:
            subprocess.run(["ip", "netns", "add", self.ns], check=True)
            from nslab.ovs.daemon import ensure_running
            ensure_running()
            subprocess.run(["ovs-vsctl", "--may-exist", "add-br", self.br, "--", "set", "Bridge",
                            self.br, "datapath_type=netdev"], check=True)
            self.server = subprocess.Popen(["ip", "netns", "exec", self.ns, "iperf", "-s", "-p",
                                            str(port)], stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL)
        except BaseException:
            self.remove()
            raise

    def assert_intact(self) -> None:
        import subprocess
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert self.ns in {line.split()[0] for line in out.splitlines() if line.strip()}
        brs = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True).stdout
        assert self.br in brs.split()
        assert self.server is not None and self.server.poll() is None

    def remove(self) -> None:
        import subprocess
        if self.server is not None:
            self.server.kill()
            self.server.wait()
        subprocess.run(["ovs-vsctl", "--if-exists", "del-br", self.br], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)
        # ensure_running() above starts the daemons the way a lab does; stop them
        # the same way (only if nslab started them and nothing else uses them).
        from nslab.runtime.clean import live_journals
        from nslab.ovs.daemon import release
        release([j["run"] for j in live_journals() if "ovs" in (j.get("extensions") or {})])


@pytest.fixture
def bystanders():
    """A namespace, OVS bridge and iperf server that nslab must leave alone."""
    b = Bystanders(port=5997)
    try:
        yield b
    finally:
        b.remove()
