"""Topologies from the command line: a registered name with options, a YAML
file, or a topology of a Mininet custom file named with ``--custom FILE``.

A Python file is code: nslab runs one only when the command line says it is
code (``--custom FILE``, Mininet's own option, on every command that takes a
topology), never because a name ends in ``.py``.
"""
from __future__ import annotations

import inspect
import logging
import os
import traceback
import types
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from ..errors import InputError, LabError
from ..model.checkfile import topology_file
from ..runtime.grants import HostGrants
from ..model.topo import Topology
from ..safeio import read_bytes
from .registry import topology

if TYPE_CHECKING:  # pragma: no cover
    from ..model.topo import Topology

log = logging.getLogger(__name__)

#: The ``--custom`` option's help, the same on every command that takes a topology.
CUSTOM_HELP = ("Take TOPOLOGY from FILE, a Mininet custom file (Python with a `topos` dict; "
               "TOPOLOGY names one of them). nslab RUNS the file, as whoever runs nslab: as "
               "root under sudo. Only from someone whose code you would run as root.")
#: The largest custom file read (Mininet's examples are a few KiB).
CUSTOM_MAX_BYTES = 1024 * 1024


def extra_kwargs(args: List[str]) -> Dict[str, Any]:
    """Turn ``--k 4 --switch ovs --framing`` into ``{"k": "4", "switch": "ovs", "framing": True}``."""
    out: Dict[str, Any] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if not a.startswith("--"):
            raise InputError(f"unexpected argument {a!r}")
        key = a[2:].replace("-", "_")
        if "=" in key:
            key, val = key.split("=", 1)
            out[key] = val
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[key] = args[i + 1]
            i += 1
        else:
            out[key] = True
        i += 1
    return out


def coerce(fn: Callable, kwargs: Dict[str, Any]) -> Dict[str, Any]:
    sig = inspect.signature(fn)
    params = sig.parameters
    accepts_any = any(p.kind == p.VAR_KEYWORD for p in params.values())
    out = {}
    for k, v in kwargs.items():
        if k not in params and not accepts_any:
            known = ", ".join("--" + p.replace("_", "-") for p in params
                              if params[p].kind != params[p].VAR_KEYWORD)
            raise InputError(f"unknown option --{k.replace('_', '-')} for this topology "
                             f"(options: {known or 'none'})")
        default = params[k].default if k in params else None
        if isinstance(default, bool) and isinstance(v, str):
            v = v.lower() in ("1", "true", "yes", "on")
        elif isinstance(default, int) and not isinstance(default, bool) and isinstance(v, str):
            try:
                v = int(v)
            except ValueError:
                raise InputError(f"--{k}: expected an integer, got {v!r}") from None
        out[k] = v
    return out


def grants_from_options(spec: str, options: Dict[str, Any]) -> HostGrants:
    """What ``nslab topo up``'s command line allows the topology to change on
    this machine (see :mod:`nslab.runtime.grants`). ``--allow-controller`` is taken out
    of ``options``; ``--uplink``/``--force`` stay a ready topology's options
    (and grant themselves) but are only grants for a YAML file."""
    controllers = str(options.pop("allow_controller", "") or "").split(",")
    if spec.endswith((".yaml", ".yml")):
        uplinks = str(options.pop("uplink", "") or "").split(",")
        force = options.pop("force", False)
    else:
        uplinks = [str(options["uplink"])] if options.get("uplink") else []
        force = options.get("force", False)
    return HostGrants.of(uplinks, controllers, force is True or str(force).lower() == "true")


def is_python(spec: str) -> bool:
    """Does ``spec`` name a Python file (``file.py``, ``file.py:name``)?"""
    return spec.endswith(".py") or ".py:" in spec


def load_topology(spec: str, options: Dict[str, Any], custom: Optional[str] = None) -> Topology:
    """A topology from a registered name, a YAML file, or, with ``custom``
    (the command line's ``--custom FILE``), the topology ``spec`` of that
    Mininet custom file, which is run. A ``spec`` naming a Python file
    without ``custom`` is refused in one line: a Python file runs only when
    the command line says it is code."""
    if custom is not None:
        return _load_custom(custom, spec, options)
    if spec.endswith((".yaml", ".yml")):
        if options:
            raise InputError("a YAML topology takes no options (put them in the file)")
        return topology_file(spec)  # its checks: and stages:, if any, set aside (nslab check)
    if is_python(spec):
        path, _, name = spec.partition(":")
        raise InputError(f"{path}: a Python topology is a program, and nslab runs one (as root "
                         f"under sudo) only when the command line says so: --custom {path} "
                         + (name or "NAME (one of its topos)"))
    name, *positional = spec.split(",")
    fn = topology(name)
    if positional:  # Mininet's `mn --topo tree,2,3`: the builder's parameters in order
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if len(positional) > len(params):
            raise InputError(f"{spec}: {name} takes at most {len(params)} values "
                             f"({', '.join(p.name for p in params)})")
        for p, value in zip(params, positional):
            if p.name in options:
                raise InputError(f"{spec}: {p.name} is given twice (in {spec} and as --{p.name})")
            options = {**options, p.name: value}
    return fn(**coerce(fn, options))


def _python_error(path: str, exc: BaseException, doing: str) -> InputError:
    """One line for a Python error in the custom file ``path`` (its line, the
    exception, its first line), the traceback in the log."""
    log.debug("%s: %s", path, doing, exc_info=(type(exc), exc, exc.__traceback__))
    line = getattr(exc, "lineno", None) if isinstance(exc, SyntaxError) else None
    if line is None:
        here = [f.lineno for f in traceback.extract_tb(exc.__traceback__)
                if f.filename == path]
        line = here[-1] if here else None
    text = str(exc).splitlines()[0] if str(exc) else ""
    if isinstance(exc, SyntaxError):
        text = exc.msg
    what = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return InputError(f"{path}{f':{line}' if line else ''}: {what} ({doing}; traceback in "
                      "the log)")


def _load_custom(path: str, name: str, options: Dict[str, Any]) -> Topology:
    """The topology ``name`` of the Mininet custom file ``path`` (its
    ``topos`` dict). The file is read (a regular file, bounded) and run as
    Mininet's ``--custom`` runs it (``exec`` of its source: no bytecode
    cache is read or written beside it); a Python error anywhere in it is
    one line naming the file and line, its traceback in the log."""
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file")
    try:
        source = read_bytes(path, CUSTOM_MAX_BYTES)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    mod = types.ModuleType("nslab_custom_topo")
    mod.__file__ = path
    try:
        exec(compile(source, path, "exec"), mod.__dict__)  # --custom: code, by request
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a user's file, any error
        raise _python_error(path, exc, "running the custom file") from None
    topos = getattr(mod, "topos", {})
    if not isinstance(topos, dict) or not topos:
        raise InputError(f"{path}: defines no 'topos' dict (as Mininet's --custom files do)")
    name = name or next(iter(topos))
    if name not in topos:
        raise InputError(f"{path}: no topology {name!r} (has: {', '.join(map(str, topos))})")
    switch = options.pop("switch", "bridge")
    builder = topos[name]
    try:
        topo = builder(**options)
    except TypeError as exc:
        raise InputError(f"{path}:{name}: {exc}") from None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a user's file, any error
        raise _python_error(path, exc, f"building topology {name}") from None
    try:
        return Topology.from_mininet(topo, name=name, switch_type=switch)
    except LabError:
        raise
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - what the file built, any error
        raise _python_error(path, exc, f"reading topology {name}") from None
