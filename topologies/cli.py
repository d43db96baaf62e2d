"""``nslab demo``: two hosts on a switch, ping, then a shaped iperf2 TCP test."""
from __future__ import annotations

import click


@click.command("demo")
@click.option("--switch", type=click.Choice(["bridge", "ovs"]), default="bridge", show_default=True)
@click.option("--bw", default="1Gbit", show_default=True, help="Link rate.")
@click.option("--time", "duration", type=float, default=3, show_default=True)
@click.pass_context
def demo(ctx: click.Context, switch: str, bw: str, duration: float) -> None:
    """Two hosts on a switch: ping, then a shaped iperf2 TCP test."""
    from nslab.cmdline.cliutil import install_signals, print_lab, setup_logging
    from nslab.traffic.iperf import run_client, start_server, wait_listening
    from nslab.runtime.lab import Lab
    from nslab.model.naming import new_run_id
    from nslab.model.shaping import format_rate

    from .basic import single
    t = single(k=2, switch=switch, bw=bw)
    run_id = new_run_id()
    setup_logging(ctx.obj, run_id)
    install_signals()
    with Lab(t, run_id=run_id) as lab:
        print_lab(lab)
        h1, h2 = lab["h1"], lab["h2"]
        ping = h1.run(["ping", "-c", "3", "-i", "0.2", h2.require_ip()])
        click.echo(ping.stdout.strip().splitlines()[-1])
        start_server(h2)
        wait_listening(h2)
        rep = run_client(h1, h2.require_ip(), time=duration)
        shaping = t.links[0].shaping  # set from --bw
        rate = format_rate(shaping.rate) if shaping and shaping.rate else "unshaped"
        click.echo(f"iperf2 TCP h1 -> h2 over a {rate} "
                   f"{switch} link: {format_rate(rep.total_bps)}")
