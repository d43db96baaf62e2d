"""``nslab capture TARGET [RUN] [FILTER...]``: pcapng of a running lab's link,
interface or node, to a file or to stdout (``| wireshark -k -i -``).

See :mod:`nslab.capture` for targets and the tool, ``docs/capture.md`` for use.
"""
from __future__ import annotations

import os
import sys
from typing import Optional, Tuple

import click

from .errors import InputError, LabError

EXAMPLES = """\b
  nslab capture h1:h1-eth0 -w h1.pcapng              until Ctrl-C or the lab ends
  nslab capture s1:s1-eth2 -w - | wireshark -k -i -  live in Wireshark
  nslab capture h1-s1 -w x.pcapng -c 100 icmp        a link, at h1's end; a filter
  nslab capture r1 -w r1.pcapng --duration 10        every interface of r1, one file
  nslab capture h2:h2-eth0 -w /root/caps/h2.pcapng -C 10 -W 5   a ring of 5 x 10 MB"""


def split_rest(rest: Tuple[str, ...], filt: Optional[str]) -> Tuple[Optional[str], Optional[str]]:
    """``(run, filter)`` from the words after TARGET: a first word that is a
    run id (``nl3f2a``) is the RUN; the rest, joined by spaces, is the filter
    (or ``-f``, not both)."""
    from .naming import RUN_RE
    words = list(rest)
    run = words.pop(0) if words and RUN_RE.fullmatch(words[0]) else None
    if words and filt is not None:
        raise InputError("give the capture filter once: with -f or after the target, not both")
    text = " ".join(words) if words else filt
    if text is not None:
        from .capture import check_filter
        check_filter(text)
    return run, text


@click.command("capture", epilog=EXAMPLES)
@click.argument("target")
@click.argument("rest", nargs=-1, metavar="[RUN] [FILTER]...")
@click.option("-w", "out", required=True, metavar="FILE",
              help="The pcapng file (replaced if it exists; never written through a link), "
                   "or - for stdout.")
@click.option("-c", "count", type=click.IntRange(1, 10**12), default=None,
              help="Stop after this many packets.")
@click.option("--duration", type=click.FloatRange(0, 86400 * 366, min_open=True), default=None,
              help="Stop after this many seconds.")
@click.option("-f", "--filter", "filt", default=None, metavar="FILTER",
              help="A capture (BPF) filter, e.g. 'icmp or arp'; or give it after TARGET.")
@click.option("-s", "--snaplen", type=click.IntRange(64, 262144), default=None,
              help="Bytes kept of each packet (default: all).")
@click.option("-C", "ring_mb", type=click.IntRange(1, 10**6), default=None, metavar="MB",
              help="A ring of files of MB (10^6 bytes) each, as tcpdump -C (needs -w FILE).")
@click.option("-W", "ring_files", type=click.IntRange(1, 100000), default=None, metavar="N",
              help="With -C: keep the last N files, as tcpdump -W.")
def capture_cmd(target: str, rest: Tuple[str, ...], out: str, count: Optional[int],
                duration: Optional[float], filt: Optional[str], snaplen: Optional[int],
                ring_mb: Optional[int], ring_files: Optional[int]) -> None:
    """Capture packets of a running lab into pcapng (Wireshark's dumpcap).

    \b
    TARGET is NODE:IFACE (one interface), A-B (the link between nodes A
    and B, as `nslab topo draw` draws it, captured at A's end) or NODE (all
    its links' interfaces, one file). RUN is a lab's run id (with no RUN and
    one lab up, that one). Words after them are a capture filter. The
    capture runs inside the node's namespace (an OVS port in the root
    namespace), tagged with the lab's run: it stops on Ctrl-C, at -c or
    --duration, and when the lab ends.
    """
    from . import capture as cap
    from . import capturerun as live
    from .caps import require_root
    from .cliutil import install_signals
    from .naming import check_run_id
    parsed = cap.parse_target(target)
    run, text = split_rest(rest, filt)
    # every option is checked before anything else (and without root)
    cap.dumpcap_argv(["check"], out, count=count, duration=duration, filt=text, snaplen=snaplen,
                     ring_mb=ring_mb, ring_files=ring_files)
    if out == "-" and sys.stdout.isatty():
        raise InputError("-w -: stdout is a terminal; pipe it (| wireshark -k -i -) or give "
                         "-w FILE")
    if ring_mb is not None:
        why = cap.ring_dir_problem(out)
        if why is not None:
            raise InputError(f"-w {out} with -C: dumpcap names and opens the ring's files "
                             f"itself, so their directory must be root's alone: {why} (e.g. "
                             "mkdir -m 700 /root/captures)")
    require_root("nslab capture")
    cap.require_tool()
    run = find_lab(check_run_id(run) if run else None)
    where = cap.resolve(parsed, live.lab_map(run, [parsed.node]))
    argv = cap.dumpcap_argv(where.devs, "-" if ring_mb is None else os.path.abspath(out),
                            count=count, duration=duration, filt=text, snaplen=snaplen,
                            ring_mb=ring_mb, ring_files=ring_files)
    install_signals()
    fh = None
    if out != "-" and ring_mb is None:
        from .safeio import open_new
        try:
            fh = open_new(out, "wb", replace=True)
        except OSError as exc:
            raise InputError(f"-w {out}: {exc.strerror or exc}") from None
    try:
        c = live.Capture(where, argv, run, stdout=fh)
    finally:
        if fh is not None:
            fh.close()  # dumpcap writes through its own descriptor
    ended = "stopped"
    try:
        try:
            live.wait_started([c])
        except LabError:
            if fh is not None and os.path.isfile(out) and os.path.getsize(out) == 0:
                os.unlink(out)  # the empty file made for a capture that never began
            raise
        click.echo(f"capturing {where.label} of lab {run}"
                   + (f" (filter {text!r})" if text else "") + " into "
                   + ("stdout" if out == "-" else out) + "; Ctrl-C to stop", err=True)
        ended = {"done": "ended", "lab gone": f"stopped: lab {run} is gone"}[live.follow(c, run)]
    except KeyboardInterrupt:
        c.stop()
    n = c.packets
    if ended == "ended" and c.proc.popen.returncode not in (0, -2, -13) and c.message():
        if out == "-" and "Broken pipe" in c.message():
            ended = "stopped: its reader closed the pipe"
        else:
            raise c.failure()  # e.g. the interface went away
    click.echo(f"{n if n is not None else '?'} packet{'' if n == 1 else 's'} captured on "
               f"{where.label} ({ended})", err=True)


def find_lab(run: Optional[str]) -> str:
    """The lab to capture (as ``nslab watch`` finds it), with a hint for a
    lab across machines when none runs here."""
    from .clean import live_journals
    from .watch import find_run
    try:
        return find_run(run)
    except InputError:
        if run is None and not live_journals():
            raise InputError("no lab is running on this host: start one (nslab topo up pair) "
                             "or, for a lab across machines, capture on the host that has the "
                             "node (ssh HOST nslab capture TARGET -w - > file.pcapng)") from None
        raise
