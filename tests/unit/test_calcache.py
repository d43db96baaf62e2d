"""The virtual bed's kept calibration (experiments/rfc2544/calcache.py): its
key, what a cache file may hold, that a kept count is checked before it is
trusted, and what the report says of it. No root, no guest."""
import json
import os

import pytest

from nslab.experiments.rfc2544 import calcache, virtual
from nslab.experiments.rfc2544.calibration import CAL_CHECK_READINGS, Calibration
from nslab.experiments.rfc2544.config import Rfc2544Config

BED = {"bed": "virtual", "qemu": "QEMU emulator version 7.2.22", "accelerator": "tcg (no KVM)",
       "icount_shift": 3, "instructions_per_s": 125e6, "vcpus": 1, "memory": "1G",
       "kernel": "6.1.0-57-amd64", "scale": 0.05, "layout": "tester at FIFO"}

#: A calibration as a run's provenance keeps it (the fields calcache reads).
CAL = {"target_ns_per_frame": 302023.0, "target": "the paper's knee, 66,225 fps",
       "target_fps": 3311.0, "filters": 156, "capacity_fps": 3300.5,
       "ns_per_filter": 1942.3, "reading_s": 1.0, "steps": [{}, {}, {}],
       "checks": [{"ok": True}], "checked": True, "calibrated_on": "bridge"}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cal"
    monkeypatch.setenv(calcache.CACHE_ENV, str(d))
    return d


def test_the_key_changes_with_what_makes_the_bed_and_nothing_else():
    cfg = Rfc2544Config.preset("quick")
    k = calcache.key(BED, cfg)
    assert k == calcache.key(dict(BED, wall_s=99.0, host_tools={"x": "y"}), cfg)
    for field, value in (("kernel", "6.12.1"), ("qemu", "QEMU 9"), ("icount_shift", 2),
                         ("scale", 0.1), ("kernel_args", ["transparent_hugepage=never"])):
        assert calcache.key(dict(BED, **{field: value}), cfg) != k, field
    assert calcache.key(BED, cfg.model_copy(update={"dut_fps_64": 50_000.0})) != k
    assert calcache.key(BED, cfg.model_copy(update={"link_rate": "10Mbit"})) != k


def test_a_confirmed_calibration_is_kept_and_read_back(cache):
    k = "a" * 64
    where = calcache.keep(k, CAL, "nl1a2b")
    assert where and os.path.dirname(where) == str(cache)
    kept = calcache.load(k)
    assert kept is not None
    assert (kept.filters, kept.run, kept.steps, kept.calibrated_on) == (156, "nl1a2b", 3, "bridge")
    assert calcache.load("b" * 64) is None


@pytest.mark.parametrize("cal", [dict(CAL, checked=False), dict(CAL, cached={"run": "nl0001"}),
                                 {}])
def test_an_unconfirmed_or_already_kept_calibration_is_not_kept(cache, cal):
    assert calcache.keep("a" * 64, cal, "nl1a2b") is None
    assert not cache.exists() or not os.listdir(cache)


@pytest.mark.parametrize("change", [
    {"filters": 0}, {"filters": 99999}, {"capacity_fps": -1.0}, {"at": float("nan")},
    {"target": "x\x1b[2Jy"}, {"target": "t" * 301}, {"run": "../../etc"},
    {"calibrated_on": "ovs"}, {"key": "zz"},
])
def test_a_hostile_cache_entry_is_ignored(cache, change):
    k = "a" * 64
    calcache.keep(k, CAL, "nl1a2b")
    p = calcache.path(k)
    entry = dict(json.load(open(p)), **change)
    with open(p, "w") as f:
        f.write(json.dumps(entry).replace("NaN", "NaN"))
    assert calcache.load(k) is None


def test_a_cache_file_that_is_a_link_or_too_large_is_not_read(cache, tmp_path):
    k = "a" * 64
    calcache.keep(k, CAL, "nl1a2b")
    p = calcache.path(k)
    real = tmp_path / "elsewhere.json"
    os.replace(p, real)
    os.symlink(real, p)
    assert calcache.load(k) is None
    os.unlink(p)
    with open(p, "w") as f:
        f.write(" " * (calcache.MAX_BYTES + 1))
    assert calcache.load(k) is None


def test_keeping_replaces_a_link_instead_of_writing_through_it(cache, tmp_path):
    k = "a" * 64
    os.makedirs(cache)
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    os.symlink(victim, calcache.path(k))
    calcache.keep(k, CAL, "nl1a2b")
    assert victim.read_text() == "keep me"
    assert not os.path.islink(calcache.path(k))


def test_the_guest_is_offered_the_kept_count_unless_told_to_recalibrate(cache):
    cfg = Rfc2544Config.preset("quick")
    k = calcache.key(BED, cfg)
    assert virtual._kept(cfg, BED)["entry"] is None
    calcache.keep(k, CAL, "nl1a2b")
    offer = virtual._kept(cfg, BED)
    assert offer["key"] == k and offer["entry"]["filters"] == 156 and offer["used"] == "kept"
    again = virtual._kept(cfg.model_copy(update={"recalibrate": True}), BED)
    assert again["entry"] is None and again["used"] == "--recalibrate"
    assert virtual._kept(cfg.model_copy(update={"dut_cost": 10}), BED) is None


class _Store:
    def __init__(self, prov):
        self.prov = prov

    def provenance(self):
        return self.prov


class _Layout:
    shared = True


class _Bed(Calibration):
    """The calibration's logic over canned readings (no lab)."""

    def __init__(self, prov, fps):
        self.store, self.layout, self.fps, self.readings = _Store(prov), _Layout(), fps, []
        self.cfg = Rfc2544Config.preset("quick")
        self.scale = 0.05

    def line_fps(self, frame):
        return 7440.0

    def target_ns(self):
        return CAL["target_ns_per_frame"], CAL["target"]

    def _reading(self, n, offered):
        self.readings.append(n)
        return {"received_fps": self.fps, "offered_fps": offered, "loss_pct": 5.0,
                "dut_busy_pct": 99.0, "invalid": []}

    def _disturbed(self, m):
        return None

    def calibrate(self):
        return -1, {"fresh": True}


def _offer(k="a" * 64):
    kept = calcache.Kept(key=k, filters=156, capacity_fps=3300.5, target_fps=3311.0,
                         target_ns_per_frame=CAL["target_ns_per_frame"], ns_per_filter=1942.3,
                         target=CAL["target"], calibrated_on="bridge", run="nl1a2b", at=1.0,
                         steps=3)
    return {"setups": {}, "virtual_bed": {"calibration_kept": {"key": k,
                                                              "entry": kept.model_dump()}}}


def test_a_kept_count_that_holds_is_used_after_its_check():
    bed = _Bed(_offer(), fps=3305.0)
    n, cal = bed.knob()
    assert n == 156 and bed.readings == [156] * CAL_CHECK_READINGS
    assert cal["checked"] is True and cal["cached"]["run"] == "nl1a2b" and cal["steps"] == []
    assert cal["capacity_fps"] == 3305.0


def test_a_kept_count_that_does_not_hold_is_calibrated_afresh():
    bed = _Bed(_offer(), fps=3100.0)  # 6 % short of the target
    assert bed.knob() == (-1, {"fresh": True})
    assert bed.readings == [156] * CAL_CHECK_READINGS


def test_a_kept_count_for_another_target_or_a_mangled_offer_is_not_tried():
    prov = _offer()
    prov["virtual_bed"]["calibration_kept"]["entry"]["target_ns_per_frame"] = 150000.0
    bed = _Bed(prov, fps=3305.0)
    assert bed.knob() == (-1, {"fresh": True}) and bed.readings == []
    prov = _offer()
    prov["virtual_bed"]["calibration_kept"]["entry"]["filters"] = "156; rm -rf /"
    bed = _Bed(prov, fps=3305.0)
    assert bed.knob() == (-1, {"fresh": True}) and bed.readings == []


def test_the_report_says_the_calibration_was_kept_and_checked(tmp_path):
    import shutil

    from nslab.experiments.rfc2544.report import write_report
    from tests.conftest import data
    dst = tmp_path / "r"
    shutil.copytree(data("rfc2544_run"), dst)
    prov = json.load(open(dst / "provenance.json"))
    setup = next(iter(prov["setups"].values()))
    setup["dut_cost_filters"] = 156
    setup["calibration"] = dict(CAL, steps=[], cached={"run": "nl1a2b", "at": 1.0, "steps": 4,
                                                       "capacity_fps": 3300.5})
    with open(dst / "provenance.json", "w") as f:
        json.dump(prov, f)
    write_report(str(dst))
    md = open(dst / "report.md").read()
    assert "kept from run nl1a2b's calibration on this bed (4 steps, 3,300 fps then)" in md
    assert "at overload in its check" in md
