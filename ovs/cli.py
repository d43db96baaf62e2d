"""``nslab ovs``: the OVS toolbelt (seed 003) and ``nslab ethtool``."""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from typing import List, Optional

import click

from nslab.cmdline.cliutil import echo
from nslab.errors import CapabilityError, InputError
from nslab.model.fields import check_ifname
from nslab.ovs.bridge import list_bridges
from nslab.ovs.daemon import (USER, datapath_type, ensure_running, owner, started_by_nslab,
                              stop_if_ours)
from nslab.ovs import probes
from nslab.runtime import caps
from nslab.runtime.proc import run


def _need_ovs() -> None:
    if not shutil.which("ovs-vsctl"):
        raise CapabilityError("Open vSwitch is not installed (apt install openvswitch-switch)")


@click.group("ovs")
def ovs_group() -> None:
    """Open vSwitch toolbelt: daemons, bridges, dpid, STP, controller, pass-throughs."""


@ovs_group.command("start")
@click.option("--datapath", type=click.Choice(["auto", "kernel", "user"]), default="auto",
              show_default=True)
def start(datapath: str) -> None:
    """Create the database if missing and start ovsdb-server and ovs-vswitchd."""
    _need_ovs()
    caps.require_root("nslab ovs start")
    if datapath == "kernel" and datapath_type() != "system":
        raise CapabilityError("the kernel datapath needs the openvswitch kernel module, which this "
                              "kernel lacks: use --datapath user")
    started = ensure_running(USER)
    dp = "kernel (system)" if datapath_type() == "system" and datapath != "user" else "userspace (netdev)"
    state = ("started" if started else "already running") + \
        ("; it stays up until nslab ovs stop" if owner() == USER else " (not started by nslab)")
    click.echo(f"{state}; bridges nslab creates use the {dp} datapath")


@ovs_group.command("stop")
def stop() -> None:
    """Stop the OVS daemons, only if nslab started them."""
    _need_ovs()
    caps.require_root("nslab ovs stop")
    if not started_by_nslab():
        click.echo("OVS was not started by nslab: leaving it running")
        return
    click.echo("stopped" if stop_if_ours() else "left running: it has bridges nslab did not create")


@ovs_group.command("status")
def status() -> None:
    """Daemons, version, datapath types, bridges (tagged with their nslab run or not)."""
    _need_ovs()
    if not probes.ovs_running():
        click.echo("ovsdb-server/ovs-vswitchd: not running (nslab ovs start)")
        return
    from nslab.ovs.toolbelt import vsctl
    who = {USER: "started by nslab ovs start: stays up until nslab ovs stop",
           None: "not started by nslab"}.get(owner(), "started by a lab: stops when the last "
                                                      "lab using it ends")
    click.echo(f"running (OVS {vsctl(['get', 'Open_vSwitch', '.', 'ovs_version']).strip(chr(34))}), "
               f"{who}")
    click.echo(f"datapath for new bridges: {datapath_type()}")
    for b in list_bridges():
        tag = b["external_ids"].get("nslab-run")
        echo(f"  bridge {b['name']}" + (f" (nslab run {tag})" if tag else " (not nslab's)"))


class PassThrough(click.Command):
    """A command that hands every argument after its name to a tool untouched,
    ``--`` included (click would take the first ``--`` as its own). A lone
    ``--help`` is still this command's help."""

    def parse_args(self, ctx: click.Context, args: List[str]) -> List[str]:
        if args == ["--help"]:
            return super().parse_args(ctx, args)
        ctx.meta["passthrough"] = list(args)
        return super().parse_args(ctx, [])


@ovs_group.command("vsctl", cls=PassThrough, options_metavar="ARGS...")
@click.pass_context
def vsctl_cmd(ctx: click.Context) -> None:
    """ovs-vsctl ARGS... (pass-through, no shell), e.g.
    nslab ovs vsctl add-br br0 -- set Bridge br0 datapath_type=netdev
    """
    _need_ovs()
    raise SystemExit(subprocess.call(["ovs-vsctl", *ctx.meta.get("passthrough", [])]))


@ovs_group.command("ofctl", cls=PassThrough, options_metavar="ARGS...")
@click.pass_context
def ofctl_cmd(ctx: click.Context) -> None:
    """ovs-ofctl ARGS... (pass-through, no shell), e.g. nslab ovs ofctl dump-flows br0."""
    _need_ovs()
    raise SystemExit(subprocess.call(["ovs-ofctl", *ctx.meta.get("passthrough", [])]))


@ovs_group.command("get-dpid")
@click.argument("bridge")
def get_dpid(bridge: str) -> None:
    """Print the bridge's datapath id (16 hex digits)."""
    from nslab.ovs import toolbelt
    _need_ovs()
    echo(toolbelt.get_dpid(bridge))


@ovs_group.command("set-dpid")
@click.argument("bridge")
@click.argument("dpid")
def set_dpid(bridge: str, dpid: str) -> None:
    """Set the datapath id: decimal, 0x-hex or 16 hex digits."""
    from nslab.ovs import toolbelt
    _need_ovs()
    echo(toolbelt.set_dpid(bridge, dpid))


@ovs_group.command("get-stp")
@click.argument("bridge")
def get_stp(bridge: str) -> None:
    from nslab.ovs import toolbelt
    _need_ovs()
    echo(toolbelt.get_stp(bridge))


@ovs_group.command("set-stp")
@click.argument("bridge")
@click.argument("state", type=click.Choice(["true", "false"]))
def set_stp(bridge: str, state: str) -> None:
    from nslab.ovs import toolbelt
    _need_ovs()
    toolbelt.set_stp(bridge, state == "true")


@ovs_group.command("get-controller")
@click.argument("bridge")
def get_controller(bridge: str) -> None:
    from nslab.ovs import toolbelt
    _need_ovs()
    echo(toolbelt.get_controller(bridge) or "(none)")


@ovs_group.command("set-controller")
@click.argument("bridge")
@click.argument("target")
def set_controller(bridge: str, target: str) -> None:
    """Point BRIDGE at an OpenFlow controller, e.g. tcp:127.0.0.1:6653."""
    from nslab.ovs import toolbelt
    _need_ovs()
    toolbelt.set_controller(bridge, target)


@ovs_group.command("del-controller")
@click.argument("bridge")
def del_controller(bridge: str) -> None:
    from nslab.ovs import toolbelt
    _need_ovs()
    toolbelt.del_controller(bridge)


@ovs_group.command("ethtool-help")
def ethtool_help() -> None:
    """The speed/duplex/autoneg cheat sheet with the advertise bitmask table."""
    from nslab.ovs.toolbelt import ETHTOOL_HELP
    click.echo(ETHTOOL_HELP, nl=False)


@click.command("ethtool")
@click.argument("iface")
@click.option("--speed", type=int, default=None, help="Mbit/s, e.g. 10, 100, 1000.")
@click.option("--duplex", type=click.Choice(["half", "full"]), default=None)
@click.option("--autoneg", type=click.Choice(["on", "off"]), default=None)
def ethtool_cmd(iface: str, speed: Optional[int], duplex: Optional[str], autoneg: Optional[str]) -> None:
    """Show (or set, then show) what IFACE actually negotiated."""

    from nslab.ovs.uplink import parse_ethtool
    check_ifname(iface, "nslab ethtool")
    if not os.path.isdir(f"/sys/class/net/{iface}"):
        raise InputError(f"no interface {iface!r} here")
    if speed or duplex or autoneg:
        argv = ["ethtool", "-s", iface]
        if speed:
            argv += ["speed", str(speed)]
        if duplex:
            argv += ["duplex", duplex]
        if autoneg:
            argv += ["autoneg", autoneg]
        run(argv, where=iface)
    state = parse_ethtool(run(["ethtool", iface], check=False).stdout)
    deadline = time.monotonic() + (5.0 if speed or duplex else 0.0)
    while _mismatch(state, speed, duplex) and time.monotonic() < deadline:
        time.sleep(0.5)  # the link renegotiates
        state = parse_ethtool(run(["ethtool", iface], check=False).stdout)
    for k, v in state.items():
        echo(f"{k:8} {v if v is not None else '(not reported)'}")
    wrong = _mismatch(state, speed, duplex)
    if wrong:
        asked = " ".join(x for x in (f"{speed}Mb/s" if speed else "", duplex or "") if x)
        raise CapabilityError(f"{iface}: the driver took '{asked}', but the link negotiated "
                              f"{state.get('speed')} {state.get('duplex')} (the PHY did not "
                              f"honour it: {', '.join(wrong)})")


def _mismatch(state: dict, speed: Optional[int], duplex: Optional[str]) -> list:
    """What of the requested speed/duplex the link does not show."""
    out = []
    if speed and state.get("speed") and state["speed"] != f"{speed}Mb/s":
        out.append(f"speed {state['speed']}")
    if duplex and state.get("duplex") and state["duplex"].lower() != duplex:
        out.append(f"duplex {state['duplex']}")
    return out
