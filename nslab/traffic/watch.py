"""``nslab watch [RUN]``: live per-link rates of a running lab in the terminal.

The lab is found through its run journal (``/run/nslab/<run>.json``): with no
RUN and exactly one live lab, that one. Every interval, one netlink dump in
each namespace of the run reads every interface's counters (no process); the
table shows bits/s and packets/s per direction and drops, refreshed in place
with ``rich.live``.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, NamedTuple, Optional, Tuple

from ..runtime import clean, running
from ..runtime.proc import run as run_cmd
from ..model.shaping import format_rate
from .nlstats import sweep

if TYPE_CHECKING:  # pragma: no cover
    from rich.table import Table

Counters = Dict[str, Dict[str, int]]


@dataclass
class Rate:
    """One interface's rates between two samples."""

    node: str
    intf: str
    rx_bps: float
    tx_bps: float
    rx_pps: float
    tx_pps: float
    drops: int


def find_run(run: Optional[str]) -> str:
    """The run to watch: ``run`` if it has nodes on this host, else the only
    lab that has; one line naming every running lab otherwise
    (:func:`nslab.runtime.running.pick`)."""
    return running.pick(run, "watch", "nslab watch RUN", running.local_labs()).run


def namespaces(run: str) -> Dict[str, str]:
    """``{node: namespace}`` of a run's namespaces."""
    out = run_cmd(["ip", "-j", "netns", "list"], check=False).stdout or "[]"
    prefix = f"{run}-"
    return {ns["name"][len(prefix):]: ns["name"] for ns in json.loads(out)
            if ns.get("name", "").startswith(prefix)}


def parse_link_stats(text: str) -> Counters:
    """``ip -s -j link`` output -> ``{intf: {rx_bytes, tx_bytes, rx_packets,
    tx_packets, rx_dropped, tx_dropped, rx_errors, tx_errors, drops}}``
    (loopback left out; ``drops`` is both directions' drops)."""
    stats: Dict[str, Dict[str, int]] = {}
    for link in json.loads(text or "[]"):
        name = link.get("ifname", "")
        st = link.get("stats64") or link.get("stats") or {}
        if name and st:
            stats[name.split("@")[0]] = {f"{d}_{k}": int(st.get(d, {}).get(k, 0))
                                         for d in ("rx", "tx")
                                         for k in ("bytes", "packets", "dropped", "errors")}
    return counters_of(stats)


class Sample(NamedTuple):
    """One reading of every namespace: when it ended (``time.monotonic()``),
    ``{node: counters}``, and when each node's counters were read
    (``node_times``, monotonic seconds: the midpoint of its netlink dump,
    within tens of microseconds). A scraper's rate needs each value with its
    own time: the sweep's end is up to the whole sweep, or a stall, later
    than a node's reading."""

    time: float
    counters: Dict[str, Counters]
    node_times: Dict[str, float] = {}


def counters_of(stats: Dict[str, Dict[str, int]]) -> Counters:
    """:func:`nslab.traffic.nlstats.sweep`'s counters of one namespace in
    the form :func:`parse_link_stats` gives (loopback left out; ``drops``
    is both directions' drops)."""
    out: Counters = {}
    for name, st in stats.items():
        if name == "lo":
            continue
        c = {k: int(st.get(k, 0)) for k in ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets",
                                             "rx_dropped", "tx_dropped", "rx_errors", "tx_errors")}
        c["drops"] = c["rx_dropped"] + c["tx_dropped"]
        out[name] = c
    return out


def sample(nss: Dict[str, str]) -> Sample:
    """One reading of every namespace (:class:`Sample`), read over netlink
    from inside each (:func:`nslab.traffic.nlstats.sweep`); a namespace
    that is gone is left out."""
    nodes = list(nss)
    got: Dict[str, Counters] = {}
    times: Dict[str, float] = {}
    for node, read in zip(nodes, sweep([nss[n] for n in nodes])):
        if read is not None:
            when, _spread, stats = read
            times[node] = when
            got[node] = counters_of(stats)
    return Sample(time.monotonic(), got, times)


def rates(a: Tuple[Any, ...], b: Tuple[Any, ...]) -> List[Rate]:
    """Rates between two samples, per node and interface (new ones count from b)."""
    dt = b[0] - a[0]
    out: List[Rate] = []
    if dt <= 0:
        return out
    for node, intfs in sorted(b[1].items()):
        for intf, c in sorted(intfs.items()):
            p = a[1].get(node, {}).get(intf, c)
            out.append(Rate(node, intf,
                            8 * max(0, c["rx_bytes"] - p["rx_bytes"]) / dt,
                            8 * max(0, c["tx_bytes"] - p["tx_bytes"]) / dt,
                            max(0, c["rx_packets"] - p["rx_packets"]) / dt,
                            max(0, c["tx_packets"] - p["tx_packets"]) / dt,
                            max(0, c["drops"] - p["drops"])))
    return out


def table(run: str, rows: List[Rate]) -> Table:
    """A rich table of ``rows``."""
    from rich.table import Table
    from rich.text import Text

    # names are Text, never read as rich markup
    t = Table(title=Text(f"nslab watch {run}  (Ctrl-C to stop)"))
    for col in ("node", "interface", "rx", "tx", "rx pkt/s", "tx pkt/s", "drops"):
        t.add_column(col, justify="left" if col in ("node", "interface") else "right")
    for r in rows:
        style = "bold green" if max(r.rx_bps, r.tx_bps) > 1e6 else None
        t.add_row(Text(r.node), Text(r.intf), format_rate(r.rx_bps), format_rate(r.tx_bps),
                  f"{r.rx_pps:,.0f}", f"{r.tx_pps:,.0f}", str(r.drops) if r.drops else "",
                  style=style)
    return t


def watch(run: Optional[str] = None, interval: float = 1.0, count: Optional[int] = None) -> None:
    """Show live rates until Ctrl-C (or ``count`` refreshes), or the lab goes."""
    from rich.live import Live

    run = find_run(run)
    nss = namespaces(run)
    prev = sample(nss)
    done = 0
    with Live(table(run, []), refresh_per_second=4, screen=False) as live:
        while count is None or done < count:
            time.sleep(interval)
            if not clean.run_is_live(clean.read_journal(run)):
                live.console.print(f"lab {run} is gone", markup=False)
                return
            cur = sample(nss)
            live.update(table(run, rates(prev, cur)))
            prev = cur
            done += 1
