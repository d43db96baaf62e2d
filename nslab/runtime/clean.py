"""Find and remove what a run created, by its tag only.

Used both by :class:`nslab.runtime.lab.Lab` on exit and by ``nslab clean`` after a
crash. Objects are found by the run id they carry: namespace names
``<run>-<node>``, root interfaces with ``ifalias nslab:<run>:...``, OVS bridges
with ``external_ids:nslab-run``, processes with ``NSLAB_RUN`` in their
environment, the journal ``/run/nslab/<run>.json`` and work dir
``/run/nslab/<run>/``, and the controller's record of a lab across machines
``/run/nslab/<run>.controller.json`` with its SSH control directory
``$TMPDIR/nslab-<run>-XXXXXXXX`` (:mod:`nslab.runtime.sshcontrol`). Nothing
without the tag is touched; what a journal asks to restore runs only once
checked (:mod:`nslab.runtime.restore`).
"""
from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import shutil
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, ContextManager, Dict, Iterator, List, Optional

from . import extension, offloads, statefile
from .restore import printable_text, run_restore
from .sshcontrol import control_dirs, remove_control_dir
from ..errors import InputError, LabError
from ..model.naming import ALIAS_PREFIX, NS_RE, RUN_RE, STATE_DIR, check_state_dir
from .proc import kill_pids, pids_with_tag, process_name, run, same_process, tagged_pids
from ..model import bounded
from ..model.topo import Topology
from ..model import render

log = logging.getLogger(__name__)


@dataclass
class Inventory:
    """Everything found for one run."""

    run_id: str
    namespaces: List[str] = field(default_factory=list)
    interfaces: List[str] = field(default_factory=list)
    #: Objects of extensions (``{"ovs": ["nl3f2a-b1"]}``), found by their own tags.
    extra: Dict[str, List[str]] = field(default_factory=dict)
    pids: List[int] = field(default_factory=list)
    journal: Optional[dict] = None
    #: The record of the controller of a lab across machines run from here.
    controller: Optional[dict] = None
    #: That controller's SSH control directories (:func:`control_dirs`).
    control: List[str] = field(default_factory=list)
    #: The owner records found in them (read once, when they were found).
    control_owners: List[dict] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.namespaces or self.interfaces or any(self.extra.values()) or self.pids
                    or self.journal or os.path.isdir(workdir(self.run_id))
                    or os.path.exists(journal_tmp_path(self.run_id))
                    or self.controller is not None or self.control
                    or os.path.exists(statefile.tmp_path(controller_path(self.run_id))))

    def describe(self) -> List[str]:
        exts = extension.registered()
        out = [f"namespace {n}" for n in self.namespaces]
        out += [f"interface {i}" for i in self.interfaces]
        for name, objs in self.extra.items():
            out += [exts[name].describe(o) if name in exts else f"{name} {o}" for o in objs]
        out += [f"process {p} ({process_name(p)})" for p in self.pids]
        for restore in (self.journal or {}).get("restore", []):
            out.append(f"restore {printable_text(restore.get('what', '?'))}")
        if self.journal is not None:
            out.append(f"journal {journal_path(self.run_id)}")
        elif os.path.exists(journal_tmp_path(self.run_id)):
            out.append(f"journal {journal_tmp_path(self.run_id)} (incomplete)")
        if os.path.isdir(workdir(self.run_id)):
            out.append(f"work dir {workdir(self.run_id)}")
        if self.controller is not None or os.path.exists(
                statefile.tmp_path(controller_path(self.run_id))):
            out.append(f"controller record {controller_path(self.run_id)}")
        out += [f"ssh control dir {d}" for d in self.control]
        return out


def journal_path(run_id: str) -> str:
    return os.path.join(STATE_DIR, f"{run_id}.json")


def workdir(run_id: str) -> str:
    return os.path.join(STATE_DIR, run_id)


def topology_path(run_id: str) -> str:
    """A running lab's topology, as data (what ``nslab watch --web`` draws)."""
    return os.path.join(workdir(run_id), "topology.json")


def read_topology(run_id: str) -> Optional[Topology]:
    """The topology the lab ``run_id`` wrote into its work directory
    (:func:`topology_path`, bounded JSON), or None (a lab started by an older
    nslab); a file that is not one is one line naming it."""
    path = topology_path(run_id)
    try:
        data = bounded.load(path)
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise InputError(f"{path}: not a topology: {exc}") from None
    return Topology.from_dict(data)


def journal_tmp_path(run_id: str) -> str:
    """Where :func:`write_journal` writes before the atomic rename."""
    return statefile.tmp_path(journal_path(run_id))


def read_journal(run_id: str) -> Optional[dict]:
    """The run's latest complete journal, or None.

    A run killed between writing the new journal and renaming it over the old
    one leaves ``<run>.json.tmp``; when complete it is the newer state (it may
    record the last change made) and wins (see :mod:`nslab.runtime.statefile`).
    """
    data = statefile.read(journal_path(run_id))
    if data is None or data.get("run") != run_id:
        return None
    restore = data.get("restore", [])
    if not isinstance(restore, list) or not all(isinstance(r, dict) for r in restore):
        log.warning("journal of %s: 'restore' is not a list of records; ignored", run_id)
        data = dict(data, restore=[])
    return data


def write_journal(run_id: str, data: dict) -> None:
    """Write the journal atomically (into a state directory that is root's own:
    :func:`~nslab.model.naming.check_state_dir`)."""
    check_state_dir(STATE_DIR)
    statefile.write(journal_path(run_id), data)


def remove_journal(run_id: str) -> None:
    """Remove the journal and any half-renamed copy of it."""
    statefile.remove(journal_path(run_id))


#: The controller's record's name after the run id (see :func:`controller_path`).
CONTROLLER_SUFFIX = ".controller.json"


def controller_path(run_id: str) -> str:
    """The record the controller of a lab across machines keeps on its own
    machine while the lab is up: which host has each node and how it is
    reached (what ``nslab capture`` uses for a node on another host). Not the
    journal: the controller's machine may hold a part of the lab too, whose
    agent keeps ``<run>.json`` there."""
    return os.path.join(STATE_DIR, f"{run_id}{CONTROLLER_SUFFIX}")


def read_controller(run_id: str) -> Optional[dict]:
    """The controller's record of lab ``run_id`` (see :func:`controller_path`), or None."""
    data = statefile.read(controller_path(run_id))
    return data if data is not None and data.get("run") == run_id else None


def write_controller(run_id: str, data: dict) -> None:
    """Write the controller's record atomically (root's own state directory)."""
    check_state_dir(STATE_DIR)
    statefile.write(controller_path(run_id), data)


def remove_controller(run_id: str) -> None:
    statefile.remove(controller_path(run_id))


def live_controllers() -> List[str]:
    """Run ids of the labs across machines whose controller runs here (alive)."""
    check_state_dir(STATE_DIR)
    try:
        entries = os.listdir(STATE_DIR)
    except OSError:
        return []
    rids = [e[:-len(CONTROLLER_SUFFIX)] for e in entries if e.endswith(CONTROLLER_SUFFIX)]
    return sorted(r for r in rids if RUN_RE.fullmatch(r) and run_is_live(read_controller(r)))


def run_is_live(journal: Optional[dict]) -> bool:
    """True if the process that owns a run is still alive (same pid and start time)."""
    if not journal:
        return False
    # a journal is data: a pid or start time that is not one is no live run
    return same_process(journal.get("pid"), journal.get("pid_start"))


def discover(run_id: Optional[str] = None,
             tagged: Optional[Dict[int, str]] = None) -> Dict[str, Inventory]:
    """Find tagged objects of every run (or of ``run_id``); ``tagged``: the
    tagged processes under this root if already scanned (:func:`tagged_pids`)."""
    runs: Dict[str, Inventory] = {}

    def inv(rid: str) -> Inventory:
        return runs.setdefault(rid, Inventory(rid))

    def want(rid: str) -> bool:
        return run_id is None or rid == run_id

    check_state_dir(STATE_DIR)  # its journals hold commands to run as root
    try:
        for entry in os.listdir(STATE_DIR):
            rid, is_journal, is_controller = entry, False, False
            for suffix in (".json", ".json.tmp"):
                if entry.endswith(suffix):
                    rid, is_journal = entry[:-len(suffix)], True
            for suffix in (CONTROLLER_SUFFIX, statefile.tmp_path(CONTROLLER_SUFFIX)):
                if entry.endswith(suffix):
                    rid, is_journal, is_controller = entry[:-len(suffix)], False, True
            if RUN_RE.fullmatch(rid) and want(rid):
                inv(rid).journal = read_journal(rid) if is_journal else inv(rid).journal
                if is_controller:
                    inv(rid).controller = read_controller(rid)
    except OSError:
        pass
    res = run(["ip", "netns", "list"], check=False)
    for line in res.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = NS_RE.fullmatch(name)
        if m and want(m.group(1)):
            inv(m.group(1)).namespaces.append(name)
    res = run(["ip", "-j", "link", "show"], check=False)
    try:
        links = json.loads(res.stdout or "[]")
    except ValueError:
        links = []
    for link in links:
        alias = link.get("ifalias", "")
        if alias.startswith(ALIAS_PREFIX):
            rid = alias.split(":")[1]
            if RUN_RE.fullmatch(rid) and want(rid):
                inv(rid).interfaces.append(link["ifname"])
    for name, ext in extension.registered().items():
        for rid, objs in ext.discover(run_id).items():
            if RUN_RE.fullmatch(rid) and want(rid):
                inv(rid).extra.setdefault(name, []).extend(objs)
    for pid, rid in (pids_with_tag(run_id) if tagged is None else tagged).items():
        if RUN_RE.fullmatch(rid):
            inv(rid).pids.append(pid)
    for rid, dirs in control_dirs(run_id).items():
        for path, owner in dirs:
            inv(rid).control.append(path)
            if owner is not None:
                inv(rid).control_owners.append(owner)
    return runs


def remove(inv: Inventory) -> List[str]:
    """Remove one run's objects in stages; each stage is best effort and logged.

    Returns the problems met (empty if everything went).
    """
    problems: List[str] = []

    def stage(name: str, fn: Callable[[], object]) -> None:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - teardown must go on
            log.warning("teardown %s: %s: %s", inv.run_id, name, exc)
            problems.append(f"{name}: {exc}")

    journal = inv.journal or read_journal(inv.run_id) or {}
    # Restore anything the run changed outside its own objects (e.g. an uplink NIC).
    for item in reversed(journal.get("restore", [])):
        stage(f"restore {printable_text(item.get('what'))}",
              functools.partial(run_restore, item, inv.run_id))
    stage("processes", lambda: _kill_tagged(inv))
    exts = extension.registered()
    for name, objs in inv.extra.items():
        if objs and name in exts:
            stage(f"{name} objects", functools.partial(exts[name].remove, inv.run_id, objs))
    # Namespaces first: the kernel then removes every veth with an end in them,
    # root ends included, in one batch (one RCU grace period for all), where
    # ``ip link del`` pays one per interface (~25 ms: 1.6 s for 64 OVS ports).
    paired_in_root = _paired_in_root(inv.interfaces)
    if inv.namespaces:
        stage("namespaces", lambda: _batch([("netns", "del", n) for n in inv.namespaces]))
    if inv.interfaces:
        stage("interfaces", lambda: _del_root_interfaces(inv.interfaces, paired_in_root))
    stage("work dir", lambda: shutil.rmtree(workdir(inv.run_id), ignore_errors=True))
    stage("journal", lambda: remove_journal(inv.run_id))
    stage("controller record", lambda: remove_controller(inv.run_id))
    for path in inv.control:
        stage(f"ssh control dir {path}", functools.partial(remove_control_dir, path))
    used = set((journal.get("extensions") or {})) | {n for n, o in inv.extra.items() if o}
    if used:
        live = live_journals(exclude=inv.run_id)
        for name in sorted(used & set(exts)):
            stage(f"{name} release", functools.partial(exts[name].release, journal, live))
    return problems


def live_journals(exclude: Optional[str] = None) -> List[dict]:
    """Journals of the runs whose owning process is alive (other than ``exclude``)."""
    out: List[dict] = []
    check_state_dir(STATE_DIR)
    try:
        entries = os.listdir(STATE_DIR)
    except OSError:
        return out
    for entry in entries:
        if entry.endswith(".json") and RUN_RE.fullmatch(entry[:-5]) and entry[:-5] != exclude:
            j = read_journal(entry[:-5])
            if run_is_live(j):
                out.append(j)  # type: ignore[arg-type]
    return out


def _kill_tagged(inv: Inventory, rounds: int = 3) -> None:
    """Kill the run's processes, then look again until a scan finds none.

    One scan can miss a process (one being exec'd reads as having no
    environment for an instant); a missed one would outlive its namespace.
    """
    pids = set(inv.pids) | set(pids_with_tag(inv.run_id))
    for _ in range(rounds):
        if not pids:
            return
        kill_pids(sorted(pids))
        pids = set(pids_with_tag(inv.run_id))
    if pids:
        raise RuntimeError(f"processes still running: {sorted(pids)}")


def _batch(commands: List[tuple]) -> None:
    lines = [render.line(*c) for c in commands]
    if lines:
        res = run(["ip", "-force", "-batch", "-"], input=render.text(lines), check=False)
        if not res.ok and "Cannot find device" not in res.stderr:
            raise RuntimeError(res.stderr.strip().splitlines()[-1] if res.stderr.strip() else "ip -batch failed")


def _sys_int(dev: str, attr: str) -> Optional[int]:
    try:
        with open(f"/sys/class/net/{dev}/{attr}") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def _paired_in_root(names: List[str]) -> set:
    """Those of ``names`` whose veth peer is in the root namespace too (a link
    between two root-namespace switches): deleting namespaces does not remove them."""
    by_index = {}
    try:
        devs = os.listdir("/sys/class/net")
    except OSError:
        return set(names)
    for dev in devs:
        idx = _sys_int(dev, "ifindex")
        if idx is not None:
            by_index[idx] = dev
    out = set()
    for n in names:
        idx, peer = _sys_int(n, "ifindex"), _sys_int(n, "iflink")
        if peer is None or peer == idx:
            out.add(n)  # not a veth end, or unreadable: delete it by name
        elif peer in by_index and _sys_int(by_index[peer], "iflink") == idx:
            out.add(n)
    return out


def _del_root_interfaces(names: List[str], paired_in_root: set, settle: float = 5.0) -> None:
    """Delete the run's root-namespace interfaces once the deleted namespaces
    have taken their peers with them (the kernel does that in the background:
    wait up to ``settle`` s for it), and by name those it will not take (links
    between two root-namespace switches) or that are still there after it."""
    deadline = time.monotonic() + settle
    waiting = [n for n in names if n not in paired_in_root]
    while time.monotonic() < deadline:
        waiting = [n for n in waiting if os.path.exists(f"/sys/class/net/{n}")]
        if not waiting:
            break
        time.sleep(0.01)
    left = [n for n in names if os.path.exists(f"/sys/class/net/{n}")]
    if left:
        _batch([("link", "del", "dev", n) for n in left])


def clean(run_id: Optional[str] = None, dry_run: bool = False, force: bool = False
          ) -> Dict[str, List[str]]:
    """Remove leftovers of crashed runs (skip live ones unless ``force``).

    Returns ``{run_id: [descriptions]}`` of what was (or would be) removed.
    """
    report: Dict[str, List[str]] = {}
    # a run whose processes live under another root directory (a chroot's
    # nslab: the Debian 13 tier's shares this machine's PIDs and links) keeps
    # its journal in that root's /run: only its own clean can tell it crashed
    elsewhere: Dict[str, int] = {}
    here, there = tagged_pids(run_id)  # one scan of the processes for both
    for pid, rid in sorted(there.items()):
        elsewhere.setdefault(rid, pid)
    for rid, inv in sorted(discover(run_id, here).items()):
        if inv.empty:
            continue
        # a namespace (in this root's /run/netns) or a process of its own here
        # makes the run this root's (two roots may draw the same run id)
        if rid in elsewhere and inv.journal is None and inv.controller is None \
                and not inv.namespaces and not inv.pids:
            report[rid] = [f"skipped: run of another root directory (pid {elsewhere[rid]} runs "
                           "under a chroot): its own nslab clean removes it"]
            continue
        owner = next((j for j in [inv.journal, inv.controller, *inv.control_owners]
                      if run_is_live(j)), None)
        if owner is not None and not force:
            report[rid] = [f"skipped: run is live (pid {owner.get('pid')}); use --force"]
            report[rid] += restore_stale_offloads(rid, dry_run)
            continue
        report[rid] = inv.describe()
        if not dry_run:
            problems = remove(inv)
            report[rid] += [f"problem: {p}" for p in problems]
    # a run's cpu group, once no process is in it (a live run's is never empty)
    from .cpufirst import remove_empty
    for rid, what in remove_empty(run_id, dry_run).items():
        report.setdefault(rid, []).append(what)
    return report


def restore_stale_offloads(run_id: str, dry_run: bool = False) -> List[str]:
    """Put back the segmentation offloads a process turned off on a live
    lab's interfaces (``nslab capture --as-wire``) and died before putting
    back (:mod:`nslab.runtime.offloads`): each record's commands checked as a
    journal's are (:func:`~nslab.runtime.restore.restore_problem`), then the record removed. What
    was (or would be) done, one line each."""
    out = []
    for path, record in offloads.stale(workdir(run_id)):
        pid = record.get("pid")
        for item in record.get("restore", []):
            what = printable_text(item.get("what", "?") if isinstance(item, dict) else "?")
            if dry_run:
                out.append(f"would restore {what} (process {pid} is gone)")
                continue
            try:
                if not isinstance(item, dict):
                    raise RuntimeError("refused: not a restore record")
                run_restore(item, run_id)
                out.append(f"restored {what} (process {pid} is gone)")
            except (RuntimeError, OSError, LabError) as exc:
                out.append(f"problem: restore {what}: {exc}")
        if not dry_run:
            statefile.remove(path)
    return out


def block_sigint() -> ContextManager[None]:
    """Context manager: ignore SIGINT and SIGTERM while tearing down (main thread
    only), so a second Ctrl-C or a supervisor's SIGTERM cannot cut teardown short."""

    @contextlib.contextmanager
    def _cm() -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        old = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)
    return _cm()
