"""``/metrics`` of ``nslab watch --web`` and ``--metrics``: a live lab's interface
counters for Prometheus, in its text format or OpenMetrics.

The values are the sampler's (:class:`nslab.traffic.webwatch.Watcher`): it reads every
namespace's counters once per interval, whatever the number of pages and
scrapers, and a scrape only formats its latest reading; a scrape never runs a
tool. Each interface value carries the time it was read, so a scraper's
``rate()`` divides by the time between two readings, not between two scrapes
(the reading a scrape gets is up to one interval old).

Every interface counter has the labels ``lab`` (the run id), ``node`` and
``interface``; the ``nslab_watch_*`` metrics describe the sampler itself
(``nslab_watch_samplers`` is 1 while it runs, ``nslab_watch_samples_total``
grows by one per reading, not per scrape). A link changed while the lab runs
(``nslab link set``) has the ``nslab_link_change_info`` series, labelled
``lab``, ``link`` and ``change`` (what was set, in words), and one gauge per
value set: ``nslab_link_down`` (1, with the ``node`` whose end is down),
``nslab_link_rate_bits_per_second``, ``nslab_link_delay_seconds``,
``nslab_link_jitter_seconds`` and ``nslab_link_loss_ratio``; a link reset
to its topology has none.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, FrozenSet, Iterator, Mapping, Optional, Protocol, Tuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector, CollectorRegistry

from .watch import Counters

if TYPE_CHECKING:
    from .linkset import RunTime

#: ``(counter of nslab.traffic.watch.parse_link_stats, family name, unit, help)``; a
#: counter's samples are named ``<family>_total``.
INTERFACE_METRICS: Tuple[Tuple[str, str, str, str], ...] = (
    ("rx_bytes", "nslab_interface_receive_bytes", "bytes",
     "Bytes the interface received (its kernel counter: Ethernet header included, no FCS)."),
    ("tx_bytes", "nslab_interface_transmit_bytes", "bytes",
     "Bytes the interface sent (its kernel counter: Ethernet header included, no FCS)."),
    ("rx_packets", "nslab_interface_receive_packets", "", "Packets the interface received."),
    ("tx_packets", "nslab_interface_transmit_packets", "", "Packets the interface sent."),
    ("rx_dropped", "nslab_interface_receive_drops", "",
     "Packets dropped on receive (the kernel's rx dropped counter)."),
    ("tx_dropped", "nslab_interface_transmit_drops", "",
     "Packets dropped on transmit (the kernel's tx dropped counter)."),
    ("rx_errors", "nslab_interface_receive_errors", "", "Receive errors of the interface."),
    ("tx_errors", "nslab_interface_transmit_errors", "", "Transmit errors of the interface."),
)
#: The labels of every interface counter.
LABELS = ("lab", "node", "interface")


@dataclass(frozen=True)
class Reading:
    """One reading of a lab's counters."""

    #: When the counters were read (Unix time, seconds): the sweep's end.
    time: float
    #: ``{node: {interface: counters}}`` (see :func:`nslab.traffic.watch.parse_link_stats`).
    counters: Dict[str, Counters]
    #: When each node's counters were read (Unix time), where known: what each
    #: of its values carries (a sweep of many namespaces, or a stall, puts the
    #: sweep's end well after an early node's reading).
    node_times: Dict[str, float] = field(default_factory=dict)
    #: What ``nslab link set`` changed on each link as the counters were read,
    #: by link name (``h1-s1``; see :class:`nslab.traffic.linkset.RunTime`).
    links: Mapping[str, "RunTime"] = field(default_factory=dict)


class Source(Protocol):
    """What the collector reads: the sampler's state (a :class:`nslab.traffic.webwatch.Watcher`)."""

    run: str
    interval: float
    reading: Optional[Reading]
    samples: int
    samplers: int
    streams: int


class LabCollector(Collector):
    """The lab's interface counters and the sampler's own state, from the
    sampler's latest reading (nothing is read at scrape time)."""

    def __init__(self, source: Source) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        src = self.source
        reading = src.reading
        for key, name, unit, doc in INTERFACE_METRICS:
            family = CounterMetricFamily(name, doc, labels=LABELS, unit=unit)
            if reading is not None:
                for node, intfs in sorted(reading.counters.items()):
                    for intf, c in sorted(intfs.items()):
                        family.add_metric([src.run, node, intf], _value(c, key),
                                          timestamp=reading.node_times.get(node, reading.time))
            yield family
        yield from _link_changes(src.run, reading.links if reading is not None else {})
        samplers = GaugeMetricFamily(
            "nslab_watch_samplers", "Samplers reading the lab's counters in this server: one, "
            "whatever the number of pages and scrapers.", labels=["lab"])
        samplers.add_metric([src.run], src.samplers)
        yield samplers
        samples = CounterMetricFamily(
            "nslab_watch_samples", "Readings of the lab's counters (one netlink dump per "
            "namespace each); scrapes add none.", labels=["lab"])
        samples.add_metric([src.run], src.samples)
        yield samples
        streams = GaugeMetricFamily("nslab_watch_event_streams",
                                    "Pages connected to the live page's event stream.",
                                    labels=["lab"])
        streams.add_metric([src.run], src.streams)
        yield streams
        interval = GaugeMetricFamily("nslab_watch_interval_seconds",
                                     "Seconds between two readings.", labels=["lab"],
                                     unit="seconds")
        interval.add_metric([src.run], src.interval)
        yield interval


#: ``(RunTime field, family name, unit, scale to the unit, help)`` of the
#: gauges of a link's run-time change.
LINK_GAUGES: Tuple[Tuple[str, str, str, float, str], ...] = (
    ("rate", "nslab_link_rate_bits_per_second", "", 1.0,
     "The rate set on the link while the lab runs (nslab link set --rate)."),
    ("delay_ms", "nslab_link_delay_seconds", "seconds", 1e-3,
     "The delay set on the link while the lab runs (nslab link set --delay)."),
    ("jitter_ms", "nslab_link_jitter_seconds", "seconds", 1e-3,
     "The jitter set on the link while the lab runs (nslab link set --jitter)."),
    ("loss_pct", "nslab_link_loss_ratio", "ratio", 1e-2,
     "The loss set on the link while the lab runs (nslab link set --loss), 0 to 1."),
)


def _link_changes(run: str, changes: Mapping[str, "RunTime"]) -> Iterator[Metric]:
    """The series of the links changed at run time (none for the others)."""
    changed = sorted((name, now) for name, now in changes.items() if not now.empty)
    info = InfoMetricFamily("nslab_link_change", "A link changed while the lab runs "
                            "(nslab link set): what was set, in words.", labels=["lab", "link"])
    down = GaugeMetricFamily("nslab_link_down", "1: the link was set down while the lab runs "
                             "(nslab link set --down), at the node named.",
                             labels=["lab", "link", "node"])
    gauges = [(key, scale, GaugeMetricFamily(name, doc, labels=["lab", "link"], unit=unit))
              for key, name, unit, scale, doc in LINK_GAUGES]
    for name, now in changed:
        info.add_metric([run, name], {"change": now.describe()})
        if now.down:
            down.add_metric([run, name, now.down], 1)
        for key, scale, family in gauges:
            value = getattr(now, key)
            if value is not None:
                family.add_metric([run, name], value * scale)
    yield info
    yield down
    for _, _, family in gauges:
        yield family


def _value(c: Dict[str, int], key: str) -> int:
    """A counter of ``c`` (0 when an older reading lacks it)."""
    return int(c.get(key, 0))


def registry(source: Source) -> CollectorRegistry:
    """A registry holding only the lab's collector (no process or platform metrics)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(LabCollector(source))
    return reg


def exposition(reg: CollectorRegistry, accept: Optional[str]) -> Tuple[bytes, str]:
    """``(body, content type)`` of a scrape: OpenMetrics when the ``Accept``
    header asks for it (``application/openmetrics-text``, as Prometheus does),
    else Prometheus's text format 0.0.4."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(reg), content_type


def sample_names() -> FrozenSet[str]:
    """Every sample name ``/metrics`` can expose (``..._total`` for counters,
    ``..._info`` for infos)."""
    class _Empty:
        run, interval, samples, samplers, streams = "", 1.0, 0, 0, 0
        reading: Optional[Reading] = None
    names = set()
    for family in LabCollector(_Empty()).collect():
        suffix = {"counter": "_total", "info": "_info"}.get(family.type, "")
        names.add(family.name + suffix)
    return frozenset(names)
