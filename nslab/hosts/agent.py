"""What each host of a lab across machines runs: ``nslab agent up``, started
by the controller over SSH (:class:`~nslab.hosts.remote.MultiLab`), builds
this host's part of the lab with an ordinary :class:`~nslab.runtime.lab.Lab`
and keeps it while its stdin is open.

It reads one JSON line (the run id, this host, the topology, where each node
is, the hosts' underlay addresses), checks it as data, answers one line
(``ready``, with its nodes, or ``error``), waits for ``down`` or the end of
its input (the controller gone, the SSH session closed), tears its part
down and answers a last line with the problems met.
"""
from __future__ import annotations

import json
import logging
import os
from typing import IO, Any, Dict

from ..errors import InputError, LabError
from ..model.multihost import HOST_RE, Part, parse_hosts, place, tunnels
from ..model.naming import check_run_id
from ..model.topo import Topology
from ..runtime.lab import Lab

log = logging.getLogger(__name__)


def agent_up(stdin: IO[str], stdout: IO[str]) -> int:
    """``nslab agent up``: build this host's part of a lab read from ``stdin``
    (one JSON line), answer one line, keep it up until ``down`` or end of input,
    tear it down, answer one line."""
    from pydantic import BaseModel, ConfigDict, ValidationError


    class Request(BaseModel):
        model_config = ConfigDict(extra="forbid")
        run_id: str
        host: str
        topology: Dict[str, Any]
        placement: Dict[str, str]
        underlay: Dict[str, str]
        underlay_mtu: int = 1500

    def say(ev: Dict[str, Any]) -> None:
        stdout.write(json.dumps(ev) + "\n")
        stdout.flush()

    try:
        raw = stdin.readline()
        req = Request.model_validate_json(raw)
        check_run_id(req.run_id)
        if not HOST_RE.fullmatch(req.host) or req.host not in req.underlay:
            raise InputError(f"host {req.host!r} is not one of the lab's hosts")
        topo = Topology.from_dict(req.topology)
        underlay = parse_hosts(",".join(f"{h}={a}" for h, a in req.underlay.items()))
        placement = place(topo, list(underlay), req.placement)
        part = Part(req.host, placement, underlay,
                    tuple(tunnels(topo, placement, req.underlay_mtu)))
    except ValidationError as exc:
        e = exc.errors(include_url=False)[0]
        where = ".".join(str(x) for x in e.get("loc", ()))
        say({"event": "error", "message": f"bad request: {where}: {e.get('msg')}"})
        return 2
    except (ValueError, LabError) as exc:
        say({"event": "error", "message": f"bad request: {str(exc).splitlines()[0]}"})
        return 2
    log.info("agent %s: building %d of %d nodes, %d tunnels", req.host,
             sum(1 for n in topo.nodes if part.is_local(n)), len(topo.nodes),
             sum(1 for t in part.tunnels if req.host in (t.host_a, t.host_b)))
    lab = Lab(topo, run_id=req.run_id, part=part)
    try:
        lab.start()
    except BaseException as exc:  # noqa: BLE001 - reported in one line
        say({"event": "error", "message": f"{type(exc).__name__}: {exc}".splitlines()[0]})
        return 1
    try:
        nodes = {n.name: {"kind": n.kind, "netns": n.netns, "intfs": n.intfs, "addrs": n.addrs}
                 for n in lab}
        ev: Dict[str, Any] = {"event": "ready", "host": req.host, "pid": os.getpid(),
                              "nodes": nodes, "build_s": lab.build_seconds,
                              "datapath": lab.datapath}
        facts = {name: ext.agent_facts(lab) for name, ext in lab.extensions.items()}
        ev["extensions"] = {name: f for name, f in facts.items() if f}
        say(ev)
        try:
            for line in stdin:
                if line.strip() == "down":
                    break
        except KeyboardInterrupt:
            pass
    finally:
        problems = lab.stop()
    say({"event": "down", "problems": problems})
    return 0
