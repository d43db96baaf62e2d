"""A topology as a containerlab lab (``nslab topo export TOPOLOGY --format
containerlab``), and a containerlab file read back into a topology.

Written from containerlab's documentation (the topology definition file, the
``linux`` kind, the node settings ``image``, ``binds``, ``exec``, ``sysctls``,
``labels`` and ``network-mode``); nothing of containerlab's code or schema is
used. The file deploys with ``containerlab deploy -t FILE`` on one host, and on
a Kubernetes cluster through clabernetes (see ``docs/multi-host.md``).

How a topology maps:

* Every node is a container of kind ``linux``. Hosts, plain routers and
  switches run :data:`HOST_IMAGE` (``--image``). A node with an option of a
  kind that names a container image (:class:`nslab.model.kinds.Image`: FRR's
  BGP, ``--frr-image``) runs that image, with
  the files the extension writes for it
  (:meth:`~nslab.runtime.extension.Extension.export_files`: the same configuration the
  lab gives its daemons) bound into the container (``binds``) from a folder
  beside the file.
* A switch (a Linux bridge or an OVS switch in nslab) is a ``linux`` container
  running a Linux bridge named after it, as nslab's Linux-bridge switch is a
  namespace holding one. containerlab's ``bridge`` kind is not used: it joins a
  bridge that must be made on the host first, outside the lab, and it has no
  meaning on a Kubernetes cluster.
* Links are ``endpoints: ["a:intf", "b:intf"]`` with nslab's interface names:
  a ``linux`` node takes any Linux interface name (at most 15 characters,
  which nslab's names are). ``eth0`` is containerlab's management interface,
  so an interface of that name is renamed (unless ``mgmt=False``);
  ``interface_names="eth"`` renames every interface to containerlab's own
  style, ``eth1``, ``eth2``... in link order. Routes and FRR's configuration
  follow the new names.
* What nslab sets up inside a node's namespace, its :func:`build plan
  <nslab.runtime.plan.plan>` (bridge and ports, addresses, MTUs, routes, ``tc``
  shaping), becomes the node's ``exec`` commands, in the plan's order, each
  rendered from the plan's own lines; MACs and the veths' MTU (containerlab's
  veths default to 9500, nslab's are the kernel's 1500) come first. The
  node's sysctls become its ``sysctls``.

The file is made with ``yaml.safe_dump`` from plain data, never from a
template: no name from a topology can change its structure.
"""
from __future__ import annotations

import functools
import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import yaml

from ..errors import InputError, TopologyError
from .extension import registered
from ..model.kinds import node_options, registered as registered_kinds, switch_type
from .netlink import RouteAdd
from .plan import plan
from ..model.render import line, token
from ..safeio import check_path, make_dirs, write_atomic
from ..model.topo import KINDS, Topology, field_path
from ..model.topo_yaml import line_of, read_yaml

__all__ = ["export_containerlab", "write_export", "from_containerlab", "ClabExport", "FORMATS",
           "HOST_IMAGE", "default_images"]

#: Export formats (``--format``).
FORMATS = ("containerlab",)
#: Image of hosts, plain routers and switches: small, with iproute2 (``ip``,
#: ``tc``, bridges), ethtool, ping, iperf3 and tcpdump.
HOST_IMAGE = "wbitt/network-multitool:alpine-extra"
#: The label that records a node's nslab kind (host, router, switch).
KIND_LABEL = "nslab_kind"
#: containerlab's management interface in a container.
MGMT_INTERFACE = "eth0"
#: The MTU of a veth nslab makes (the kernel's default) when a link gives none.
VETH_MTU = 1500
#: The lab's name in container names (``clab-<lab>-<node>``).
LAB_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: A container image reference: no space, no quote, no newline.
IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}$")
#: A version in an image's tag: ``10.3.1``, ``v8.4.1``, ``containerlab-10.7.1``.
RELEASE_RE = re.compile(r"(?:[A-Za-z]+-)?v?(\d+\.\d+(?:\.\d+)?)")


@dataclass
class ClabExport:
    """An exported lab.

    Attributes:
        document: the ``.clab.yml`` content (plain data).
        files: files the document binds into containers, by path relative to
            the ``.clab.yml``'s folder.
        notes: what did not carry over, one line each (also in the file's
            header).
    """

    document: Dict[str, Any]
    files: Dict[str, str] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)
    source: str = ""

    def text(self) -> str:
        """The ``.clab.yml``: a comment header, then the document as YAML."""
        head = [f"containerlab topology exported by nslab from {self.source!r}",
                "deploy: containerlab deploy -t <this file>; on Kubernetes: clabernetes "
                "(nslab's docs/multi-host.md)",
                "switches are linux containers running a Linux bridge (no host bridge needed)"]
        head += [f"note: {n}" for n in self.notes]
        out = "".join(f"# {_comment(h)}\n" for h in head)
        return out + yaml.safe_dump(self.document, sort_keys=False, default_flow_style=False,
                                    width=4096)


def _comment(text: str) -> str:
    """One comment line: printable ASCII only (no line break can end the comment)."""
    return re.sub(r"[^\x20-\x7e]", "?", text)


def lab_name(topo: Topology, name: Optional[str]) -> str:
    """The lab's name: ``name``, or the topology's with characters outside
    ``[A-Za-z0-9_.-]`` replaced by ``_``."""
    if name is None:
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", os.path.basename(topo.name)).strip("_.-")
        name = name[:64] or "nslab"
    if not LAB_NAME_RE.fullmatch(name):
        raise InputError(f"--name {name!r}: use 1-64 letters, digits, '_', '.' and '-', "
                         "starting with a letter or digit")
    return name


def image_release(image: str) -> Optional[str]:
    """The version an image's tag names (``quay.io/frrouting/frr:10.3.1`` ->
    ``10.3.1``), or None (``latest``, a digest, no tag)."""
    ref = image.split("@", 1)[0]
    _, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag:
        return None
    m = RELEASE_RE.fullmatch(tag)
    return m.group(1) if m else None


# -- export ------------------------------------------------------------------------------
def default_images() -> Dict[str, str]:
    """The image of each registered kind that names one, by kind (``{"frr": ...}``)."""
    return {k.name: k.image.default for k in registered_kinds().values() if k.image}


def export_containerlab(topo: Topology, *, name: Optional[str] = None, image: str = HOST_IMAGE,
                        images: Optional[Dict[str, str]] = None, files_dir: str = "files",
                        mgmt: bool = True, interface_names: str = "keep") -> ClabExport:
    """``topo`` as a containerlab lab (see the module doc for the mapping).

    Args:
        topo: a validated topology.
        name: the lab's name (default: the topology's, made safe).
        image: the image of hosts, plain routers and switches.
        images: by kind, the image of the nodes with its options, instead of
            the kind's own (:func:`default_images`); its tag's version goes
            to the extension of the same name as the kind, to pick the
            configuration layout (FRR 10's ``mgmtd`` or not).
        files_dir: the folder, relative to the ``.clab.yml``, of the files
            bound into containers.
        mgmt: keep containerlab's management network (``eth0``); False gives
            every node ``network-mode: none``: only the topology's links, as
            in nslab.
        interface_names: ``keep`` (nslab's names) or ``eth`` (``eth1``... in
            link order).

    Raises:
        InputError: an option is bad, or the topology uses what cannot be
            exported (an OVS switch's controller or uplink, a feature no
            installed extension renders), naming the field.
    """
    kinds = {k.name: k for k in registered_kinds().values() if k.image}
    unknown = sorted(set(images or {}) - set(kinds))
    if unknown:
        raise InputError(f"no installed kind names an image: {', '.join(unknown)}")
    chosen = {**default_images(), **(images or {})}
    for what, value in [("--image", image)] + [(kinds[k].image.flag, v)  # type: ignore[union-attr]
                                               for k, v in chosen.items()]:
        if not IMAGE_RE.fullmatch(value):
            raise InputError(f"{what} {value!r} is not a container image reference")
    if interface_names not in ("keep", "eth"):
        raise InputError(f"--interface-names {interface_names!r}: use keep or eth")
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", files_dir):
        raise InputError(f"{files_dir!r}: not a plain folder name for the bound files")
    lab = lab_name(topo, name)
    notes = _refuse_unexported(topo)
    renames = _renames(topo, mgmt, interface_names)
    t = renamed(topo, renames)
    if interface_names == "keep":
        notes += [f"{n}: interface {old} is {new} here ({MGMT_INTERFACE} is containerlab's "
                  "management interface)" for (n, old), new in renames.items()]
    extensions = _extensions(t)
    p = plan(t, "clab")
    first = _first_commands(t)
    sysctls = t.sysctls()
    nodes: Dict[str, Any] = {}
    files: Dict[str, str] = {}
    for n, node in t.nodes.items():
        entry: Dict[str, Any] = {"kind": "linux", "image": image, "labels": {KIND_LABEL: node.kind}}
        if not mgmt:
            entry["network-mode"] = "none"
        values = dict(sysctls.get(n, {}))
        if not node.is_switch and (t.ipv6 or node.kind == "router"):
            # IPv6 on, as in nslab's namespaces (a container runtime may turn it off)
            values.setdefault("net.ipv6.conf.all.disable_ipv6", "0")
            values.setdefault("net.ipv6.conf.default.disable_ipv6", "0")
        if values:
            entry["sysctls"] = dict(sorted(values.items()))
        binds = []
        for ext in extensions:
            release = image_release(chosen[ext.name]) if ext.name in chosen else None
            for path, text in ext.export_files(t, n, release).items():
                rel = f"{files_dir}/{n}/{os.path.basename(path)}"
                if rel in files:  # two extensions writing one file: a bug of theirs
                    raise InputError(f"{n}: two extensions write {os.path.basename(path)}")
                files[rel] = text
                binds.append(f"{rel}:{path}")
        for kind, img in chosen.items():
            if any(getattr(node, o, None) is not None
                   for o in kinds[kind].image.options):  # type: ignore[union-attr]
                entry["image"] = img
        if binds:
            entry["binds"] = binds
        cmds = first.get(n, []) + _plan_commands(p, p.nodes[n].netns)
        if cmds:
            entry["exec"] = cmds
        nodes[n] = entry
    links = [{"endpoints": [f"{na}:{ia}", f"{nb}:{ib}"]} for _, na, ia, nb, ib in t.interfaces()]
    if any(link.shaping for link in t.links):
        notes.append("links are shaped with tc inside the containers (the images need tc; "
                     "framing needs ethtool); what the studies measure on them does not carry "
                     "over (docs/multi-host.md)")
    doc = {"name": lab, "topology": {"nodes": nodes, "links": links}}
    return ClabExport(doc, files, notes, topo.name)


def _first_commands(t: Topology) -> Dict[str, List[str]]:
    """Per node, what nslab gives a veth when it makes it: MACs, and the
    kernel's MTU where a link names none (containerlab's veths have 9500)."""
    out: Dict[str, List[str]] = {}
    for (node, intf), mac in t.macs().items():
        out.setdefault(node, []).append(_cmd("ip", line("link", "set", "dev", intf, "address",
                                                         mac)))
    for link, na, ia, nb, ib in t.interfaces():
        if link.mtu is None:
            for node, intf in ((na, ia), (nb, ib)):
                out.setdefault(node, []).append(
                    _cmd("ip", line("link", "set", "dev", intf, "mtu", VETH_MTU)))
    return out


def _plan_commands(p: Any, netns: Optional[str]) -> List[str]:
    """What the build plan does in one namespace, as commands run in the
    node's container: its ``ip`` operations in order, GSO off, ``tc``."""
    if netns is None:
        return []
    cmds = []
    for op in p.ns_ops.get(netns, []):
        if isinstance(op, RouteAdd):
            # replace: a container on the management network has a default
            # route of its own, which the topology's default route replaces
            cmds.append(_cmd("ip", line("route", "replace", *op.route.tokens())))
        else:
            cmds.append(_cmd("ip", op.line()))
    # per-frame overhead counted on every packet: no GSO super-packets (as the lab)
    cmds += [shlex.join(["ethtool", "-K", token(dev), "tso", "off", "gso", "off"])
             for ns, dev in p.gso_off if ns == netns]
    return cmds + [_cmd("tc", tc) for tc in p.tc_lines.get(netns, [])]


def _cmd(program: str, rendered: str) -> str:
    """An ``exec`` command: ``program`` and a line already rendered by
    :func:`nslab.model.render.line` (plain tokens only), quoted for a shell's split."""
    return shlex.join([program, *rendered.split()])


def _refuse_unexported(topo: Topology) -> List[str]:
    """Refuse what depends on this machine; return notes on what changes."""
    notes = []
    for n, node in topo.nodes.items():
        for key, what in (("controller", "an OpenFlow controller"),
                          ("uplink", "a NIC of this machine")):
            if getattr(node, key):
                raise topo.locate(TopologyError(
                    f"{field_path(('nodes', n, key))}: {what} cannot be exported (the switch "
                    "becomes a Linux bridge in a container); remove it to export",
                    ("nodes", n, key)))
        kind = switch_type(topo.switch_type_of(n)) if node.is_switch else None
        if kind is not None and not kind.namespace:
            notes.append(f"{n}: an {kind.label} switch in nslab, a Linux bridge here"
                         + (" (its dpid is not exported)" if node.dpid else ""))
    if topo.placement:
        notes.append("hosts: (which machine runs which node) is not exported: containerlab "
                     "runs every node on its host, clabernetes places them on the cluster")
    return notes


def _extensions(topo: Topology) -> List[Any]:
    """The extensions that render a part of ``topo``; a feature none renders
    is refused (switch types are exported as Linux bridges by the core)."""
    exts = registered()
    for feature in sorted(topo.features()):
        if feature.startswith("switch:"):
            continue
        if not any(feature in e.provides for e in exts.values()):
            raise InputError(f"topology {topo.name!r} needs {feature}, which no installed "
                             "extension renders")
    return [e for e in exts.values() if e.wants(topo)]


def _renames(topo: Topology, mgmt: bool, style: str) -> Dict[Tuple[str, str], str]:
    """``{(node, interface): new name}``: every interface with ``eth``, else
    only one named like the management interface (when there is one)."""
    out: Dict[Tuple[str, str], str] = {}
    for node, names in topo.node_interfaces().items():
        if style == "eth":
            out.update({(node, old): f"eth{i}" for i, old in enumerate(names, 1)
                        if old != f"eth{i}"})
        elif mgmt and MGMT_INTERFACE in names:
            free = next(f"eth{i}" for i in range(1, len(names) + 2) if f"eth{i}" not in names)
            out[(node, MGMT_INTERFACE)] = free
    return out


def renamed(topo: Topology, renames: Dict[Tuple[str, str], str]) -> Topology:
    """A copy of ``topo`` with interfaces renamed (``{(node, old): new}``),
    and every reference to them (routes' ``dev``, and those in the kinds'
    options that say how to rename them: BGP's ``unnumbered``)."""
    if not renames:
        return topo
    data = topo.to_dict()
    for i, (_, na, ia, nb, ib) in enumerate(topo.interfaces()):
        link = data["links"][i]
        for key, node, intf in (("params1", na, ia), ("params2", nb, ib)):
            link.setdefault(key, {})["intf"] = renames.get((node, intf), intf)
    for n, node in data["nodes"].items():
        for route in node.get("routes", []):
            if route.get("dev"):
                route["dev"] = renames.get((n, route["dev"]), route["dev"])
        for key, opt in node_options().items():
            if node.get(key) is not None and opt.rename is not None:
                node[key] = opt.rename(node[key], functools.partial(_new_name, renames, n))
    return Topology.from_dict(data)


def _new_name(renames: Dict[Tuple[str, str], str], node: str, intf: str) -> str:
    return renames.get((node, intf), intf)


def write_export(exp: ClabExport, output: str) -> List[str]:
    """Write the ``.clab.yml`` at ``output`` and its bound files under its
    folder (see :mod:`nslab.safeio`: no link is followed); every path is
    checked before anything is written. Returns the paths written."""
    base = os.path.dirname(os.path.abspath(output))
    paths = [(os.path.join(base, rel), text) for rel, text in sorted(exp.files.items())]
    try:
        for path, _ in paths + [(output, "")]:
            check_path(path, leaf=False)
            if os.path.isdir(path):  # os.replace cannot put a file there
                raise InputError(f"-o {output}: {path} is a directory; give a file name "
                                 "(e.g. lab.clab.yml)")
        for path, text in paths:
            make_dirs(os.path.dirname(path))
            write_atomic(path, text)
        write_atomic(output, exp.text())
    except OSError as exc:  # a file where a folder goes, no permission, a full disk...
        raise InputError(f"-o {output}: cannot write {exc.filename or output}: "
                         f"{exc.strerror or exc}") from None
    return [p for p, _ in paths] + [output]


def files_dir_for(output: str) -> str:
    """The folder of the bound files beside ``output``: its name without
    ``.clab.yml``/``.yml`` (``lab.clab.yml`` -> ``lab``)."""
    stem = os.path.basename(output)
    for ext in (".clab.yml", ".clab.yaml", ".yml", ".yaml"):
        if stem.endswith(ext) and len(stem) > len(ext):
            return stem[:-len(ext)]
    return stem + ".files"


def export_command(topo: Topology, fmt: str, output: Optional[str], **options: Any
                   ) -> Tuple[Optional[str], List[str]]:
    """``nslab topo export``: the text for standard output (None when written
    to ``output``) and the lines to show on standard error."""
    if fmt not in FORMATS:
        raise InputError(f"--format {fmt!r}: unknown export format (known: {', '.join(FORMATS)})")
    target = None if output is None or output == "-" else output
    exp = export_containerlab(topo, files_dir=files_dir_for(target) if target is not None
                              else "files", **options)
    notes = [f"nslab: note: {n}" for n in exp.notes]
    if target is None:
        if exp.files:
            raise InputError(f"{len(exp.files)} configuration files go beside the topology "
                             "file (its FRR routers'): give -o FILE.clab.yml")
        return exp.text(), notes
    written = write_export(exp, target)
    return None, notes + [f"nslab: wrote {target}" + (f" and {len(written) - 1} files under "
                                               f"{files_dir_for(target)}/" if exp.files else "")]


# -- reading back --------------------------------------------------------------------------
def from_containerlab(path: str) -> Topology:
    """The topology a containerlab file describes, as far as nslab can read
    it: nodes (kind from the ``nslab_kind`` label, else guessed: a bridge
    named after the node makes a switch, FRR's files or forwarding a router),
    links with their interface names, addresses and routes (from ``exec``
    commands ``ip addr add`` and ``ip route add|replace``). Shaping, MTUs,
    MACs and FRR's configuration are not read back.

    The file is untrusted: it is read with nslab's bounded YAML loader, and
    every problem is one line naming the file, the line and the field.

    Raises:
        InputError: a malformed file, or one nslab cannot read (another kind
            of node, a node name nslab refuses...).
    """
    doc = read_yaml(path)

    def fail(loc: Tuple[Any, ...], message: str) -> InputError:
        where = f"{field_path(loc)}: " if loc else ""
        return InputError(f"{path}:{line_of(doc, loc)}: {where}{message}")

    if not isinstance(doc, dict):
        raise fail((), "a containerlab topology is a mapping with 'name' and 'topology'")
    topology = doc.get("topology")
    if not isinstance(topology, dict):
        raise fail(("topology",), "must be a mapping with 'nodes' and 'links'")
    nodes = topology.get("nodes")
    if not isinstance(nodes, dict) or not nodes:
        raise fail(("topology", "nodes"), "must be a non-empty mapping of name: node")
    links = topology.get("links") or []
    if not isinstance(links, list):
        raise fail(("topology", "links"), "must be a list")
    defaults = topology.get("defaults")
    defaults = defaults if isinstance(defaults, dict) else {}
    data_nodes, addrs = _read_nodes(nodes, defaults, fail)
    data_links = []
    for i, link in enumerate(links):
        loc = ("topology", "links", i)
        ends = _endpoints(link, loc, fail)
        pair = []
        for j, (node, intf) in enumerate(ends):
            if node not in data_nodes:
                raise fail(loc + ("endpoints", j), f"unknown node {node!r}")
            end: Dict[str, Any] = {"intf": intf}
            if (node, intf) in addrs and data_nodes[node]["kind"] != "switch":
                end["ip"] = addrs[(node, intf)]
            pair.append((node, end))
        data_links.append({"a": pair[0][0], "b": pair[1][0], "params1": pair[0][1],
                           "params2": pair[1][1]})
    name = doc.get("name")
    data = {"name": name if isinstance(name, str) and name else os.path.basename(path)[-120:],
            "auto_ip": False, "nodes": data_nodes, "links": data_links}
    try:
        return Topology.from_dict(data)
    except TopologyError as exc:  # its node or link is the file's at the same key or index
        at = ("topology",) + tuple(exc.loc[:2]) if exc.loc[:1] in (("nodes",), ("links",)) \
            else ()
        raise InputError(f"{path}:{line_of(doc, at)}: as an nslab topology: {exc}") from None


def _read_nodes(nodes: Dict[Any, Any], defaults: Dict[str, Any], fail: Any
                ) -> Tuple[Dict[str, Any], Dict[Tuple[str, str], str]]:
    """The topology's nodes as nslab's plain data, and ``{(node, interface): address}``."""
    data_nodes: Dict[str, Any] = {}
    addrs: Dict[Tuple[str, str], str] = {}
    for name, spec in nodes.items():
        loc: Tuple[Any, ...] = ("topology", "nodes", name)
        spec = {} if spec is None else spec
        if not isinstance(name, str) or not isinstance(spec, dict):
            raise fail(loc, "a node is a name and a mapping")
        kind = spec.get("kind", defaults.get("kind"))
        info = _read_exec(spec.get("exec") or [], name, loc, fail)
        if kind in ("bridge", "ovs-bridge"):
            data_nodes[name] = {"kind": "switch"}
            continue
        if kind != "linux":
            raise fail(loc + ("kind",), f"{kind!r}: nslab reads back nodes of kind linux, "
                                        "bridge and ovs-bridge")
        labels = spec.get("labels")
        labels = labels if isinstance(labels, dict) else {}
        nkind = labels.get(KIND_LABEL)
        if nkind not in KINDS:
            nkind = _guess_kind(spec, info)
        entry: Dict[str, Any] = {"kind": nkind}
        if nkind != "switch":
            lo = info["addrs"].pop("lo", None)
            if lo:
                entry["loopback"] = lo
            if info["routes"]:
                entry["routes"] = info["routes"]
        addrs.update({(name, intf): a for intf, a in info["addrs"].items()})
        data_nodes[name] = entry
    return data_nodes, addrs


def _read_exec(cmds: Any, node: str, loc: Tuple[Any, ...], fail: Any) -> Dict[str, Any]:
    """Addresses, routes and a bridge of the node's own name, from ``exec``
    commands (``ip ...``); other commands are left alone."""
    out: Dict[str, Any] = {"addrs": {}, "routes": [], "bridge": False}
    if not isinstance(cmds, list):
        raise fail(loc + ("exec",), "must be a list of commands")
    for j, cmd in enumerate(cmds):
        if not isinstance(cmd, str):
            raise fail(loc + ("exec", j), "a command is a string")
        try:
            words = shlex.split(cmd)
        except ValueError as exc:
            raise fail(loc + ("exec", j), f"cannot split the command: {exc}") from None
        if len(words) < 3 or words[0] != "ip":
            continue
        obj, verb, rest = words[1], words[2], words[3:]
        if obj in ("addr", "address", "a") and verb == "add" and len(rest) == 3 \
                and rest[1] == "dev":
            out["addrs"].setdefault(rest[2], rest[0])
        elif obj in ("route", "r") and verb in ("add", "replace") and rest:
            out["routes"].append(" ".join(rest))
        elif obj == "link" and verb == "add" and "type" in rest \
                and rest[rest.index("type") + 1:rest.index("type") + 2] == ["bridge"]:
            out["bridge"] = out["bridge"] or node in rest
    return out


def _guess_kind(spec: Dict[str, Any], info: Dict[str, Any]) -> str:
    """A node without nslab's label: a switch if it makes a bridge of its own
    name, a router if it gets FRR's files or forwards, else a host."""
    if info["bridge"]:
        return "switch"
    binds = spec.get("binds")
    binds = binds if isinstance(binds, list) else []
    sysctls = spec.get("sysctls")
    sysctls = sysctls if isinstance(sysctls, dict) else {}
    if any(isinstance(b, str) and ":/etc/frr" in b for b in binds) \
            or str(sysctls.get("net.ipv4.ip_forward", "0")) == "1":
        return "router"
    return "host"


def _endpoints(link: Any, loc: Tuple[Any, ...], fail: Any) -> List[Tuple[str, str]]:
    """The two ``(node, interface)`` ends of a link, brief (``"a:eth1"``) or
    extended (``{node: a, interface: eth1}``)."""
    eps = link.get("endpoints") if isinstance(link, dict) else None
    if not isinstance(eps, list) or len(eps) != 2:
        raise fail(loc, "a link needs 'endpoints', a list of two ends (nslab reads back "
                        "point-to-point veth links)")
    out = []
    for j, ep in enumerate(eps):
        if isinstance(ep, str) and ep.count(":") == 1:
            node, intf = ep.split(":")
        elif isinstance(ep, dict) and isinstance(ep.get("node"), str) \
                and isinstance(ep.get("interface"), str):
            node, intf = ep["node"], ep["interface"]
        else:
            raise fail(loc + ("endpoints", j), f"{ep!r} is not an end: use 'node:interface'")
        out.append((node, intf))
    return out
