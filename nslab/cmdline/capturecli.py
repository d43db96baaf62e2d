"""``nslab capture TARGET [RUN] [FILTER...]``: pcapng of a running lab's link,
interface or node, to a file or to stdout (``| wireshark -k -i -``).

See :mod:`nslab.traffic.capture` for targets and the tool, ``docs/capture.md`` for use.
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import IO, TYPE_CHECKING, Any, Callable, ContextManager, Optional, Tuple, TypeVar

import click

from ..traffic.capture import HOP_ENV
from ..errors import InputError, LabError
from ..model.naming import RUN_RE
from ..traffic import capture as cap
from ..runtime.caps import require_root
from ..model.naming import check_run_id
from .cliutil import echo, install_signals
from ..model.limits import fmt
from ..runtime.clean import read_controller, run_is_live, workdir
from ..runtime.offloads import End, OffloadsOff
from ..runtime.running import pick, running_labs
from ..traffic.capture import check_filter
from ..safeio import open_new

if TYPE_CHECKING:
    from ..traffic.capture import Target
    from ..traffic.captureremote import RemoteHost
    from ..traffic.capturerun import CaptureProcess

C = TypeVar("C", bound="CaptureProcess")

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
    words = list(rest)
    run = words.pop(0) if words and RUN_RE.fullmatch(words[0]) else None
    if words and filt is not None:
        raise InputError("give the capture filter once: with -f or after the target, not both")
    text = " ".join(words) if words else filt
    if text is not None:
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
@click.option("-s", "--snaplen", type=click.IntRange(64, 262144), default=None, metavar="N",
              help=f"Bytes kept of each packet (default {cap.DEFAULT_SNAPLEN}: every header).")
@click.option("--full", is_flag=True, help="Keep whole packets (no --snaplen).")
@click.option("--max-size", default=None, metavar="SIZE",
              help="Stop once this much is written, e.g. 500M, 2G, or none (default 100M; "
                   "with -C, what the ring's files may take in all).")
@click.option("--as-wire", is_flag=True,
              help="Turn segmentation offloads (tso, gso, gro) off on both ends of the "
                   "captured links while capturing, so packets are cut to the MTU as on a "
                   "wire; put back after (docs/capture.md).")
@click.option("-C", "ring_mb", type=click.IntRange(1, 10**6), default=None, metavar="MB",
              help="A ring of files of MB (10^6 bytes) each, as tcpdump -C (needs -w FILE).")
@click.option("-W", "ring_files", type=click.IntRange(1, 100000), default=None, metavar="N",
              help="With -C: keep the last N files, as tcpdump -W.")
def capture_cmd(target: str, rest: Tuple[str, ...], out: str, count: Optional[int],
                duration: Optional[float], filt: Optional[str], snaplen: Optional[int],
                full: bool, max_size: Optional[str], as_wire: bool, ring_mb: Optional[int],
                ring_files: Optional[int]) -> None:
    """Capture packets of a running lab into pcapng (Wireshark's dumpcap).

    \b
    TARGET is NODE:IFACE (one interface), A-B (the link between nodes A
    and B, as `nslab topo draw` draws it, captured at A's end) or NODE (all
    its links' interfaces, one file). RUN is a lab's run id (`nslab topo ps`
    lists them; with no RUN and one lab up, that one). Words after them are
    a capture filter. The capture runs inside the node's namespace (an OVS
    port in the root namespace), tagged with the lab's run: it stops on
    Ctrl-C, at -c or --duration, when its reader goes, and when the lab
    ends. On the machine that controls a lab across machines (--hosts), a
    node on another host is captured there, over the lab's SSH connection,
    and streamed back.

    \b
    A busy link fills a disk fast: by default the first 256 bytes of each
    packet are kept (every header), and the capture stops at 100 MiB; the
    first line says so. --snaplen, --full and --max-size change it.
    """
    from ..traffic import capturerun as live
    parsed = cap.parse_target(target)
    run, text = split_rest(rest, filt)
    keep = cap.keep_of(snaplen, max_size, full, ring=ring_mb is not None)
    # every option is checked before anything else (and without root)
    cap.dumpcap_argv(["check"], out, count=count, duration=duration, filt=text,
                     snaplen=keep.snaplen, ring_mb=ring_mb, ring_files=ring_files,
                     max_bytes=keep.max_bytes)
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
    run = find_lab(check_run_id(run) if run else None)
    lab = live.lab_map(run, [parsed.node], peers=as_wire)
    if parsed.node not in lab.netns and not os.environ.get(HOP_ENV):
        # not here: on another host of a lab controlled from here? (once: a
        # capture sent here from the controller is not sent on)
        host = remote_host(run, parsed.node)
        if host is not None:
            return capture_remote(host, parsed, run, out, count=count, duration=duration,
                                  text=text, keep=keep, as_wire=as_wire, ring_mb=ring_mb)
    cap.require_tool()
    where = cap.resolve(parsed, lab)
    argv = cap.dumpcap_argv(where.devs, "-" if ring_mb is None else os.path.abspath(out),
                            count=count, duration=duration, filt=text, snaplen=keep.snaplen,
                            ring_mb=ring_mb, ring_files=ring_files, max_bytes=keep.max_bytes)
    keeps = keep.describe()
    wire: ContextManager[Any] = contextlib.nullcontext()
    if as_wire:
        ends, away = cap.wire_ends(where, lab)
        wire = OffloadsOff(run, [End(*e) for e in ends], workdir(run))
        keeps += (f"; segmentation offloads off on {', '.join(e[0] for e in ends)} until it "
                  "ends" + (f" ({', '.join(away)} on another host keeps its own)" if away
                            else ""))
    install_signals()  # Ctrl-C while the offloads go off puts them back too
    with wire:
        c, ended = run_capture(lambda fh: live.Capture(where, argv, run, stdout=fh),
                               lambda one: live.wait_started([one]), run, out,
                               to_file=ring_mb is None, says=f"of lab {run}", text=text,
                               keeps=keeps)
    if ended == "ended" and c.proc.popen.returncode not in (0, -2, -13) and c.message():
        if out == "-" and "Broken pipe" in c.message():
            ended = "stopped: its reader closed the pipe"
        else:
            raise c.failure()  # e.g. the interface went away
    if ended == "ended" and ring_mb is None and cap_reached(out, keep):
        ended = (f"stopped at --max-size {fmt('capture', keep.max_bytes or 0)}; "
                 "raise it with --max-size SIZE")
    say_captured(c, ended)


def cap_reached(out: str, keep: cap.Keep) -> bool:
    """Did the capture into ``out`` end at its size cap? (dumpcap stops once
    it has written the cap's whole kB: a file of that many bytes or more)."""
    if out == "-" or keep.max_bytes is None:
        return False
    try:
        return os.path.getsize(out) >= keep.max_bytes // 1000 * 1000
    except OSError:
        return False


def run_capture(make: Callable[[Optional[IO]], C], start: Callable[[C], None], run: str,
                out: str, *, to_file: bool, says: str, text: Optional[str], keeps: str,
                alive: Optional[Callable[[], bool]] = None) -> Tuple[C, str]:
    """What a capture here and one on another host share: ``out`` opened
    (unless it is ``-`` or not ``to_file``) for ``make`` to start the capture
    writing into, ``start`` waiting until it captures (the empty file of one
    that never began removed), one line saying so and what it keeps
    (``keeps``: :meth:`~nslab.traffic.capture.Keep.describe`), then
    :func:`~nslab.traffic.capturerun.follow` until it ends, the lab goes
    (``alive``), its reader goes or Ctrl-C. Returns the capture and why it
    ended (``ended``, ``stopped: ...``)."""
    from ..traffic.capturerun import follow
    install_signals()
    fh = None
    if out != "-" and to_file:
        try:
            fh = open_new(out, "wb", replace=True)
        except OSError as exc:
            raise InputError(f"-w {out}: {exc.strerror or exc}") from None
    try:
        c = make(fh)
    finally:
        if fh is not None:
            fh.close()  # dumpcap (or ssh) writes through its own descriptor
    ended = "stopped"
    try:
        try:
            start(c)
        except LabError:
            if fh is not None and os.path.isfile(out) and os.path.getsize(out) == 0:
                os.unlink(out)  # the empty file made for a capture that never began
            raise
        echo(f"capturing {c.label} {says}"
             + (f" (filter {text!r})" if text else "") + " into "
             + ("stdout" if out == "-" else out) + f": {keeps}; Ctrl-C to stop", err=True)
        how = follow(c, run, alive=alive, reader_gone=stdout_closed if out == "-" else None)
        ended = {"done": "ended", "lab gone": f"stopped: lab {run} is gone",
                 "reader gone": "stopped: its reader closed the pipe"}[how]
    except KeyboardInterrupt:
        c.stop()
    return c, ended


def say_captured(c: CaptureProcess, ended: str) -> None:
    """The last line of a capture: how many packets, of what, and why it ended."""
    n = c.packets
    echo(f"{n if n is not None else '?'} packet{'' if n == 1 else 's'} captured on "
         f"{c.label} ({ended})", err=True)


def stdout_closed() -> bool:
    """Has the reader of this process's stdout (a pipe) gone?"""
    from ..traffic.capturerun import pipe_closed
    return pipe_closed(sys.stdout.fileno())


def find_lab(run: Optional[str]) -> str:
    """The lab to capture, as ``nslab watch`` finds it (``run`` if running,
    else the only one), counting the labs across machines controlled from
    here (:func:`nslab.runtime.running.pick`)."""
    labs = running_labs()
    if not labs and not run:
        raise InputError("no lab is running on this host: start one (nslab topo up pair); a "
                         "lab across machines is captured from the machine that controls it "
                         "(its `nslab topo up --hosts`) or on the host that has the node (ssh "
                         "HOST nslab capture TARGET -w - > file.pcapng)")
    return pick(run, "capture", "nslab capture TARGET RUN ...", labs).run


def remote_host(run: str, node: str) -> Optional[RemoteHost]:
    """Where ``node`` is, if lab ``run`` is controlled from here (a live
    controller's record lists its hosts); else None."""
    record = read_controller(run)
    if record is None or not run_is_live(record):
        return None
    from ..traffic.captureremote import host_of
    return host_of(record, run, node)


def capture_remote(host: RemoteHost, parsed: Target, run: str, out: str, *,
                   count: Optional[int], duration: Optional[float], text: Optional[str],
                   keep: cap.Keep, as_wire: bool, ring_mb: Optional[int]) -> None:
    """``nslab capture`` of a node on another host (``host``, a
    :class:`~nslab.traffic.captureremote.RemoteHost`): the same command run there
    through the lab's SSH connection, its pcapng streamed into ``out``."""
    from ..traffic import captureremote as rcap
    if ring_mb is not None:
        raise InputError(f"-C: {parsed.node} is on {host.dest}, and dumpcap writes a ring's "
                         "files itself, on the host that captures; use -w FILE or -w - here, "
                         f"or run the ring there (ssh {host.dest} nslab capture ... -C)")
    remote = rcap.remote_argv(host, parsed, count=count, duration=duration, filt=text,
                              keep=keep, as_wire=as_wire)
    keeps = keep.describe() + ("; segmentation offloads off there while it runs" if as_wire
                               else "")
    c, ended = run_capture(lambda fh: rcap.RemoteCapture(host, parsed, remote, stdout=fh),
                           rcap.RemoteCapture.wait_ready, run, out, to_file=True,
                           says=f"(lab {run}, over SSH)", text=text, keeps=keeps,
                           alive=lambda: run_is_live(read_controller(run)))
    if ended == "ended":
        if c.proc.popen.returncode != 0 and c.message():
            raise c.failure()  # e.g. the interface went away there
        ended = c.ended or ended
    say_captured(c, ended)
