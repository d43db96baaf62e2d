"""What is plugged into nslab, found through entry points (never imported by name).

Groups (in ``pyproject.toml``; a plugin of your own adds lines to its own package):

* ``nslab.studies``: :class:`~nslab.run.study.Study` subclasses (``nslab run NAME``);
* ``nslab.topologies``: functions returning a :class:`~nslab.model.topo.Topology`
  (``nslab topo up NAME``);
* ``nslab.commands``: click commands or groups added to the ``nslab`` CLI;
* ``nslab.extensions``: lab extensions (see :mod:`nslab.runtime.extension`);
* ``nslab.study_loaders``: by file extension, functions turning a study file
  into a study class (``nslab run FILE``).

A plugin that fails to import is reported with its name and the error, never
skipped in silence.
"""
from __future__ import annotations

import functools
import os
from typing import Any, Callable, Dict, List

from ..errors import InputError, LabError
from ..runtime import extension


class PluginError(LabError):
    """A registered plugin could not be loaded."""


def load_group(group: str) -> Dict[str, Any]:
    """Load every entry point of ``group`` (e.g. ``nslab.studies``), by name in
    name order.

    Raises:
        PluginError: one failed to import; the message names it and its target.
    """
    from importlib.metadata import entry_points
    out: Dict[str, Any] = {}
    for ep in sorted(entry_points(group=group), key=lambda e: e.name):
        try:
            out[ep.name] = ep.load()
        except Exception as exc:  # reported with the plugin's name
            raise PluginError(f"{group} plugin {ep.name!r} ({ep.value}) failed to load: "
                              f"{type(exc).__name__}: {exc}") from exc
    return out


@functools.lru_cache(maxsize=None)
def studies() -> Dict[str, Any]:
    """Registered studies by name (classes)."""
    found = load_group("nslab.studies")
    for name, cls in found.items():
        if getattr(cls, "name", name) != name:
            raise PluginError(f"study entry point {name!r} names a study called {cls.name!r}")
    return found


def is_study_file(name: str) -> bool:
    """Does ``name`` name a study file (by extension) rather than a registered study?"""
    return os.path.splitext(name)[1].lower() in (".yaml", ".yml")


def study_from_file(path: str) -> Any:
    """The study class of the study file at ``path``, made by the loader
    registered for its extension (group ``nslab.study_loaders``)."""
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    loaders = load_group("nslab.study_loaders")
    if ext not in loaders:
        raise InputError(f"{path}: no loader for .{ext} study files (known: "
                         f"{', '.join('.' + e for e in loaders) or 'none'})")
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such study file")
    return loaders[ext](path)


def study(name: str) -> Any:
    """The study class called ``name`` (or of the study file ``name``); an
    unknown name lists the known ones."""
    if is_study_file(name):
        return study_from_file(name)
    found = studies()
    if name not in found:
        raise InputError(f"unknown study {name!r} (registered: {', '.join(found) or 'none'}; "
                         "or give a study file)")
    return found[name]


@functools.lru_cache(maxsize=None)
def topologies() -> Dict[str, Callable[..., Any]]:
    """Registered ready topologies by name."""
    return load_group("nslab.topologies")


def topology(name: str) -> Callable[..., Any]:
    found = topologies()
    if name not in found:
        raise InputError(f"unknown topology {name!r} (known: {', '.join(sorted(found))}; "
                         "or give a .yaml file, or --custom FILE.py NAME)")
    return found[name]


def commands() -> List[Any]:
    """CLI commands contributed by plugins."""
    return list(load_group("nslab.commands").values())


def clear() -> None:
    """Forget what was loaded (tests that register plugins at run time)."""
    studies.cache_clear()
    topologies.cache_clear()
    extension.registered.cache_clear()
