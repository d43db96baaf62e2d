#!/usr/bin/env python3
"""The stock-kernel tier (`make test-kernel`).

1. One QEMU guest boots the stock kernel unpacked by scripts/setup-kernel.sh
   and runs, on this very checkout, every test marked ``kernel`` or ``guest``
   with ``NSLAB_STOCK_KERNEL=1`` (a missing kernel feature fails there).
2. On the host, the tests marked ``vm`` start pairs of guests joined by
   emulated NICs (real drivers) for the two-box flows.

Pytest's result, its JUnit XML and each guest's serial console are kept in
``results/kernel-tier/<time>/``. Exit status: non-zero if either part failed.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "kernel-tier",
                                                  time.strftime("%Y%m%d-%H%M%S")))
    ap.add_argument("--timeout", type=float, default=1200, help="guest tier hard limit, s")
    ap.add_argument("--only", choices=["guest", "vm", "all"], default="all")
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = ap.parse_args()
    from nslab import vm
    vm.require()
    os.makedirs(args.out, exist_ok=True)
    info = vm.describe()
    print(f"stock-kernel tier: kernel {info['kernel']}, {info['accelerator']}; "
          f"results in {args.out}", flush=True)
    rc = 0
    if args.only in ("guest", "all"):
        rc |= guest_tier(args.out, args.timeout, args.pytest_args)
    if args.only in ("vm", "all"):
        rc |= vm_tier(args.out, args.pytest_args)
    return 1 if rc else 0


def guest_tier(out: str, timeout: float, extra: list) -> int:
    from nslab import vm
    py = os.path.join(ROOT, ".venv", "bin", "python")
    cmd = " ".join([
        "PYTHONDONTWRITEBYTECODE=1", "NSLAB_STOCK_KERNEL=1", f"NSLAB_RESULTS={out}/results",
        py, "-m", "pytest", "-m", "'kernel or guest'", "-p", "no:cacheprovider",
        "--basetemp=/tmp/nslab-pytest", f"--junitxml={out}/junit-guest.xml",
        "-o", "console_output_style=classic", *extra, "tests/integration", "tests/smoke",
    ])
    t0 = time.monotonic()
    res = vm.run(vm.Guest("kernel-tier", cmd, out, cwd=ROOT, timeout=timeout))
    print(res.stdout[-6000:], end="" if res.stdout.endswith("\n") else "\n")
    status = "timed out" if res.timed_out else f"exit {res.returncode}"
    print(f"guest tier: {status} after {time.monotonic() - t0:.0f} s "
          f"(console: {out}/kernel-tier.console.log)", flush=True)
    return 0 if res.ok else 1


def vm_tier(out: str, extra: list) -> int:
    t0 = time.monotonic()
    rc = subprocess.call([sys.executable, "-m", "pytest", "-m", "vm", "-p", "no:cacheprovider",
                          f"--junitxml={out}/junit-vm.xml", *extra, "tests/vm"],
                         cwd=ROOT, env=dict(os.environ, NSLAB_VM_OUT=out))
    print(f"two-box tier: exit {rc} after {time.monotonic() - t0:.0f} s", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
