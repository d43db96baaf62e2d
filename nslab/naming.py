"""Run ids and the names the lab gives to the objects it creates.

A run id is ``nl`` + 4 hex digits (``nl3f2a``). Every object carries it:
namespaces ``<run>-<node>``, root-namespace interfaces ``<run>-p<N>`` (with
``ifalias nslab:<run>:<node>:<intf>``), OVS bridges ``<run>-b<N>`` (with
``external_ids:nslab-run=<run>``), processes ``NSLAB_RUN=<run>``.
"""
from __future__ import annotations

import os
import re
import secrets

RUN_RE = re.compile(r"^nl[0-9a-f]{4}$")
NS_RE = re.compile(r"^(nl[0-9a-f]{4})-([A-Za-z0-9_]+)$")
ALIAS_PREFIX = "nslab:"
STATE_DIR = os.environ.get("NSLAB_STATE_DIR", "/run/nslab")


def new_run_id() -> str:
    """A fresh run id not used by a namespace or journal on this machine."""
    existing = set()
    try:
        existing = {n.split("-", 1)[0] for n in os.listdir("/run/netns")}
    except OSError:
        pass
    try:
        existing |= {n.split(".", 1)[0] for n in os.listdir(STATE_DIR)}
    except OSError:
        pass
    while True:
        rid = "nl" + secrets.token_hex(2)
        if rid not in existing:
            return rid


def check_run_id(run_id: str) -> str:
    from .errors import InputError
    if not RUN_RE.fullmatch(run_id):
        raise InputError(f"bad run id {run_id!r}: run ids look like nl3f2a")
    return run_id


def ns_name(run_id: str, node: str) -> str:
    return f"{run_id}-{node}"


def root_intf(run_id: str, index: int) -> str:
    return f"{run_id}-p{index}"


def ovs_bridge(run_id: str, index: int) -> str:
    return f"{run_id}-b{index}"
