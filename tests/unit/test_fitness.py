"""`nslab doctor`'s word on RFC 2544 (no root): the speed probe's count of
slow readings, and each bed's line judged by the study's own rule."""
from types import SimpleNamespace

import pytest

from nslab.cmdline import fitness
from nslab.errors import InputError
from nslab.traffic import speed
from nslab.traffic.speed import Steadiness, steadiness


class Watch:
    """A speed watch whose readings are given (ms per CPU, one dict a round)."""

    def __init__(self, rounds):
        self.cpus = [0, 1]
        self.fastest = {0: float("inf"), 1: float("inf")}
        self.rounds = iter(rounds)

    def read(self):
        got = next(self.rounds)
        for c, ms in got.items():
            self.fastest[c] = min(self.fastest[c], ms)
        return got


def fake_clock(step):
    t = [0.0]

    def clock():
        t[0] += step
        return t[0]
    return clock


def test_steadiness_counts_rounds_with_a_cpu_over_the_threshold_against_its_fastest():
    rounds = [{0: 2.0, 1: 2.0}, {0: 2.1, 1: 3.0}, {0: 4.0, 1: 2.0}, {0: 2.0, 1: 2.1},
              {0: 2.0, 1: 2.0}]
    got = steadiness([0, 1], seconds=0.45, threshold_pct=10.0, watch=Watch(rounds),
                     clock=fake_clock(0.1), sleep=lambda s: None)
    # a first round, then one while the clock (0.2, 0.3, 0.4, 0.5) is before 0.55
    assert got.rounds == 5
    # judged against each CPU's fastest in the probe (2.0 ms): 3.0 and 4.0 are
    # over 10 % slower, 2.1 is not
    assert got.slow == 2 and got.worst_pct == pytest.approx(100.0)
    assert got.slow_share == pytest.approx(0.4)


def test_left_out_is_a_try_disturbed_at_either_end_and_every_rerun():
    s = Steadiness([0, 1], 3.0, rounds=10, slow=1, worst_pct=40.0, threshold_pct=10.0)
    per_try = 1 - 0.9 ** 2
    assert s.left_out(0) == pytest.approx(per_try)
    assert s.left_out(2) == pytest.approx(per_try ** 3)
    assert Steadiness([0], 3.0, 0, 0, 0.0, 10.0).left_out(2) == 0.0


class Study:
    """The registered study's shape: a Config with presets, needs()."""

    class Config:
        def __init__(self, bed):
            self.bed, self.slowdown_pct, self.interference_reruns = bed, 10.0, 2

        @classmethod
        def preset(cls, name, bed="virtual"):
            return cls(bed)

    refuse = None

    def needs(self, cfg):
        if self.refuse and cfg.bed in self.refuse:
            raise InputError(self.refuse[cfg.bed])
        return ["htb"] if cfg.bed == "real" else []


@pytest.fixture
def both_cpus(monkeypatch):
    monkeypatch.setattr(fitness.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(fitness, "_virtual_here", lambda: "QEMU and the stock kernel 6.1 are here")


def probe_giving(slow, rounds=20, worst=60.0):
    seen = {}

    def probe(cpus, seconds, threshold_pct):
        seen.update(cpus=cpus, threshold=threshold_pct)
        return Steadiness(cpus, seconds, rounds, slow, worst, threshold_pct)
    return probe, seen


def test_the_default_bed_comes_first_and_a_steady_host_is_fit_for_the_real_bed(both_cpus):
    probe, seen = probe_giving(slow=0, worst=3.0)
    lines = fitness.rfc2544({}, Study, probe=probe)
    assert [x.what for x in lines] == ["rfc2544 on the virtual bed (its default)",
                                      "rfc2544 on the real bed (--bed real)"]
    assert all(x.ok for x in lines)
    assert seen == {"cpus": [0, 1], "threshold": 10.0}  # the study's own slowdown_pct
    assert "at least 0 % of trials would be left out" in lines[1].why


def test_a_host_slow_most_of_the_time_is_unfit_for_the_real_bed_and_says_what_to_use(both_cpus):
    # 11 of 20 readings slow: a try is disturbed 80 % of the time, left out
    # (with its 2 re-runs) 51 % of the time
    probe, _ = probe_giving(slow=11)
    real = fitness.rfc2544({}, Study, probe=probe)[1]
    assert not real.ok
    assert "in 11 of 20 readings (at worst 60 %)" in real.why
    assert "at least 51 % of trials would be left out; use the virtual bed" in real.why


def test_a_missing_kernel_feature_or_refused_bed_is_said_and_nothing_probed(both_cpus):
    probe, seen = probe_giving(slow=0)
    found = {"htb": SimpleNamespace(ok=False)}
    real = fitness.rfc2544(found, Study, probe=probe)[1]
    assert not real.ok and real.why == "the kernel lacks htb (above)" and not seen

    class NoQemu(Study):
        refuse = {"virtual": "the virtual bed needs qemu-system-x86_64"}
    virtual = fitness.rfc2544({}, NoQemu, probe=probe)[0]
    assert not virtual.ok and virtual.why == "the virtual bed needs qemu-system-x86_64"


def test_cpus_not_this_process_s_are_said(monkeypatch):
    monkeypatch.setattr(fitness.os, "sched_getaffinity", lambda pid: {0})
    monkeypatch.setattr(fitness, "_virtual_here", lambda: "here")
    probe, seen = probe_giving(slow=0)
    real = fitness.rfc2544({}, Study, probe=probe)[1]
    assert not real.ok and "are not all this process's to use" in real.why and not seen


def test_the_registered_study_gives_the_thresholds(both_cpus):
    """With no study given, the registry's rfc2544 is judged (never imported
    from the current directory), its default preset's bed first."""
    probe, seen = probe_giving(slow=0)
    lines = fitness.rfc2544({}, probe=probe)
    from nslab.run.registry import studies
    cfg = studies()["rfc2544"].Config.preset("default")
    assert lines[0].what.startswith(f"rfc2544 on the {cfg.bed} bed (its default)")
    if "threshold" in seen:
        assert seen["threshold"] == cfg.slowdown_pct


def test_speed_module_keeps_probe_steps_small():
    """A 3 s probe every 50 ms keeps a CPU busy well under a second: each
    reading is PROBE_TRIES loops of PROBE_STEPS steps."""
    assert speed.PROBE_TRIES * speed.PROBE_STEPS <= 200_000
