"""``nslab alias serve|client``: the alias study on two real machines (the
posts' server.sh and client.sh)."""
from __future__ import annotations

from typing import Optional

import click


@click.group("alias")
def alias_group() -> None:
    """The alias study on two real machines (the posts' server.sh and client.sh)."""


@alias_group.command("serve")
@click.option("--iface", required=True, help="Interface to put the aliases on (e.g. eth1).")
@click.option("--aliases", "n", type=int, required=True, help="Number of aliases N.")
@click.option("--addr-template", default="192.168.2.%d", show_default=True)
@click.option("--prefix", type=int, default=16, show_default=True)
@click.option("--for", "hold", type=float, default=None, help="Serve this long (default: until Ctrl-C).")
def alias_serve(iface: str, n: int, addr_template: str, prefix: int, hold: Optional[float]) -> None:
    """Add N labelled aliases to IFACE and bind one iperf2 server to each; undo on exit."""
    from nslab.cmdline.cliutil import install_signals

    from .twobox import serve
    install_signals()
    serve(iface, n, addr_template, prefix, hold, echo=click.echo)


@alias_group.command("client")
@click.option("--addr-template", default="192.168.2.%d", show_default=True)
@click.option("--workers", "n", type=int, required=True, help="Number of clients N (one per alias).")
@click.option("--time", "duration", type=float, default=10, show_default=True)
@click.option("--mss", type=int, default=None)
@click.option("--nodelay", is_flag=True)
def alias_client(addr_template: str, n: int, duration: float, mss: Optional[int], nodelay: bool) -> None:
    """Run N synchronised iperf2 clients, client i to alias i; print the sum like client.sh."""
    from .twobox import client
    res = client(addr_template, n, duration, mss=mss, nodelay=nodelay)
    click.echo(f"clients reported: {res['reported']}/{n}")
    click.echo(f"sum of the clients' reports: {res['sum_kbps']:.0f} Kbits/sec")
