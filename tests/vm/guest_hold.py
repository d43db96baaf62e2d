"""What a test tier's guest holds in its RAM before its tests (a guest's
``hold``, :func:`nslab.hosts.vm.hold_script`): the programs its labs start
again and again; those a root lacks are left out. Here, not in the core: the
core names no daemon or switch (tests/unit/test_layers.py)."""

TIER_HOLD = ["ip", "tc", "bridge", "ethtool", "ping", "iperf", "sysctl", "sh", "bash", "cat",
             "tee", "taskset", "chrt", "nsenter", "ovs-vsctl", "ovs-ofctl", "ovs-appctl",
             "ovs-dpctl", "ovsdb-server", "ovsdb-tool", "ovs-vswitchd", "vtysh",
             "/usr/lib/frr/zebra", "/usr/lib/frr/bgpd", "/usr/lib/frr/bfdd",
             "/usr/lib/frr/staticd", "/usr/lib/frr/mgmtd", "/usr/lib/frr/watchfrr",
             "python3"]
