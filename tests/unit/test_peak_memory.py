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
    with PeakMemory(interval=60.0, settle_s=0) as peak:
        pass
    assert peak.peak_kb == 600


def test_the_peak_is_the_largest_drop_not_the_last(monkeypatch):
    _fake_meminfo(monkeypatch, [1_000_000, 999_000, 998_000, 999_500, 1_000_200])
    with PeakMemory(interval=0.001, settle_s=0) as peak:
        time.sleep(0.1)
    assert peak.peak_kb == 2_000


def test_memory_freed_below_the_start_is_not_a_negative_cost(monkeypatch):
    _fake_meminfo(monkeypatch, [1_000_000, 1_000_500])
    with PeakMemory(interval=60.0, settle_s=0) as peak:
        pass
    assert peak.peak_kb == 0


def test_memory_freed_by_others_during_the_block_does_not_hide_what_it_took(monkeypatch):
    # an earlier lab's namespaces are freed while the block runs (+3,000 KiB),
    # then the block takes 1,200 KiB: measured from the highest reading
    _fake_meminfo(monkeypatch, [1_000_000, 1_002_000, 1_003_000, 1_001_800, 1_002_500])
    with PeakMemory(interval=0.001, settle_s=0) as peak:
        time.sleep(0.1)
    assert peak.peak_kb == 1_200


def test_the_base_is_taken_once_available_memory_has_settled(monkeypatch):
    # rising by 2,000 KiB per reading (a teardown being freed), then steady
    # (the last value repeats); the block then takes 700 KiB
    rising = [1_000_000 + 2_000 * i for i in range(6)]
    _fake_meminfo(monkeypatch, rising)
    with PeakMemory(interval=60.0, settle_s=5.0) as peak:
        _fake_meminfo(monkeypatch, [rising[-1] - 700])
    assert peak.peak_kb == 700
    # without settling, the base is the first (lowest) reading: the block's
    # 700 KiB are hidden by the 10,000 KiB freed before it
    _fake_meminfo(monkeypatch, rising)
    with PeakMemory(interval=60.0, settle_s=0) as unsettled:
        _fake_meminfo(monkeypatch, [rising[-1] - 700])
    assert unsettled.peak_kb == 0
