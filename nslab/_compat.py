"""The module paths of nslab 0.2 and earlier, kept importable for one release.

The core moved from flat modules (``nslab.topo``, ``nslab.lab``, ...) into
subpackages that are its layers (``nslab.model.topo``, ``nslab.runtime.lab``,
...; see docs/architecture.md). Importing an old path still works: a finder on
``sys.meta_path`` answers for it with the module at its new path (the same
module object, so ``isinstance`` checks and ``mock.patch("nslab.topo.X")`` act
on the real module) and issues a :class:`DeprecationWarning` naming the new path.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from typing import Dict, Optional, Sequence

#: Old module -> its new path. Removed in the release after 0.3.
MOVED: Dict[str, str] = {
    f"nslab.{old}": f"nslab.{layer}.{old}"
    for layer, mods in {
        "model": "topo topo_yaml fields shaping naming render multihost limits bounded",
        "runtime": "plan netlink proc lab node clean statefile extension caps platforms grants "
                   "clab testing",
        "hosts": "remote vm",
        "traffic": "iperf pktgen probe sampler counters noise noisegen interference capture "
                   "capturerun captureremote watch watchmetrics webwatch",
        "store": "results records stats published plotting draw reporting",
        "run": "study registry bench topoload",
        "cmdline": "cli cliutil runcli mncli capturecli export reproduce verdictbench",
    }.items()
    for old in mods.split()
}


class _Alias(importlib.abc.Loader):
    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        warnings.warn(f"{spec.name} is deprecated: import {self.new} (the old path goes in the "
                      "release after 0.3)", DeprecationWarning,
                      stacklevel=2)  # warnings skips importlib's own frames
        module = importlib.import_module(self.new)
        self.spec = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run (the module ran once, at its new path); importlib has
        just given it the old path's spec: give its own back."""
        module.__spec__ = self.spec

    def get_code(self, fullname: str) -> types.CodeType:
        """For ``python -m nslab.probe`` and the like: code that runs the new
        module as ``__main__`` (in its own package, so its relative imports work)."""
        warnings.warn(f"python -m {fullname} is deprecated: use python -m {self.new}",
                      DeprecationWarning, stacklevel=2)
        return compile(f"import runpy\nrunpy.run_module({self.new!r}, run_name='__main__', "
                       "alter_sys=True)\n", f"<{fullname}: {self.new}>", "exec")


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None,
                  target: Optional[types.ModuleType] = None
                  ) -> Optional[importlib.machinery.ModuleSpec]:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Put the finder for the old paths on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
