"""The alias study across two real machines (the posts' server.sh / client.sh).

``serve`` changes a real interface, so it records how to undo each change in a
journal first: a crash is undone by ``nslab clean``.
"""
from __future__ import annotations

import math
import os
import subprocess
import time
from typing import Callable, Dict, List, Optional

from nslab.runtime.clean import block_sigint, read_journal, write_journal
from nslab.errors import InputError
from nslab.traffic.iperf import client_argv, parse, server_argv
from nslab.model.naming import new_run_id
from nslab.runtime.proc import Process, process_start_time, run, stop_all
from nslab.model.render import text

from .model import alias_addresses, alias_batch


def _check_iface(iface: str) -> None:
    from nslab.model.fields import check_ifname
    check_ifname(iface, "--iface")
    if not os.path.isdir(f"/sys/class/net/{iface}"):
        raise InputError(f"no interface {iface!r} in this network namespace")


def serve(iface: str, n: int, template: str, prefix: int, hold: Optional[float],
          echo: Callable[[str], None] = print) -> None:
    """Add aliases ``iface:1..N`` and one iperf2 server per alias until interrupted."""
    from nslab.runtime import caps
    from nslab.runtime.clean import Inventory, remove
    caps.require_root("nslab alias serve")
    _check_iface(iface)
    if n < 1 or n > 254:
        raise InputError(f"--aliases {n} is out of range 1..254")
    addrs = alias_addresses(template, n, prefix)
    run_id = new_run_id()
    journal = {"run": run_id, "pid": os.getpid(), "pid_start": process_start_time(os.getpid()),
               "created": time.time(), "topology": f"alias-serve {iface}",
               "restore": [{"what": f"remove {n} aliases from {iface}",
                            "argv": [["ip", "addr", "del", f"{a}/{prefix}", "dev", iface]
                                     for a in addrs]}]}
    write_journal(run_id, journal)
    procs: List[Process] = []
    try:
        echo(f"Taking {n} aliases up on {iface} ({addrs[0]} .. {addrs[-1]})...")
        run(["ip", "-batch", "-"], input=text(alias_batch(iface, addrs, prefix)))
        echo("Starting iperf servers...")
        for a in addrs:
            procs.append(Process(server_argv(bind=a, enhanced=False), run_id=run_id,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 name=f"iperf-s-{a}"))
        echo(f"Started (run {run_id}). Press Ctrl-C to stop.")
        try:
            if hold is not None:
                time.sleep(hold)
            else:
                while True:
                    time.sleep(3600)
        except KeyboardInterrupt:
            pass
    finally:
        with block_sigint():
            echo("Taking aliases down...")
            stop_all(procs)
            remove(Inventory(run_id, journal=read_journal(run_id)))
            echo("Stopped.")


def client(template: str, n: int, duration: float, mss: Optional[int] = None,
           nodelay: bool = False) -> Dict[str, float]:
    """N clients started together (shared ``--txstart-time``); the sum of their reports."""
    if n < 1:
        raise InputError(f"--workers must be >= 1, got {n}")
    addrs = alias_addresses(template, n)
    start = math.ceil(time.time() + 1.0 + 0.02 * n)
    run_id = new_run_id()
    procs = [Process(client_argv(a, time=duration, txstart=float(start), fmt="k", mss=mss,
                                 nodelay=nodelay), run_id=run_id, name=f"iperf-c{i}")
             for i, a in enumerate(addrs, 1)]
    total, reported = 0.0, 0
    try:
        for p in procs:
            res = p.wait(timeout=duration + 60)
            rep = parse(res.stdout)
            if rep.streams:
                total += rep.streams[0].bps
                reported += 1
    finally:
        stop_all(procs)
    return {"sum_kbps": total / 1e3, "reported": reported}
