"""What this machine has for Open vSwitch: the ``ovs`` kind's probes.

Named by :data:`nslab.ovs.kind.KIND` (``probes``); ``nslab doctor`` and every
lab's capability check run :func:`capabilities` with the core's probes
(:func:`nslab.runtime.caps.probe`)."""
from __future__ import annotations

import os
import shutil
from typing import Dict

from nslab.runtime import caps
from nslab.runtime.caps import Capability


def ovs_running() -> bool:
    """True if ovsdb-server and ovs-vswitchd answer."""
    if not shutil.which("ovs-vsctl"):
        return False
    return caps.run_probe(["ovs-vsctl", "--timeout=2", "--", "get", "Open_vSwitch", ".",
                           "ovs_version"]).returncode == 0 \
        and caps.run_probe(["ovs-appctl", "-t", "ovs-vswitchd", "--timeout=2",
                            "version"]).returncode == 0


def ovs_kernel_module() -> bool:
    """True if the openvswitch kernel datapath is available (loaded or loadable)."""
    if os.path.isdir("/sys/module/openvswitch"):
        return True
    if caps.is_root() and shutil.which("modprobe") and os.path.exists("/proc/modules"):
        if caps.run_probe(["modprobe", "-q", "openvswitch"]).returncode == 0:
            return os.path.isdir("/sys/module/openvswitch")
    return False


def capabilities(found: Dict[str, Capability]) -> Dict[str, Capability]:
    """``ovs`` (the tools), ``ovs_kernel`` (the kernel datapath) and
    ``ovs_running`` (the daemons), given what the core and the kinds' tools
    found (``tool:ovs-vsctl``)."""
    kmod = ovs_kernel_module()
    out = {"ovs_kernel": Capability(
        "ovs_kernel", kmod, "kernel datapath" if kmod else
        "no openvswitch module: userspace datapath (netdev), tx offload off", False, "")}
    tool = found.get("tool:ovs-vsctl")
    has_ovs = tool is not None and tool.ok
    out["ovs"] = Capability("ovs", has_ovs, "Open vSwitch" + (" (kernel)" if kmod else
                                                              " (userspace)"),
                            False, "apt install openvswitch-switch")
    running = has_ovs and ovs_running()
    out["ovs_running"] = Capability("ovs_running", running, "ovs-vswitchd running" if running
                                    else "not running: the lab starts it when needed", False, "")
    return out
