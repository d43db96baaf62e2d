"""What ``nslab bench`` reports as memory: the peak drop of MemAvailable."""
import sys
import time

from nslab.run.bench import PeakMemory


def _fake_meminfo(monkeypatch, values):
    """Make the module that defines PeakMemory read ``values`` in turn (the last one repeats)."""
    it = iter(values)
    last = [values[-1]]

    def read() -> int:
        last[0] = next(it, last[0])
        return last[0]
    monkeypatch.setattr(sys.modules[PeakMemory.__module__], "mem_available_kb", read)


def test_a_block_shorter_than_one_interval_is_still_measured(monkeypatch):
    # entry 1,000,000 KiB available; 600 KiB taken by the time the block ends
    _fake_meminfo(monkeypatch, [1_000_000, 999_400])
    with PeakMemory(interval=60.0) as peak:
        pass
    assert peak.peak_kb == 600


def test_the_peak_is_the_largest_drop_not_the_last(monkeypatch):
    _fake_meminfo(monkeypatch, [1_000_000, 999_000, 998_000, 999_500, 1_000_200])
    with PeakMemory(interval=0.001) as peak:
        time.sleep(0.1)
    assert peak.peak_kb == 2_000


def test_memory_freed_below_the_start_is_not_a_negative_cost(monkeypatch):
    _fake_meminfo(monkeypatch, [1_000_000, 1_000_500])
    with PeakMemory(interval=60.0) as peak:
        pass
    assert peak.peak_kb == 0
