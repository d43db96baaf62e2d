"""Topologies from the command line: a registered name with options, a YAML
file, or a Mininet ``--custom`` Python file."""
from __future__ import annotations

import importlib.util
import inspect
import os
from typing import TYPE_CHECKING, Any, Callable, Dict, List

from ..errors import InputError
from ..runtime.grants import HostGrants
from ..model.topo import Topology
from .registry import topology

if TYPE_CHECKING:  # pragma: no cover
    from ..model.topo import Topology


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


def load_topology(spec: str, options: Dict[str, Any]) -> Topology:
    """A topology from a registered name, a YAML file or a Mininet ``--custom`` Python file."""
    if spec.endswith((".yaml", ".yml")):
        if options:
            raise InputError("a YAML topology takes no options (put them in the file)")
        return Topology.from_yaml(spec)
    if spec.endswith(".py") or ".py:" in spec:
        return _load_custom(spec, options)
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


def _load_custom(spec: str, options: Dict[str, Any]) -> Topology:
    """``file.py[:name]`` with a Mininet-style ``topos`` dict."""

    path, _, name = spec.partition(":")
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file")
    mod_spec = importlib.util.spec_from_file_location("nslab_custom_topo", path)
    mod = importlib.util.module_from_spec(mod_spec)  # type: ignore[arg-type]
    try:
        mod_spec.loader.exec_module(mod)  # type: ignore[union-attr]
    except Exception as exc:  # noqa: BLE001 - a user's file
        raise InputError(f"{path}: cannot load: {type(exc).__name__}: {exc}") from None
    topos = getattr(mod, "topos", {})
    if not topos:
        raise InputError(f"{path}: defines no 'topos' dict (as Mininet's --custom files do)")
    name = name or next(iter(topos))
    if name not in topos:
        raise InputError(f"{path}: no topology {name!r} (has: {', '.join(topos)})")
    switch = options.pop("switch", "bridge")
    builder = topos[name]
    try:
        topo = builder(**options)
    except TypeError as exc:
        raise InputError(f"{path}:{name}: {exc}") from None
    return Topology.from_mininet(topo, name=name, switch_type=switch)
