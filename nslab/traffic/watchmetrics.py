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
grows by one per reading, not per scrape).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Iterator, Optional, Protocol, Tuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector, CollectorRegistry

from .watch import Counters

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
        samplers = GaugeMetricFamily(
            "nslab_watch_samplers", "Samplers reading the lab's counters in this server: one, "
            "whatever the number of pages and scrapers.", labels=["lab"])
        samplers.add_metric([src.run], src.samplers)
        yield samplers
        samples = CounterMetricFamily(
            "nslab_watch_samples", "Readings of the lab's counters (one ip call per namespace "
            "each); scrapes add none.", labels=["lab"])
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
    """Every sample name ``/metrics`` can expose (``..._total`` for counters)."""
    class _Empty:
        run, interval, samples, samplers, streams = "", 1.0, 0, 0, 0
        reading: Optional[Reading] = None
    names = set()
    for family in LabCollector(_Empty()).collect():
        names.add(f"{family.name}_total" if family.type == "counter" else family.name)
    return frozenset(names)
