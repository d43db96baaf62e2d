"""FRRouting for the lab: daemon model, config templates, readiness checks.

The names below are loaded on first use: :mod:`nslab.frr.kind` is read while
the topology model is built, before the runtime that the daemons use exists."""
from __future__ import annotations

import importlib
from typing import Any

_WHERE = {"Daemon": "daemon", "Zebra": "daemon", "Bgpd": "daemon", "Bfdd": "daemon",
          "Mgmtd": "daemon", "DaemonCheckError": "daemon", "FrrRouter": "router",
          "FrrExtension": "router", "frr_of": "router", "wait_for_ecmp": "router",
          "FrrVersion": "version", "BgpOptions": "options", "BfdOptions": "options"}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
