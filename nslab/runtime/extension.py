"""Lab extensions: pieces of a lab that live outside the core (OVS bridges, FRR
daemons), plugged in through entry points so that the core never imports them.

The core :class:`~nslab.runtime.lab.Lab` (to an extension, an
:class:`ExtendedLab`) builds namespaces, veth links, Linux bridges,
addresses, routes, sysctls and shaping from a pure :mod:`build plan
<nslab.runtime.plan>`. An extension adds what a topology asks for beyond that, in
stages, after IPMininet's daemons (each with its own start, stop and checks)
and munet's staged teardown:

* ``wants(topology)``: does this topology use me?
* ``needs(topology)``: capabilities, checked before anything is built;
* ``check(lab)``: checks that need the machine (e.g. an uplink's safety),
  still before anything is built;
* ``build(lab, plan)``: after the core has built its part;
* ``teardown(lab)``: first at teardown (daemons before their namespaces);
* ``discover(run_id)`` / ``remove(run_id, objects)`` / ``release(journal,
  live_runs)``: for ``nslab clean`` after a crash, by tag only;
* ``facts(lab)``: what it adds to a run's provenance about the built lab;
* ``agent_facts(lab)`` / ``remote(lab, facts)``: across hosts, what a host's
  agent tells the controller, and the stand-in the controller makes of it;
* ``judge(node, check)``: one try of an ``nslab check`` check of a kind it
  answers for (``check_kinds``: FRR's ``bgp`` and ``bfd``), on a running lab.

Extensions are registered under the entry point group ``nslab.extensions``.
"""
from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Protocol, Tuple

from ..errors import LabError
from ..errors import CapabilityError

from .node import LabLike

if TYPE_CHECKING:  # pragma: no cover
    from .plan import BuildPlan
    from .proc import Result
    from ..model.topo import Topology

log = logging.getLogger(__name__)

GROUP = "nslab.extensions"


class OwnedObjects(Protocol):
    """What a lab owns besides its namespaces and interfaces, by extension
    (``{"ovs": ["nl3f2a-b1"]}``): teardown removes them."""

    extra: Dict[str, List[str]]


class ExtendedLab(LabLike, Protocol):
    """The lab an extension's hooks extend: a :class:`~nslab.runtime.node.LabLike`
    that also says which nodes it builds on this machine, owns the objects an
    extension adds (``inventory.extra``) and records how to undo a change
    outside them. :class:`~nslab.runtime.lab.Lab` is one. A protocol, not the
    class: this module is imported by what removes a lab's leftovers
    (:mod:`nslab.runtime.clean`), which :mod:`nslab.runtime.lab` imports."""

    @property
    def inventory(self) -> OwnedObjects:
        """The objects the lab owns (extensions add theirs to ``extra``)."""

    def is_local(self, node: str) -> bool:
        """Does this lab build ``node`` here (not another host of a lab across machines)?"""

    def record_restore(self, what: str, argv_list: List[List[str]]) -> None:
        """Journal commands that undo a change outside the lab's own objects."""


class CheckNode(Protocol):
    """A node of a running lab as an ``nslab check`` check reaches it (from
    any process, not only the lab's own): its run, name, namespace (None:
    the root one), the run's work directory, and a command run there
    (argv only, tagged with the run, never raising on a non-zero exit)."""

    run_id: str
    name: str
    netns: Optional[str]
    workdir: str

    def run(self, argv: List[str], timeout: float) -> "Result":
        ...


class Extension:
    """Base class of lab extensions; every hook does nothing by default.

    Attributes:
        name: the extension's name (also its entry point name).
        provides: the topology features it builds (see
            :meth:`Topology.features <nslab.model.topo.Topology.features>`):
            ``switch:<type>`` for a switch type, built in the root namespace
            (its ports are created there, named ``<run>-p<N>`` and tagged with
            ifalias), or an option such as ``bgp``.
    """

    name: str = ""
    provides: Tuple[str, ...] = ()
    #: Kinds of ``nslab check`` checks it judges (see :meth:`judge`).
    check_kinds: Tuple[str, ...] = ()

    @property
    def switch_types(self) -> Tuple[str, ...]:
        return tuple(p.split(":", 1)[1] for p in self.provides if p.startswith("switch:"))

    def wants(self, topo: "Topology") -> bool:
        return bool(set(self.provides) & topo.features())

    def needs(self, topo: "Topology") -> List[str]:
        return []

    def check(self, lab: ExtendedLab) -> None:
        """Checks that need the machine, before anything is built."""

    def build(self, lab: ExtendedLab, plan: "BuildPlan") -> None:
        """Build this extension's part, after the core's."""

    def teardown(self, lab: ExtendedLab) -> List[str]:
        """Undo :meth:`build` (best effort); return the problems met."""
        return []

    def export_files(self, topo: "Topology", node: str,
                     release: Optional[str] = None) -> Dict[str, str]:
        """The files that run this extension's part of ``node`` outside nslab,
        in a container of the software's own image (``nslab topo export``):
        ``{absolute path in the container: text}``, empty when ``node`` has no
        part in it. ``release``: the software's version in that image, when
        its tag says (``10.3.1``)."""
        return {}

    def facts(self, lab: ExtendedLab) -> Dict[str, Any]:
        """What this extension adds to a run's provenance about the built lab
        (merged into its ``lab``: OVS's physical uplinks and their drivers)."""
        return {}

    def agent_facts(self, lab: ExtendedLab) -> Dict[str, Any]:
        """What this extension's part of one host's share of a lab across hosts
        tells the controller (``nslab agent up``'s ready event; JSON; a time
        as an age in seconds, since the two clocks differ). Read back by
        :meth:`remote` on the controller. Empty: nothing."""
        return {}

    def remote(self, lab: Any, facts: List[Tuple[Dict[str, Any], float]]) -> Any:
        """On the controller of a lab across hosts: the stand-in that
        ``lab.extension(name)`` returns, from each host's :meth:`agent_facts`
        and the controller's ``time.monotonic()`` when it arrived. None: no
        stand-in (the extension is not reachable from the controller)."""
        return None

    def journal(self, lab: ExtendedLab) -> Dict[str, Any]:
        """What to record in the run's journal before building (read by :meth:`release`)."""
        return {}

    def discover(self, run_id: Optional[str] = None) -> Dict[str, List[str]]:
        """Objects of this extension tagged with a run (``{run_id: [object]}``)."""
        return {}

    def describe(self, obj: str) -> str:
        return f"{self.name} {obj}"

    def remove(self, run_id: str, objects: List[str]) -> None:
        """Remove objects :meth:`discover` found for ``run_id``."""

    def release(self, journal: Dict[str, Any], live_runs: List[Dict[str, Any]]) -> None:
        """A run that used this extension ended (``journal``); ``live_runs`` are
        the journals of runs still alive. Stop shared things nobody uses."""

    def judge(self, node: CheckNode, check: Any) -> Any:
        """One try of ``check`` (a typed check of :mod:`nslab.model.checks`
        whose kind is in :attr:`check_kinds`) on ``node``: an
        :class:`~nslab.model.checks.Outcome`, or
        :class:`~nslab.model.checks.CannotRun` when it cannot be run."""
        raise NotImplementedError(f"extension {self.name} judges no checks")


class ExtensionError(LabError):
    """An extension could not be loaded."""


@functools.lru_cache(maxsize=1)
def registered() -> Dict[str, Extension]:
    """Every extension registered under ``nslab.extensions``, by name.

    An extension that fails to import is an error, never skipped in silence.
    """
    from importlib.metadata import entry_points
    out: Dict[str, Extension] = {}
    for ep in entry_points(group=GROUP):
        try:
            cls = ep.load()
        except Exception as exc:  # reported, not swallowed
            raise ExtensionError(f"extension {ep.name} ({ep.value}) failed to load: "
                                 f"{type(exc).__name__}: {exc}") from exc
        ext = cls()
        ext.name = ext.name or ep.name
        out[ep.name] = ext
    return out


def root_switch_types() -> Dict[str, Extension]:
    """Switch types built by extensions (in the root namespace), to the extension."""
    return {t: ext for ext in registered().values() for t in ext.switch_types}


def for_topology(topo: "Topology") -> List[Extension]:
    """The extensions a topology uses, in registration order; a feature no
    installed extension provides is refused by name."""
    exts = registered()
    for feature in sorted(topo.features()):
        if not any(feature in e.provides for e in exts.values()):
            raise CapabilityError(f"this topology uses {feature}, which no installed nslab "
                                  "extension provides")
    return [e for e in exts.values() if e.wants(topo)]
