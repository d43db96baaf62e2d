"""Ready topologies, by name. Each is a function returning a :class:`~nslab.topo.Topology`."""
from __future__ import annotations

from typing import Callable, Dict

from nslab.errors import InputError
from nslab.topo import Topology

from .basic import pair, single

REGISTRY: Dict[str, Callable[..., Topology]] = {"single": single, "pair": pair}


def register(name: str, fn: Callable[..., Topology]) -> None:
    REGISTRY[name] = fn


def get(name: str) -> Callable[..., Topology]:
    """The topology function called ``name``; raise InputError listing known ones."""
    _load_optional()
    if name not in REGISTRY:
        raise InputError(f"unknown topology {name!r} (known: {', '.join(sorted(REGISTRY))}; "
                         "or give a .yaml/.py file)")
    return REGISTRY[name]


def _load_optional() -> None:
    """Import topology modules added by the studies, if present."""
    import importlib
    for mod in ("clos", "rfc2544", "alias"):
        try:
            importlib.import_module(f"{__name__}.{mod}")
        except ImportError:
            pass
