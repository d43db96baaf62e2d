"""The virtual bed: the RFC 2544 study run inside a QEMU guest whose clock is
its instruction count, so no host can disturb its answers.

The guest boots a Debian stock kernel (the one ``scripts/setup-kernel.sh``
unpacked for this machine's release) under QEMU's TCG with one vCPU and
``-icount shift=N,sleep=off``: every guest instruction takes 2^N ns of the
guest's time, and an idle guest jumps to its next timer. A slow, busy or
noisy host changes how long the run takes on the wall clock, never what the
guest measures. Inside, the same study runs the same runner on the same
topology (generator -- DUT -- sink in namespaces, the kernel's real bridge,
router, veth, qdisc and netfilter code), on one CPU (:data:`.bed.SHARED`),
and writes its records into the run directory as it goes; the report is
rendered here, from those files.

What the model is not: an instruction costs the same everywhere (no caches,
no memory bandwidth, no branch predictor), and there are no real NICs,
interrupts or DMA. The bed runs at ``virtual_scale`` of the paper's rates
(its links, its knee, its loads), so that the tester (generator and sink,
which share the vCPU at a real-time priority) can offer every load the
paper's did; :mod:`.claims` sets the paper's figures beside ours at that
scale.

Nothing is left behind: QEMU carries the run's tag (``nslab clean`` stops
it after a crash of this process), a journal names the run while the guest
lives, and a guest past its deadline is killed, saying so in one line.
"""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional

from nslab.errors import CapabilityError, LabError

from nslab.runtime.proc import TIMEOUT_SCALE_ENV

from .bed import GUEST_ENV

log = logging.getLogger(__name__)

#: Guest memory: the bed's three namespaces, Python and the tools.
MEMORY = "1G"
#: The guest kernel's own options. Debian's kernel makes every process's memory
#: a transparent huge page candidate, and its khugepaged wakes every 10 s of
#: the guest's time to collapse them: in one of five idle runs (2026-12-03) it
#: ran 22-123 ms in six of the study's eight points, at the DUT's normal
#: priority and holding the tester's memory, and that run's occupancies and
#: latencies at 2,000 fps moved by up to 2.6 points and 2.8x; in the other four
#: it ran only while the first point started. Without huge pages it never runs.
KERNEL_ARGS = ["transparent_hugepage=never"]
#: Where the guest's console, progress and log go, in the run directory.
GUEST_DIR = "virtual-bed"
#: Timeouts in the guest, times this (:data:`nslab.runtime.proc.TIMEOUT_SCALE_ENV`):
#: while the vCPU waits for a read of the host's files, its clock jumps from
#: timer to timer; measured here, `ip link show` took 0.7-2.5 s of the guest's
#: time and importing nslab 45-71 s (Debian 12's 6.1, shift 2). The host's
#: deadline (:func:`deadline_s`) still bounds the run.
GUEST_TIMEOUT_SCALE = 50


def instructions_per_s(shift: int) -> float:
    """Guest instructions per second of guest time at ``-icount shift=N``."""
    return 1e9 / (1 << shift)


def qemu_opts(shift: int) -> List[str]:
    """The QEMU options of the bed's clock: one instruction per 2^shift ns,
    and an idle guest jumps to its next timer (``sleep=off``) instead of
    waiting for the host's clock. icount runs the vCPU in one thread (no
    multi-threaded TCG), which is why the guest has one vCPU."""
    return ["-icount", f"shift={int(shift)},sleep=off"]


def qemu_version() -> str:
    """``qemu-system-x86_64 --version``'s first line (empty if it fails)."""
    try:
        out = subprocess.run(["qemu-system-x86_64", "--version"], capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.splitlines()[0].strip() if out else ""


def require() -> str:
    """The kernel the bed boots, or :class:`CapabilityError` in one line naming
    the command that sets it up."""
    from nslab.hosts import vm
    try:
        vm.require()
        return vm.find_kernel()
    except CapabilityError as exc:
        raise CapabilityError(f"the virtual RFC 2544 bed needs QEMU and a stock kernel: {exc} "
                              "(`make demo` sets both up; or run with --bed real)") from None


def deadline_s(cfg: Any) -> float:
    """How long the guest may run before it is killed: four times the run's
    time budget and five minutes for the boot, or six hours without a budget."""
    budget = getattr(cfg, "budget_s", None)
    return 4 * float(budget) + 300 if budget else 6 * 3600.0


def kernel_hz(vmlinuz: str) -> Optional[int]:
    """``CONFIG_HZ`` of the kernel ``vmlinuz``, from the ``config-<release>``
    beside it (None: no such file or line). Its tick is what the tester's
    clock drifts against (:func:`.model.tester_clock_offset`)."""
    from nslab.hosts import vm
    path = os.path.join(os.path.dirname(vmlinuz), f"config-{vm.kernel_release(vmlinuz)}")
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("CONFIG_HZ="):
                    return int(line.split("=", 1)[1])
    except (OSError, ValueError):
        pass
    return None


def describe(cfg: Any, kernel: str) -> Dict[str, Any]:
    """The virtual bed, as a run's provenance keeps it and its report says it."""
    from nslab.hosts import vm
    return {"bed": "virtual", "qemu": qemu_version(), "accelerator": "tcg (no KVM)",
            "icount_shift": cfg.vcpu_shift,
            "instructions_per_s": instructions_per_s(cfg.vcpu_shift),
            "vcpus": 1, "memory": MEMORY, "kernel": vm.kernel_release(kernel),
            "kernel_args": list(KERNEL_ARGS),
            "kernel_hz": kernel_hz(kernel), "scale": cfg.virtual_scale,
            "layout": "generator, sink and the sink's NAPI thread at SCHED_FIFO 50; the DUT's "
                      "receive work in its ingress NAPI thread at the normal priority"}


def guest(cfg: Any, run_dir: str, run_id: str, kernel: str) -> Any:
    """The guest that runs the study on ``run_dir`` (shared read-write)."""
    from nslab.hosts import vm
    out = os.path.join(run_dir, GUEST_DIR)
    # -I: nothing from the current directory or the environment is imported;
    # -S and pyboot: the same packages found without site's start-up
    cmd = (f"{sys.executable} -I -S {vm.PYBOOT} nslab.experiments.rfc2544.inguest "
           f"--run-dir {run_dir} --run-id {run_id} 2>{os.path.join(out, 'progress.log')}")
    return vm.Guest("rfc2544", cmd, out, rwdirs=[run_dir], cpus=1, memory=MEMORY,
                    timeout=deadline_s(cfg), kernel=kernel, kvm=False,
                    cwd="/", env={GUEST_ENV: "1", "PYTHONDONTWRITEBYTECODE": "1",
                                  # a read of the host's files moves the guest's clock:
                                  # its commands' timeouts are that much longer
                                  TIMEOUT_SCALE_ENV: str(GUEST_TIMEOUT_SCALE)},
                    qemu_opts=qemu_opts(cfg.vcpu_shift), run_tag=run_id, hold=HOLD,
                    kernel_args=list(KERNEL_ARGS),
                    # its Python's imports from the guest's RAM after the first
                    cached=vm.code_dirs(sys.executable),
                    # the normal policy when it runs alone: its clock counts
                    # instructions, so a neighbour moves only its wall time, and
                    # at SCHED_IDLE one busy loop beside it left it 0.3 % of a
                    # CPU; nslab reproduce runs it at SCHED_IDLE beside the other
                    # studies (inherited), and at the normal policy after them
                    idle=False)


#: What the guest holds in its RAM before the study starts (:func:`nslab.hosts.vm.hold_script`):
#: the programs a lab and its trials start, hundreds of times in a run (two per
#: trial: ``ip netns exec ... nslab-pktgen``; nslab-pktgen itself is copied to
#: the guest's RAM by :func:`.inguest.warm_up`), and this Python.
HOLD = ["ip", "tc", "ethtool", "taskset", "chrt", "tee", "cat", "sh", "find", sys.executable]


#: The host's clock for the guest: seconds since the guest started, written
#: here twice a second (the guest's own clock counts instructions; the time
#: budget between sampling rounds and the progress estimates are the user's).
WALL = "wall"


class _Relay(threading.Thread):
    """Copies the guest's progress lines to this terminal as they come, and
    keeps :data:`WALL` current for it."""

    def __init__(self, path: str, enabled: bool) -> None:
        super().__init__(name="virtual-bed-progress", daemon=True)
        self.path, self.enabled = path, enabled
        self.done = threading.Event()
        self.t0 = time.monotonic()

    def run(self) -> None:
        from nslab.safeio import printable, write_atomic
        pos = 0
        wall = os.path.join(os.path.dirname(self.path), WALL)
        while True:
            last = self.done.is_set()
            try:
                write_atomic(wall, f"{time.monotonic() - self.t0:.1f}\n")
            except OSError:
                pass
            try:
                with open(self.path, errors="replace") as f:
                    f.seek(pos)
                    chunk = f.read(1 << 16)
                    # whole lines only (a line may be half written)
                    end = chunk.rfind("\n") + 1 if not last else len(chunk)
                    pos += len(chunk[:end].encode())
                    text = chunk[:end]
            except OSError:
                text = ""
            if text and self.enabled:
                took = time.monotonic() - self.t0
                for line in text.splitlines():
                    sys.stderr.write(f"[guest {took:4.0f} s] {printable(line)}\n")
                sys.stderr.flush()
            if last:
                return
            self.done.wait(0.5)


def run(cfg: Any, store: Any, run_id: str, progress: bool = True) -> None:
    """Run the study in the virtual bed on ``store``'s run directory: boot the
    guest, relay its progress, wait for it (or its deadline), and record the
    bed in the run's provenance. Raises :class:`LabError` in one line when the
    guest fails or overruns; the records it wrote stay."""
    from nslab.hosts import vm
    from nslab.runtime.clean import remove_journal, write_journal
    from nslab.runtime.proc import process_start_time
    kernel = require()
    run_dir = os.path.abspath(store.path)
    info = describe(cfg, kernel)
    # the guest runs this machine's programs and checkout (its root is this
    # one, read-only): it records their versions as asked here, once
    from nslab.runtime.provenance import tool_facts
    info["host_tools"] = tool_facts()
    info["calibration_kept"] = kept = _kept(cfg, info)
    _record(store, info)
    g = guest(cfg, run_dir, run_id, kernel)
    os.makedirs(g.out_dir, exist_ok=True)
    progress_log = os.path.join(g.out_dir, "progress.log")
    if os.path.lexists(progress_log):
        os.unlink(progress_log)
    if progress:
        sys.stderr.write(f"virtual bed: {info['kernel']} under QEMU TCG, 1 vCPU, icount shift "
                         f"{cfg.vcpu_shift} ({info['instructions_per_s'] / 1e6:.0f} M "
                         f"instructions per guest second), rates at {cfg.virtual_scale:g} of "
                         f"the paper's; booting (deadline {deadline_s(cfg):.0f} s)\n")
        sys.stderr.flush()
    # While the guest lives, a journal names this run, so that `nslab clean` stops
    # QEMU (it carries the run's tag) if this process dies without doing so.
    write_journal(run_id, {"run": run_id, "pid": os.getpid(),
                           "pid_start": process_start_time(os.getpid()), "created": time.time(),
                           "topology": "rfc2544 virtual bed", "restore": []})
    relay = _Relay(progress_log, progress)
    t0 = time.monotonic()
    try:
        relay.start()
        res = vm.run(g)
    finally:
        relay.done.set()
        relay.join(timeout=5)
        remove_journal(run_id)
    info["wall_s"] = round(time.monotonic() - t0, 1)
    _record(store, info)
    if res.ok and kept is not None:
        _keep(store, str(kept["key"]), run_id)
    if res.timed_out:
        raise LabError(f"virtual bed: the guest ran past its deadline ({deadline_s(cfg):.0f} s) "
                       f"and was stopped; the records it wrote stay in {run_dir} (console: "
                       f"{os.path.join(g.out_dir, 'rfc2544.console.log')})")
    if not res.ok:
        tail = _last_words(progress_log, res.console)
        how = (f"ended with exit {res.returncode}" if res.returncode is not None
               else "stopped: its kernel died while booting")
        raise LabError(f"virtual bed: the guest's run {how}"
                       + (f": {tail}" if tail else "") + f" (console: "
                       f"{os.path.join(g.out_dir, 'rfc2544.console.log')})")


def _kept(cfg: Any, info: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """What the guest is told of the calibration kept for this bed
    (:mod:`.calcache`): its key, and the entry unless there is none or
    ``--recalibrate`` (or a given knob) says not to use it. None: nothing to
    keep either (the knob is given)."""
    from . import calcache
    if cfg.dut_cost is not None:
        return None
    k = calcache.key(info, cfg)
    entry = None if cfg.recalibrate else calcache.load(k)
    return {"key": k, "file": calcache.path(k),
            "entry": entry.model_dump() if entry is not None else None,
            "used": "kept" if entry is not None else
                    ("--recalibrate" if cfg.recalibrate else "none kept")}


def _keep(store: Any, k: str, run_id: str) -> None:
    """Keep the run's calibration for the next run on this bed, if it made a
    fresh one and it was confirmed."""
    from . import calcache
    from nslab.errors import InputError
    setups = store.provenance().get("setups") or {}
    cal = next((s.get("calibration") for s in setups.values()
                if isinstance(s, dict) and s.get("calibration")), None)
    if not isinstance(cal, dict):
        return
    try:
        where = calcache.keep(k, cal, run_id)
    except (OSError, InputError) as exc:
        log.warning("the calibration was not kept: %s", exc)
        return
    if where:
        log.info("calibration kept for the next run on this bed: %s", where)


def _record(store: Any, info: Dict[str, Any]) -> None:
    prov = store.provenance()
    prov["virtual_bed"] = info
    store.write_provenance(prov)


def _last_words(progress_log: str, console: str) -> str:
    """The guest run's last line of complaint (its stderr, else its console)."""
    from nslab.safeio import printable
    lines: List[str] = []
    try:
        with open(progress_log, errors="replace") as f:
            lines = [x.strip() for x in f.read()[-4000:].splitlines() if x.strip()]
    except OSError:
        pass
    lines = lines or [x.strip() for x in console[-4000:].splitlines() if x.strip()]
    return printable(lines[-1])[:300] if lines else ""


def copy_guest_log(src: str, run_dir: str) -> Optional[str]:
    """The guest's own log (kept on its tmpfs while it measured) into the run
    directory, when the run ends."""
    if not os.path.isfile(src):
        return None
    dst = os.path.join(run_dir, GUEST_DIR, "guest.log")
    shutil.copyfile(src, dst)
    return dst
