"""``nslab rfc2544 theory``: the maximum frame rates of a link, no root."""
from __future__ import annotations

import click

from nslab.errors import InputError


@click.group("rfc2544")
def rfc2544_group() -> None:
    """RFC 2544 helpers."""


@rfc2544_group.command("theory")
@click.option("--link-rate", default="100Mbit", show_default=True)
@click.option("--frame-sizes", default="64,128,256,512,1024,1280,1518", show_default=True)
def rfc2544_theory(link_rate: str, frame_sizes: str) -> None:
    """The theoretical maximum frame rate per frame size (preamble, gap and FCS counted)."""
    from nslab.cmdline.cliutil import int_list
    from nslab.model.shaping import parse_rate

    from .model import theory_table
    rate = parse_rate(link_rate)
    sizes = int_list(frame_sizes, "--frame-sizes")
    for s in sizes:
        if s < 64:
            raise InputError(f"frame size {s} is under Ethernet's minimum of 64 bytes")
    click.echo(f"{'frame (bytes)':>14} {'max frames/s':>14} {'Mbit/s of frames':>17}")
    for size, fps, bps in theory_table(rate, sizes):
        click.echo(f"{size:>14} {fps:>14,.0f} {bps / 1e6:>17.2f}")
