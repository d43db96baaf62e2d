"""Open vSwitch for the lab: daemons, datapath choice, bridges (and the toolbelt).

The names below are loaded on first use: :mod:`nslab.ovs.kind` is read while
the topology model is built, before the runtime that the daemons use exists."""
from __future__ import annotations

import importlib
from typing import Any

_WHERE = {"OVS_CTL": "daemon", "datapath_type": "daemon", "ensure_running": "daemon",
          "release": "daemon", "stop_if_ours": "daemon", "add_bridge": "bridge",
          "del_bridge": "bridge", "tagged_bridges": "bridge"}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
