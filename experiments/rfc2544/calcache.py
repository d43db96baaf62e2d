"""The virtual bed's calibration, kept between runs.

The virtual bed's "hardware" is a fixed thing: a kernel, a QEMU, an icount
shift, a scale and a target. Its calibration (the DUT's cost knob, u32
filters, :meth:`.calibration.Calibration.calibrate`) lands within 1 % of the
target each time, but not on the same count: five idle runs here found
153-157 filters, and the router's throughput, read on the bridge's count,
moved with it by 1.2 %. So the bed is calibrated once and the count kept,
keyed by everything that makes the bed what it is (:func:`key`); every later
run checks it with :data:`~.calibration.CAL_CHECK_READINGS` readings at the
kept count before it trusts it, and calibrates afresh when the check fails
or ``--recalibrate`` says so. The report says which it was.

The cache lives beside the bed's kernel (:func:`cache_dir`: the checkout's
``.cache/calibration``, or ``$NSLAB_CALIBRATION_CACHE``), not in a results
folder (which may come from anyone, and each ``nslab reproduce`` makes a new
one); still, an entry is parsed into :class:`Kept` (bounded numbers, a run
id, a short printable target) or ignored with a warning, is only used when
its key is this bed's, and is only written through
:func:`nslab.safeio.write_atomic` (no link is followed). Delete the folder,
or pass ``--recalibrate``, to calibrate afresh.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from typing import Any, Dict, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from nslab.errors import InputError

log = logging.getLogger(__name__)

#: Bumped when the calibration's method changes: a count kept by another
#: method is not this one's.
METHOD = 1
#: Overrides :func:`cache_dir`.
CACHE_ENV = "NSLAB_CALIBRATION_CACHE"
#: The largest cache file read.
MAX_BYTES = 64 * 1024


class Kept(BaseModel):
    """One kept calibration: what the run's provenance says of it, bounded."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    key: str = Field(pattern=r"^[0-9a-f]{64}$")
    filters: int = Field(ge=1, le=5000)
    capacity_fps: float = Field(gt=0, le=1e8)
    target_fps: float = Field(gt=0, le=1e8)
    target_ns_per_frame: float = Field(gt=0, le=1e9)
    ns_per_filter: float = Field(gt=0, le=1e9)
    target: str = Field(max_length=300)
    calibrated_on: str = Field(pattern=r"^(bridge|router)$")
    run: str = Field(pattern=r"^nl[0-9a-f]{4}$")
    at: float = Field(ge=0, le=1e11)
    steps: int = Field(ge=0, le=100)

    @field_validator("target")
    @classmethod
    def _printable(cls, v: str) -> str:
        if not v.isprintable():
            raise ValueError("not printable")
        return v

    @field_validator("capacity_fps", "target_fps", "target_ns_per_frame", "ns_per_filter", "at")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("not finite")
        return v


def key(bed: Dict[str, Any], cfg: Any) -> str:
    """The bed's identity, hashed: its kernel (and its options), QEMU, icount
    shift, memory and scale (:func:`.virtual.describe`), what sets its target and its links,
    and the calibration's method."""
    from nslab.store.published import load_published

    from .model import paper_knee
    ident = {"method": METHOD, "kernel": bed.get("kernel"), "qemu": bed.get("qemu"),
             "shift": bed.get("icount_shift"), "memory": bed.get("memory"),
             "vcpus": bed.get("vcpus"), "scale": bed.get("scale"),
             "kernel_args": bed.get("kernel_args"),
             "dut_fps_64": cfg.dut_fps_64, "dut_us_per_frame": cfg.dut_us_per_frame,
             "paper_knee": paper_knee(load_published("rfc2544")),
             "link_rate": str(cfg.link_rate), "mtu": cfg.mtu, "generator": cfg.generator}
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()


def cache_dir() -> str:
    """Where kept calibrations live: ``$NSLAB_CALIBRATION_CACHE``, else
    ``calibration`` beside the bed's kernel cache (:func:`nslab.hosts.vm.cache_dir`)."""
    from nslab.hosts import vm
    return os.environ.get(CACHE_ENV) or os.path.join(
        os.path.dirname(os.path.abspath(vm.cache_dir())), "calibration")


def path(k: str) -> str:
    """The cache file of key ``k``."""
    return os.path.join(cache_dir(), f"rfc2544-virtual-{k[:16]}.json")


def parse(data: Any, k: str, where: str = "") -> Optional[Kept]:
    """``data`` as a :class:`Kept` of key ``k``, or None (saying why in the log)."""
    try:
        kept = Kept.model_validate(data)
    except ValidationError as exc:
        log.warning("%s: not a kept calibration (%s): ignored", where or "calibration cache",
                    exc.errors()[0].get("msg", "invalid") if exc.errors() else "invalid")
        return None
    if kept.key != k:
        return None
    return kept


def load(k: str) -> Optional[Kept]:
    """The calibration kept for key ``k``, if any and sound."""
    from nslab.safeio import printable, read_bytes
    p = path(k)
    if not os.path.lexists(p):
        return None
    try:
        data = json.loads(read_bytes(p, MAX_BYTES))
    except (OSError, InputError, ValueError) as exc:
        log.warning("%s: unreadable (%s): calibrating afresh", printable(p), printable(exc))
        return None
    return parse(data, k, printable(p))


def keep(k: str, cal: Dict[str, Any], run: str) -> Optional[str]:
    """Keep the run's calibration ``cal`` (its provenance's) for key ``k``:
    only one that was confirmed by its check and measured in this run (a
    count taken from the cache and confirmed again stays as it was).
    Returns the file written, or None."""
    from nslab.safeio import make_dirs, write_atomic
    if not cal or cal.get("checked") is not True or cal.get("cached"):
        return None
    try:
        kept = Kept(key=k, filters=int(cal["filters"]), capacity_fps=float(cal["capacity_fps"]),
                    target_fps=float(cal["target_fps"]),
                    target_ns_per_frame=float(cal["target_ns_per_frame"]),
                    ns_per_filter=float(cal["ns_per_filter"]), target=str(cal["target"]),
                    calibrated_on=str(cal.get("calibrated_on", "bridge")), run=run,
                    at=time.time(), steps=len(cal.get("steps") or []))
    except (KeyError, TypeError, ValueError, ValidationError) as exc:
        log.warning("calibration not kept: %s", exc)
        return None
    make_dirs(cache_dir())
    return write_atomic(path(k), json.dumps(kept.model_dump(), indent=1) + "\n")
