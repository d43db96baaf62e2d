"""``nslab vtysh NODE``: FRR's vtysh on a node of a running lab."""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Optional, Tuple

import click

from nslab.errors import InputError


@click.command("vtysh", context_settings={"ignore_unknown_options": True})
@click.argument("node")
@click.option("--run", "run_id", default=None, help="Run id (default: the only live run with NODE).")
@click.option("-c", "commands", multiple=True, help="Command(s) to run; none = interactive.")
def vtysh(node: str, run_id: Optional[str], commands: Tuple[str, ...]) -> None:
    """FRR's vtysh on NODE of a running lab, e.g. nslab vtysh server1 -c 'show bgp summary'."""
    from nslab.runtime.clean import discover, run_is_live, workdir
    from nslab.model.fields import check_name
    check_name(node)
    live = [r for r, inv in discover().items() if run_is_live(inv.journal)
            and os.path.isdir(os.path.join(workdir(r), "frr", node))]
    if run_id:
        live = [r for r in live if r == run_id]
    if not live:
        raise InputError(f"no running lab has an FRR node {node!r}" + (f" in run {run_id}" if run_id else ""))
    if len(live) > 1:
        raise InputError(f"several runs have node {node!r} ({', '.join(live)}): give --run")
    argv = ["ip", "netns", "exec", f"{live[0]}-{node}", "vtysh", "--vty_socket",
            os.path.join(workdir(live[0]), "frr", node)]
    for c in commands:
        argv += ["-c", c]
    sys.exit(subprocess.call(argv))
