#!/usr/bin/env python3
"""The stock-kernel tier (`make test-kernel`).

1. For each stock kernel unpacked by scripts/setup-kernel.sh (``--kernels``:
   Debian 12's 6.1, ``bookworm``, and Debian 13's 6.12, ``trixie``), one QEMU
   guest boots it and runs, on this very checkout, every test marked
   ``kernel`` with ``NSLAB_STOCK_KERNEL=1`` (a missing kernel feature fails
   there). The last kernel's guest also runs the tests marked ``guest`` (flows
   that run on the host too: labs killed and cleaned; FRR's in a second guest
   of that kernel with two vCPUs, once the first guests have ended): with the
   default ``bookworm,trixie``, on the kernel and userland a user installs
   today. The uplink's flows run in the first kernel's guest instead
   (:data:`FIRST`: the two guests then take about as long). The kernels' guests run side by side, one vCPU each. Debian 12's
   kernel runs on this machine's userland (shared read-only); Debian 13's on
   the Debian 13 root of scripts/setup-debian13.sh (its Python 3.13 venv
   ``.venv-debian13``, its FRR, OVS and iperf), as a user who installs Debian
   13 has them together.
2. On the host, the tests marked ``vm`` start one pair of guests joined by
   emulated NICs (real drivers) for the two-box flows and the lab across
   both (tests/vm/conftest.py):
   once, on the first kernel (they test NIC drivers and flows across boxes,
   not what changes between 6.1 and 6.12 for nslab).

So each kernel runs its features' tests and one of the two sets of flows: a
flow run again on both kernels would cost ~5 min more under TCG, and CI has
its time limit. Every process in a guest finds matplotlib's
font cache in ``/tmp/nslab-mpl`` (``nslab.hosts.vm.GUEST_ENV``: ``/root`` is
read-only there; without it, each process that plots builds the cache again,
~8 s under TCG).

Pytest's result, its JUnit XML and each guest's serial console are kept in
``results/kernel-tier/<time>/`` (``guest-<kernel>`` for each kernel). The
last lines printed sum up every part: how it ended, its counts, and each test
that failed with its message. Exit status: non-zero if any part failed.
"""
from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiers  # noqa: E402 - scripts/tiers.py, beside this script
sys.path.insert(0, os.path.join(ROOT, "tests", "vm"))
from guest_hold import TIER_HOLD  # noqa: E402 - tests/vm/guest_hold.py
import threading  # noqa: E402

PRINT = threading.Lock()
#: Kernels the guest tier boots by default (links made by setup-kernel.sh).
KERNELS = "bookworm,trixie"
#: vCPUs per kernel's guest: one each, so the two guests side by side are two
#: TCG threads on this 2-core machine (with Debian 13's at two, the pair took
#: 918 s in CI instead of the ~660 s of the longer alone).
VCPUS = "bookworm=1,trixie=1"
#: Test modules of the ``guest`` flows that run apart, in a guest of their own
#: with LATE_VCPUS vCPUs once the kernels' guests have ended (both host CPUs
#: free): the FRR flows, whose ten daemons converged in 31.4 s on one vCPU
#: under TCG (the test allows 30; on two, well within).
LATE = ("tests/integration/test_frr.py",)
LATE_VCPUS = 2
#: How many more times a guest is booted when its kernel died before its init
#: ran (so no test ran: :attr:`nslab.hosts.vm.GuestResult.died_booting`): see
#: :func:`guest_tier`.
BOOT_RETRIES = 1
#: Test modules of the ``guest`` flows that run in the first kernel's guest
#: (Debian 12's), not the last's: the two guests run side by side, and the
#: pair takes as long as the longer. In a run here Debian 12's tests took
#: 263 s and Debian 13's 455 s (the uplink's 93 s among them).
FIRST = ("tests/integration/test_uplink.py",)
#: Userlands other than this machine's, by kernel: (guest root, venv in the checkout,
#: that root's private copy of the checkout's .cache), as scripts/in-debian13.sh mounts them.
D13_ROOT = os.environ.get("NSLAB_DEBIAN13_ROOT", os.path.join(ROOT, ".cache", "debian13"))
USERLANDS = {"trixie": (D13_ROOT, ".venv-debian13",
                        os.path.join(D13_ROOT, "var", "cache", "nslab-repo"))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "kernel-tier",
                                                  time.strftime("%Y%m%d-%H%M%S")))
    ap.add_argument("--timeout", type=float, default=1200, help="guest tier hard limit, s")
    ap.add_argument("--only", choices=["guest", "vm", "all"], default="all")
    ap.add_argument("--kernels", default=os.environ.get("KERNEL_DISTS", KERNELS),
                    help="comma-separated kernels for the guest tier (links in .cache/kernel; "
                         f"default {KERNELS}); the two-box tier runs on the first")
    ap.add_argument("--vcpus", default=os.environ.get("GUEST_VCPUS", VCPUS),
                    help="vCPUs of each kernel's guest, as kernel=N,... or N for every one "
                         f"(default {VCPUS}: the kernels' guests run side by side)")
    ap.add_argument("--skip", action="append", default=[],
                    help="a tests/vm module the two-box part leaves out (run elsewhere)")
    ap.add_argument("--one-by-one", action="store_true",
                    help="the kernels' guests one after the other instead of side by side")
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = ap.parse_args()
    from nslab.hosts import vm
    vm.require()
    kernels = [k for k in args.kernels.split(",") if k]
    vmlinuz = {k: vm.find_kernel(name=k) for k in kernels}
    os.makedirs(args.out, exist_ok=True)
    compile_checkout(kernels if args.only in ("guest", "all") else kernels[:1])
    for k in kernels:
        info = vm.describe(vmlinuz[k])
        print(f"stock-kernel tier: {k}: kernel {info['kernel']}, {info['accelerator']}, "
              f"userland {USERLANDS[k][0] if k in USERLANDS else 'this machine'}", flush=True)
    print(f"stock-kernel tier: results in {args.out}", flush=True)
    rc = 0
    done: list = []  # (what, how it ended, its JUnit XML, its kernel's dying words)
    try:
        if args.only in ("guest", "all"):
            # Side by side: a guest under TCG keeps one host CPU busy for most of
            # its run (one vCPU), so two of them take about as long as the longer.
            import threading
            jobs = []
            last = kernels[-1]
            flows = selected_files("guest")
            for k in kernels:
                if k == last:
                    here = [f for f in flows if f not in LATE and (f not in FIRST or len(kernels) == 1)]
                else:
                    here = [f for f in flows if f in FIRST] if k == kernels[0] else []
                marks = "kernel or guest" if here else "kernel"
                files = sorted(selected_files("kernel") + here)
                res: dict = {}
                cpus = vcpus_of(args.vcpus, k)
                job = threading.Thread(target=lambda k=k, marks=marks, res=res, cpus=cpus,
                                       files=files:
                                       res.update(rc=guest_tier(args.out, args.timeout,
                                                                args.pytest_args, k, vmlinuz[k],
                                                                done, marks, cpus, files)),
                                       name=f"guest-{k}")
                jobs.append((job, res))
                job.start()
                if args.one_by_one:
                    job.join()
            for job, res in jobs:
                job.join()
                rc |= res.get("rc", 1)
            late = [f for f in flows if f in LATE]
            if late:  # alone, on both host CPUs
                rc |= guest_tier(args.out, args.timeout, args.pytest_args, last, vmlinuz[last],
                                 done, "guest", LATE_VCPUS, late, part="frr")
        if args.only in ("vm", "all"):
            rc |= vm_tier(args.out, args.pytest_args + [f"--ignore={p}" for p in args.skip],
                          vmlinuz[kernels[0]], done)
    finally:  # what ran, even when a part raised or was interrupted
        summary(args.out, done)
    return 1 if rc else 0


#: The checkout's Python folders (the package's subfolders that are links to
#: top-level folders among them: compileall does not follow a link).
SOURCES = ("nslab", "experiments", "frr", "ovs", "studies", "topologies", "tests", "scripts")


def compile_checkout(kernels: list) -> None:
    """Byte-compile the checkout for the Python of each kernel's userland.

    A guest writes no bytecode (``PYTHONDONTWRITEBYTECODE``: the checkout is
    this machine's), so every Python process in it compiled each module the
    host's tiers had not imported: measured in a guest of Debian 12's kernel
    under TCG, importing the CLI took 32 s with no bytecode, 17 s with what a
    host run had left, 12 s with all of it; a guest tier starts hundreds of
    such processes. compileall skips what is up to date."""
    pythons = [("this machine", [sys.executable])]
    for k in kernels:
        if k in USERLANDS:
            venv = USERLANDS[k][1]
            pythons.append((k, [os.path.join(ROOT, "scripts", "in-debian13.sh"),
                                os.path.join(ROOT, venv, "bin", "python")]))
    for where, py in pythons:
        t0 = time.monotonic()
        res = subprocess.run([*py, "-m", "compileall", "-q", "-j", "0", *SOURCES], cwd=ROOT,
                             capture_output=True, text=True, timeout=600)
        tail = (res.stdout + res.stderr).strip()[-500:]
        print(f"stock-kernel tier: bytecode for {where}'s Python: "
              + (f"{time.monotonic() - t0:.1f} s" if res.returncode == 0
                 else f"exit {res.returncode}: {tail}"), flush=True)


def summary(out: str, done: list) -> None:
    """Every part's outcome and failures, last, where a CI log's tail shows them."""
    from nslab.runtime.testing import junit_summary
    print(f"stock-kernel tier summary (results in {out}):")
    for what, status, junit, trouble in done:
        counts, *bad = junit_summary(junit) if junit else [""]
        print(f"  {what}: {status}" + (f": {counts}" if counts else ""))
        for line in bad + [f"guest kernel: {t}" for t in trouble]:
            print(f"    {line}")
    sys.stdout.flush()


def guest_tier(out: str, timeout: float, extra: list, name: str, vmlinuz: str,
               done: list, marks: str, vcpus: int, files: list, part: str = "") -> int:
    """One guest of kernel ``name`` with ``vcpus`` vCPUs runs the tests marked
    ``marks`` in ``files`` (only modules that hold one: pytest imports every
    module it collects, and under TCG importing one costs seconds); ``part``
    names a second guest of the same kernel (its results apart)."""
    from nslab.hosts import vm
    py = os.path.join(os.path.dirname(sys.executable), "python")
    root, binds = None, []
    if name in USERLANDS:
        root, venv, cache = USERLANDS[name]
        py = os.path.join(ROOT, venv, "bin", "python")
        if not os.path.exists(os.path.join(ROOT, venv, "pyvenv.cfg")):
            print(f"guest tier {name}: no {venv} in this checkout for the root {root}: run "
                  f"scripts/in-debian13.sh make VENV={venv} venv", flush=True)
            done.append((f"guest tier {name}", f"not run (no {venv})", "", []))
            return 1
        os.makedirs(cache, exist_ok=True)
        binds = [(ROOT, ROOT), (os.path.join(ROOT, ".cache"), cache)]
    label = f"{name}-{part}" if part else name
    out = os.path.join(out, f"guest-{label}")
    os.makedirs(out, exist_ok=True)
    if os.path.exists(os.path.join(out, "junit-guest.xml")):  # an earlier run's (--out reused)
        os.unlink(os.path.join(out, "junit-guest.xml"))
    cmd = " ".join([
        "PYTHONDONTWRITEBYTECODE=1", "NSLAB_STOCK_KERNEL=1", "NSLAB_NO_PLOTS=1",
        f"NSLAB_RESULTS={out}/results",
        py, "-m", "pytest", "-m", f"'{marks}'",
        "-p", "no:cacheprovider",
        "--basetemp=/tmp/nslab-pytest", f"--junitxml={out}/junit-guest.xml",
        "-o", "console_output_style=classic", *extra, *files,
    ])
    t0, started = time.monotonic(), time.time()
    guest = vm.Guest("kernel-tier", cmd, out, cwd=ROOT, timeout=timeout, kernel=vmlinuz,
                     root=root, binds=binds, cpus=vcpus, hold=[*TIER_HOLD, py],
                     cached=vm.code_dirs(py, root))
    res = vm.run(guest)
    for _ in range(BOOT_RETRIES):
        if not res.died_booting:
            break
        # No test ran: the kernel died before its init. Under multi-threaded
        # TCG (a guest of 2 vCPUs) a vCPU can run a translation of kernel code
        # that another has just patched (static keys: int3, then the new
        # bytes), and the kernel oopses on an int3 nobody expects: CI's run of
        # a70c6e1 died so at 2.7 s, in sched_clock_cpu under sched_init_debug.
        # The guest boots again; its console is kept beside the new one.
        with PRINT:
            print(f"guest tier {label}: its kernel died booting ({res.died_booting}), before "
                  "any test ran: booting it once more", flush=True)
        keep = os.path.join(out, "kernel-tier.console.log")
        if os.path.exists(keep):
            os.replace(keep, os.path.join(out, "kernel-tier.died-booting.console.log"))
        res = vm.run(guest)
    with PRINT:  # one guest's output at a time
        print(f"--- guest tier {label}: its pytest's output (last 6,000 characters)")
        print(res.stdout[-6000:], end="" if res.stdout.endswith("\n") else "\n")
    status = "timed out" if res.timed_out else f"exit {res.returncode}"
    status += f" after {time.monotonic() - t0:.0f} s"
    what = f"guest tier {label} ({vm.kernel_release(vmlinuz)}, {vcpus} vCPU{'s' if vcpus > 1 else ''})"
    print(f"{what}: {status}, tests marked {marks} (console: {out}/kernel-tier.console.log)",
          flush=True)
    trouble: list = []
    if not res.ok:  # the guest's kernel may have died: say how, from its console
        from nslab.runtime.testing import console_trouble
        try:
            with open(os.path.join(out, "kernel-tier.console.log"), errors="replace") as f:
                trouble = console_trouble(f.read())
        except OSError:
            pass
        for line in trouble:
            print(f"guest tier {label}: console: {line}", flush=True)
    done.append((what, status, f"{out}/junit-guest.xml", trouble))
    tiers.record(f"guest {label}", time.monotonic() - t0, 0 if res.ok else 1,
                 f"{out}/junit-guest.xml", started)
    return 0 if res.ok else 1


def vcpus_of(spec: str, kernel: str) -> int:
    """A kernel's vCPUs from ``kernel=N,...`` (or ``N`` for every kernel); 1 if unnamed."""
    spec = str(spec)
    if spec.isdigit():
        return int(spec)
    for part in spec.split(","):
        name, _, n = part.partition("=")
        if name == kernel and n.isdigit():
            return int(n)
    return 1


@functools.lru_cache(maxsize=None)
def selected_files(marks: str) -> list:
    """The test modules (under tests/integration and tests/smoke) that hold a
    test marked ``marks``, found by collecting on this machine (once per
    ``marks``: a collection takes seconds, and the guests start after it)."""
    res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", marks,
                          "-p", "no:cacheprovider", "tests/integration", "tests/smoke"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    files = sorted({line.split("::", 1)[0] for line in res.stdout.splitlines()
                    if "::" in line and line.startswith("tests/")})
    if not files:
        raise SystemExit(f"kernel tier: no test marked {marks!r} collected: "
                         f"{(res.stdout + res.stderr)[-2000:]}")
    return files


def vm_tier(out: str, extra: list, vmlinuz: str, done: list) -> int:
    t0, started = time.monotonic(), time.time()
    junit = os.path.join(out, "junit-vm.xml")
    if os.path.exists(junit):  # an earlier run's (--out reused)
        os.unlink(junit)
    rc = subprocess.call([sys.executable, "-m", "pytest", "-m", "vm", "-p", "no:cacheprovider",
                          f"--junitxml={junit}", *extra, "tests/vm"],
                         cwd=ROOT, env=dict(os.environ, NSLAB_VM_OUT=out, NSLAB_KERNEL=vmlinuz))
    status = f"exit {rc} after {time.monotonic() - t0:.0f} s"
    print(f"two-box tier: {status}", flush=True)
    done.append(("two-box tier", status, junit, []))
    tiers.record("two boxes", time.monotonic() - t0, rc, junit, started)
    return rc


if __name__ == "__main__":
    sys.exit(main())
