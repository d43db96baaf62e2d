"""Stock kernels in QEMU guests: the features and NIC drivers users' machines have.

A guest boots a Debian kernel package unpacked into a cache (never installed
into what the host boots) with virtme-ng: the host's root filesystem is shared
read-only, ``/etc`` and ``/var`` get writable overlays (OVS keeps its database
there), and chosen directories are shared read-write to return results.
Emulated NICs (``rtl8139``, driver 8139cp; ``e1000``) can join two guests
over a QEMU stream socket (a Unix socket in the abstract namespace: no file,
nothing left behind), so a physical-NIC flow runs across two boxes with real
drivers. A stream, not a UDP socket: when a TCG guest falls behind, QEMU stops
reading its socket, and a UDP socket's buffer then overflows in the host
kernel (counted in the host's ``Udp RcvbufErrors``), dropping frames no real
wire would; a stream holds the sender back instead.

KVM is used where it can run a guest (``/dev/kvm`` usable and the CPU offers
vmx/svm), else TCG. Every guest has a hard timeout; its serial console (kernel
messages and the command's stderr) is saved, and QEMU is killed, with its whole
process group, when the guest is done, times out, or the caller is interrupted.

Used by ``make test-kernel`` and ``nslab vm run``.
"""
from __future__ import annotations

import glob
import logging
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import IO, Dict, List, Optional

from ..errors import CapabilityError, InputError, LabError
from ..safeio import make_dirs, open_new
from .pyboot import venv_config

log = logging.getLogger(__name__)

#: Where ``scripts/setup-kernel.sh`` unpacks kernel packages (git-ignored). Not
#: under /var/cache or /tmp: the guest mounts its own tmpfs there.
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_CACHE = os.path.join(_CHECKOUT, ".cache", "kernel")
NIC_MODELS = {"rtl8139": "8139cp", "e1000": "e1000", "virtio-net-pci": "virtio_net"}
MAC_RE = re.compile(r"52:54:00(:[0-9a-f]{2}){3}")
WIRE_RE = re.compile(r"[A-Za-z0-9-]{1,100}")


def cache_dir() -> str:
    return os.environ.get("NSLAB_KERNEL_CACHE", DEFAULT_CACHE)


def find_kernel(cache: Optional[str] = None, name: Optional[str] = None) -> str:
    """The kernel to boot.

    Args:
        cache: where ``scripts/setup-kernel.sh`` unpacked kernels (default
            :func:`cache_dir`).
        name: one of them by its link in the cache, e.g. ``bookworm`` or
            ``trixie`` (``KERNEL_DIST`` of setup-kernel.sh), or by its folder
            (``linux-image-6.12.118+deb13-amd64``). Without it:
            ``$NSLAB_KERNEL`` (a vmlinuz), else this machine's release's
            kernel (``current``), else the newest unpacked.
    """
    cache = cache or cache_dir()
    if name:
        if "/" in name or name in (".", ".."):
            raise InputError(f"kernel {name!r}: name a kernel in {cache} (e.g. bookworm, trixie)")
        found = sorted(glob.glob(os.path.join(cache, name, "boot", "vmlinuz-*")))
        if not found:
            raise CapabilityError(f"no kernel {name!r} unpacked in {cache}: run `make test-kernel` "
                                  f"or KERNEL_DIST={name} scripts/setup-kernel.sh")
        return found[-1]
    explicit = os.environ.get("NSLAB_KERNEL")
    if explicit:
        if not os.path.isfile(explicit):
            raise CapabilityError(f"NSLAB_KERNEL={explicit}: no such file")
        return explicit
    found = sorted(glob.glob(os.path.join(cache, "current", "boot", "vmlinuz-*")))
    found = found or sorted(glob.glob(os.path.join(cache, "*", "boot", "vmlinuz-*")))
    if not found:
        raise CapabilityError(f"no stock kernel unpacked in {cache}: run `make test-kernel` "
                              "or scripts/setup-kernel.sh (it never installs a kernel into what "
                              "this machine boots)")
    return found[-1]


def kernel_release(vmlinuz: str) -> str:
    """``6.1.0-56-amd64`` from ``.../boot/vmlinuz-6.1.0-56-amd64``."""
    return os.path.basename(vmlinuz).split("vmlinuz-", 1)[1]


#: The shell a guest runs first to hold programs in its RAM (:func:`hold_script`).
HOLD_SH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hold.sh")
#: Starts a module with ``python -I -S`` and the packages ``site`` would have
#: found, without its start-up (:mod:`nslab.hosts.pyboot`): a guest's Python.
PYBOOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pyboot.py")
CACHE_SH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cache.sh")
#: The 9p tag virtme-ng gives its N-th shared folder (``--rwdir`` ones first,
#: then ``--rodir`` ones).
INITMOUNT_TAG = "virtme.initmount{}"
#: Where a guest with :attr:`Guest.cached` folders mounts the host's root (read
#: only, cached) to bind them from: one share, so that the kernel's command
#: line (2,048 bytes, with virtme-ng's three arguments per share) stays short.
#: A folder every root has.
CODE_MOUNT = "/mnt"


def code_dirs(python: str, root: Optional[str] = None) -> List["tuple[str, str]"]:
    """The folders a guest's ``python`` (a venv's, as a path in the guest)
    imports from, as ``(guest path, host path)`` pairs for :attr:`Guest.cached`:
    the standard library and, where the venv includes them, the system's
    packages (both under ``root`` on this machine, when the guest boots on
    one), the venv's packages, and this checkout's code (``nslab`` and the
    folders it links to, the tests). Each is a folder the guest sees at the
    same path anyway (the root, or the checkout shared with it), so one that
    cannot be cached stays readable (``cache.sh``).

    Under TCG, with the root shared without a cache, every import reads the
    host's files again. Side by side on the development VM (2026-11-30, one
    vCPU, this machine's root, alternating, the median of two guests each way):
    a guest starting ``nslab --help`` twice and pytest's collection of one
    test module took 60.8 s cached against 89.2 uncached; the first
    ``nslab --help`` 9.5 s against 15.8, the collection 27.0 s against 42.4.
    Mounting the share adds no time we could measure."""
    venv = os.path.dirname(os.path.dirname(python))
    host_venv = os.path.join(root, venv.lstrip("/")) if root and not os.path.isdir(venv) else venv
    try:
        cfg = venv_config(host_venv)
    except OSError:
        return []
    m = re.match(r"(\d+)\.(\d+)", cfg.get("version", ""))
    if not m:
        return []
    ver = f"python{m.group(1)}.{m.group(2)}"
    system = [f"/usr/lib/{ver}"]
    if cfg.get("include-system-site-packages", "").lower() == "true":
        system.append("/usr/lib/python3/dist-packages")
    pairs = [(d, os.path.join(root, d.lstrip("/")) if root else d) for d in system]
    pairs.append((os.path.join(venv, "lib", ver, "site-packages"),
                  os.path.join(host_venv, "lib", ver, "site-packages")))
    code = [os.path.join(_CHECKOUT, "nslab"), os.path.join(_CHECKOUT, "tests")]
    pkg = os.path.join(_CHECKOUT, "nslab")
    for name in sorted(os.listdir(pkg)) if os.path.isdir(pkg) else []:
        link = os.path.join(pkg, name)
        if os.path.islink(link):
            target = os.path.realpath(link)
            if os.path.dirname(target) == _CHECKOUT:  # a top-level folder of the checkout
                code.append(target)
    pairs += [(d, d) for d in code]
    return [(g, h) for g, h in pairs
            if os.path.isdir(h) and not re.search(r"\s", g + h)]  # cache.sh reads words


#: The files a guest reads from its output folder, by what they hold: the
#: folders to cache (``cache.sh``), the programs to hold (``hold.sh``), and its
#: script (:meth:`Guest.script`). :class:`RunningGuest` writes them.
GUEST_FILES = ("cache.list", "hold.list", "script.sh")


def guest_file(out_dir: str, name: str, kind: str) -> str:
    """Guest ``name``'s file of ``kind`` (one of :data:`GUEST_FILES`) in
    ``out_dir``, named after the guest: guests may share ``out_dir``."""
    if kind not in GUEST_FILES:
        raise ValueError(f"no guest file of kind {kind!r}")
    return os.path.join(out_dir, f"{name}.{kind}")


def hold_script(out_dir: str, name: str, root: bool) -> str:
    """The guest's first command, holding programs and the libraries they
    load in the guest's RAM (:data:`HOLD_SH`: its overlays copy them up into
    their tmpfs), so that starting one reads nothing from the host's files
    again. It reads what to hold from ``<name>.hold.list`` in ``out_dir``
    (:func:`guest_file`, written by :class:`RunningGuest`): the files themselves, found here, for
    a guest on this machine's root (``root`` false); the programs' names for
    one on another root, found there.

    A guest's root is the host's (or a Debian 13 root) over 9p without a
    cache: each start of a program read it and its libraries from the host
    again. Under TCG, ``ip link show lo`` took 140 ms from the host's files,
    77 ms from the guest's RAM (30 runs each, 2026-11-29), and a test or a
    bed starts hundreds of programs. The root is read-only: the copies live
    in the overlays' upper layers and die with the guest. A file, not
    arguments: the kernel's command line, which carries the command, holds
    2,048 bytes."""
    mode = "--names" if root else "--list"
    listed = guest_file(out_dir, name, "hold.list")
    return f"sh {shlex.quote(HOLD_SH)} {mode} {shlex.quote(listed)}; "


#: Where a held file may be: the folders a guest's overlays cover.
HOLD_UNDER = ("/usr/", "/lib/", "/lib64/", "/bin/", "/sbin/")
_LDD_PATH = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x[0-9a-f]+\)")


def hold_files(programs: List[str]) -> List[str]:
    """The files :func:`hold_script` would hold for ``programs``, found here,
    for a guest whose root is this machine's (the same files): each program's
    real path and the libraries ``ldd`` names, under :data:`HOLD_UNDER`."""
    paths = [os.path.realpath(p) for p in map(shutil.which, programs) if p]
    try:
        out = subprocess.run(["ldd", *paths], capture_output=True, text=True,
                             timeout=60).stdout if paths else ""
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    libs = [m.group(1) for m in map(_LDD_PATH.search, out.splitlines()) if m]
    files: List[str] = []
    for f in paths + libs:
        if f.startswith(HOLD_UNDER) and f not in files:
            files.append(f)
    return files


_BOOT_IMAGES: Dict[str, str] = {}


def boot_image(vmlinuz: str) -> str:
    """What QEMU boots for ``vmlinuz``: the uncompressed PVH kernel inside it
    (:mod:`.bootimage`; the guest then skips decompressing itself, 7-9 s of
    every TCG boot here), kept beside it as ``vmlinux-<release>`` the first
    time; the vmlinuz itself when it has none, or when it lies outside the
    kernel cache (a file of the user's: nothing is written beside it)."""
    if vmlinuz in _BOOT_IMAGES:
        return _BOOT_IMAGES[vmlinuz]
    from . import bootimage
    from ..safeio import write_atomic
    chosen = vmlinuz
    boot_dir = os.path.dirname(os.path.realpath(vmlinuz))
    cache = os.path.realpath(cache_dir())
    name = os.path.basename(vmlinuz)
    if name.startswith("vmlinuz-") and boot_dir.startswith(cache + os.sep):
        target = os.path.join(boot_dir, "vmlinux-" + name[len("vmlinuz-"):])
        try:
            src, have = os.stat(vmlinuz), None
            try:
                have = os.lstat(target)
            except FileNotFoundError:
                pass
            if (have is not None and stat.S_ISREG(have.st_mode)
                    and have.st_mtime >= src.st_mtime and have.st_size > 0):
                chosen = target
            else:
                with open(vmlinuz, "rb") as f:
                    image = bootimage.vmlinux(f.read(bootimage.MAX_IMAGE))
                write_atomic(target, image)
                chosen = target
        except (bootimage.NotBootable, OSError) as exc:
            log.info("booting %s compressed (no PVH image: %s)", vmlinuz, exc)
    _BOOT_IMAGES[vmlinuz] = chosen
    return chosen


def vng_path() -> str:
    """virtme-ng's ``vng``, next to this Python or on PATH."""
    cand = os.path.join(os.path.dirname(sys.executable), "vng")
    found = cand if os.path.exists(cand) else shutil.which("vng")
    if not found:
        raise CapabilityError("virtme-ng is not installed: run `make test-kernel` (pip install "
                              "virtme-ng into the venv)")
    return found


def kvm_usable() -> bool:
    """True when KVM can run a guest: the device is usable and the CPU offers
    hardware virtualisation (``/dev/kvm`` alone is not enough: measured here, it
    exists without vmx/svm and a guest hangs after decompression)."""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return False
    return bool(re.search(r"^flags\s*:.*\b(vmx|svm)\b", flags, re.M))


#: How long a guest whose NIC connects waits for its peer's QEMU to listen.
PEER_WAIT_S = 60.0


def listening_abstract(name: str) -> bool:
    """True when a Unix socket named ``@name`` (abstract namespace) listens on this host."""
    try:
        with open("/proc/net/unix") as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return False
    # Num RefCount Protocol Flags Type St Inode Path; St 01 = listening (SS_UNCONNECTED)
    # with the __SO_ACCEPTCON flag (0x10000) set
    for line in lines:
        parts = line.split()
        if len(parts) >= 8 and parts[7] == "@" + name and int(parts[3], 16) & 0x10000:
            return True
    return False


@dataclass
class Nic:
    """An emulated NIC joined to a peer guest's over a Unix stream socket.

    Attributes:
        model: QEMU device (``rtl8139`` -> the Realtek 8139cp driver, ``e1000``).
        mac: its own MAC (two guests must differ: QEMU's default is shared).
        wire: the abstract socket's name both ends use.
        listen: this end's QEMU listens (start its guest first); the other connects.
    """

    model: str
    mac: str
    wire: str
    listen: bool

    def __post_init__(self) -> None:
        if self.model not in NIC_MODELS:
            raise InputError(f"unknown NIC model {self.model!r} (use {', '.join(NIC_MODELS)})")
        if not MAC_RE.fullmatch(self.mac):
            raise InputError(f"NIC MAC {self.mac!r}: use 52:54:00:xx:xx:xx")
        if not WIRE_RE.fullmatch(self.wire):
            raise InputError(f"NIC wire {self.wire!r}: use letters, digits and '-' only")

    @property
    def driver(self) -> str:
        return NIC_MODELS[self.model]

    def qemu_args(self, index: int) -> List[str]:
        nid = f"nslabnic{index}"
        server = "on" if self.listen else "off"
        return ["-netdev", f"stream,id={nid},server={server},addr.type=unix,"
                           f"addr.path={self.wire},addr.abstract=on",
                "-device", f"{self.model},netdev={nid},mac={self.mac}"]


def nic_pair(model_a: str, model_b: str, tag: int = 1) -> "tuple[Nic, Nic]":
    """Two NICs wired to each other (one for each guest); the second listens, so
    start its guest first (:func:`start` waits for it before starting the first)."""
    wire = f"nslab-wire-{os.getpid()}-{tag}-{os.urandom(4).hex()}"
    return (Nic(model_a, f"52:54:00:ab:{tag:02x}:01", wire, listen=False),
            Nic(model_b, f"52:54:00:ab:{tag:02x}:02", wire, listen=True))


#: Exported in every guest unless :attr:`Guest.env` says otherwise: matplotlib's
#: font cache in /tmp (``/root`` is read-only in a guest, so without it every
#: process that plots builds the cache again: importing pyplot took 22.8-23.9 s
#: against 15.6 s, 6.1 guest under TCG).
#: No pydantic plugin is looked for: finding none means reading every installed
#: package's metadata, over 9p, in the first model the guest builds.
GUEST_ENV: Dict[str, str] = {"MPLCONFIGDIR": "/tmp/nslab-mpl", "PYDANTIC_DISABLE_PLUGINS": "__all__"}
#: The stock-kernel tier's guests also write reports without their figures
#: (nslab.store.reporting.NO_PLOTS_ENV): drawing under TCG costs tens of seconds.
TIER_ENV: Dict[str, str] = {"NSLAB_NO_PLOTS": "1"}


#: Modules udev's coldplug would load for QEMU's q35 machine and its CPU (the
#: kvm modules, the CPU's crypto, the SATA, watchdog, SMBus, PC speaker and
#: mouse drivers): no guest of the lab uses them, and under TCG loading them
#: took about 8 s of each boot (a bare guest of Debian 12's 6.1 booted in 27.5
#: s with them, 19.7 s without, on the development VM). Named to the kernel as
#: ``modprobe.blacklist``, which udev honours and an explicit ``modprobe`` (the
#: kernel's own requests for a link type or qdisc) does not.
COLDPLUG_SKIP = ("kvm_amd", "kvm_intel", "kvm", "ccp", "irqbypass", "crct10dif_pclmul",
                 "crc32_pclmul", "crc32c_intel", "ghash_clmulni_intel", "sha512_ssse3",
                 "sha256_ssse3", "sha1_ssse3", "sr_mod", "sg", "ahci", "iTCO_wdt",
                 "intel_pmc_bxt", "aesni_intel", "psmouse", "i6300esb", "evdev", "i2c_i801",
                 "lpc_ich", "serio_raw", "pcspkr", "qemu_fw_cfg", "button")


@dataclass
class Guest:
    """One QEMU guest running one shell command.

    Attributes:
        name: a label (file names, logs).
        command: the shell command run in the guest (as root, cwd ``cwd``).
        out_dir: where its console log goes; shared read-write with the guest.
        rwdirs: more host directories the guest may write.
        nics: emulated NICs.
        cpus, memory: guest size.
        timeout: seconds before the guest is killed.
        kernel: a vmlinuz (default: the newest in the cache).
        env: environment variables exported before ``command``, over
            :data:`GUEST_ENV` (the guest's defaults).
        root: a folder the guest boots on as its root filesystem (virtme-ng
            ``--root``, read-only, e.g. the Debian 13 root of
            ``scripts/setup-debian13.sh``; the kernel's modules must be in its
            ``/usr/lib/modules``); default: this machine's root, read-only.
        binds: ``(guest path, host path)`` pairs shared read-write, mounted in
            this order before ``out_dir`` and ``rwdirs`` (with ``root``, this
            machine's folders are only seen through these).
        qemu_opts: more QEMU options (after the NICs'), e.g. ``-icount
            shift=2,sleep=off`` for a clock that counts instructions.
        run_tag: a lab run id the guest belongs to: QEMU then carries it
            (``NSLAB_RUN``), so ``nslab clean`` stops a guest whose controller
            died; without it, QEMU is no lab process.
        idle: run QEMU at the ``SCHED_IDLE`` policy: it takes only CPU time no
            other task wants (for a guest whose clock counts instructions,
            whose answers the host's load cannot move).
        compressed: boot ``kernel`` as it is, not the uncompressed kernel
            inside it (:func:`boot_image`).
        hold: programs (names on the guest's PATH, or paths) to hold in the
            guest's RAM, with their libraries, before ``command`` runs
            (:func:`hold_script`).
        cached: ``(guest path, host path)`` folders the guest only reads
            (code: :func:`code_dirs`), bind-mounted before ``command`` runs
            from one more share of the host's root, read-only and mounted with
            the guest's page and dentry caches at :data:`CODE_MOUNT`
            (``cache.sh``): the host must not change them while the guest runs.
        kernel_args: more options on the guest kernel's command line (each
            one ``--append``), e.g. ``transparent_hugepage=never``.
    """

    name: str
    command: str
    out_dir: str
    rwdirs: List[str] = field(default_factory=list)
    nics: List[Nic] = field(default_factory=list)
    cpus: int = 2
    memory: str = "2G"
    timeout: float = 900.0
    kernel: Optional[str] = None
    cwd: str = field(default_factory=os.getcwd)
    env: Dict[str, str] = field(default_factory=dict)
    kvm: Optional[bool] = None
    root: Optional[str] = None
    binds: List["tuple[str, str]"] = field(default_factory=list)
    qemu_opts: List[str] = field(default_factory=list)
    run_tag: Optional[str] = None
    idle: bool = False
    compressed: bool = False
    hold: List[str] = field(default_factory=list)
    cached: List["tuple[str, str]"] = field(default_factory=list)
    kernel_args: List[str] = field(default_factory=list)

    def code_tag(self) -> str:
        """The 9p tag of the host's root shared for :attr:`cached`: virtme-ng
        numbers its shared folders, ``--rwdir`` ones first."""
        return INITMOUNT_TAG.format(len(self.binds) + 1 + len(self.rwdirs))

    def script(self) -> str:
        """The shell script the guest runs: its exports, the mounting of its
        code folders through the guest's cache (``cached``: :data:`CACHE_SH`),
        the holding of its programs in its RAM (``hold``: :func:`hold_script`),
        then ``command`` in ``cwd``."""
        env = {**GUEST_ENV, **self.env}
        exports = "".join(f"export {k}={shlex.quote(v)}; " for k, v in sorted(env.items()))
        hold = hold_script(self.out_dir, self.name, bool(self.root)) if self.hold else ""
        listed = guest_file(self.out_dir, self.name, "cache.list")
        cache = f"sh {shlex.quote(CACHE_SH)} {shlex.quote(listed)}; " if self.cached else ""
        return f"{exports}{cache}{hold}cd {shlex.quote(self.cwd)} && {self.command}\n"

    def argv(self) -> List[str]:
        """vng's command line. The guest runs :meth:`script` from the file
        :func:`guest_file` names (written by :class:`RunningGuest`): virtme-ng
        passes ``--exec``'s text on the kernel's command line, base64-encoded,
        and the kernel holds 2,048 bytes. With the script on it, a kernel tier's
        guest on the Debian 13 root measured 1,946 bytes from a checkout at
        /tmp/ci28 and 2,330 from one 53 characters long, whose kernel dies
        booting (2026-11-30)."""
        kernel = self.kernel or find_kernel()
        use_kvm = kvm_usable() if self.kvm is None else self.kvm
        image = kernel if self.compressed else boot_image(kernel)
        argv = [vng_path(), "--run", image, "--verbose", "--cpus", str(self.cpus),
                "--memory", self.memory,
                "--append", "modprobe.blacklist=" + ",".join(COLDPLUG_SKIP)]
        for arg in self.kernel_args:
            argv += ["--append", arg]
        if not use_kvm:
            # under TCG, 9p: virtme-ng tries virtiofsd first (and its microvm
            # machine, with KVM only) and, where virtiofsd fails to start, as on
            # the development VM, waits 1.6-3 s for it before falling back to 9p
            argv.append("--force-9p")
        if self.root:
            argv += ["--root", self.root]
        for guest_path, host_path in self.binds:
            argv.append(f"--rwdir={guest_path}={host_path}")
        for d in [self.out_dir, *self.rwdirs]:
            # virtme-ng reads a bare path as one inside --root: name both ends
            argv.append(f"--rwdir={d}={d}" if self.root else f"--rwdir={d}")
        if self.cached:
            argv.append(f"--rodir={CODE_MOUNT}=/")
        if not use_kvm:
            argv.append("--disable-kvm")
        qemu: List[str] = []
        for i, nic in enumerate(self.nics):
            qemu += nic.qemu_args(i)
        qemu += self.qemu_opts
        if qemu:
            argv.append("--qemu-opts=" + " ".join(qemu))  # "=": the value starts with "-"
        return argv + ["--exec", f"sh {shlex.quote(guest_file(self.out_dir, self.name, 'script.sh'))}"]


@dataclass
class GuestResult:
    name: str
    returncode: Optional[int]
    stdout: str
    console: str
    seconds: float
    timed_out: bool = False
    #: the console's line that says the kernel died before its init ran (then
    #: nothing of ``command`` ran: :data:`BOOT_DEATH`), else None
    died_booting: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


#: A kernel that prints one of these before its init runs has died and halts
#: (e.g. a command line over the kernel's 2,048 bytes: "kernel BUG at
#: lib/string_helpers.c", a fortify check in start_kernel).
BOOT_DEATH = ("Kernel panic - not syncing", "PANIC: early exception", "kernel BUG at")


class RunningGuest:
    """A guest started in the background (see :func:`start`)."""

    def __init__(self, guest: Guest, stdin: bool = False) -> None:
        self.guest = guest
        make_dirs(guest.out_dir)  # results/vm/...: a link there is refused, never followed
        self.console_path = os.path.join(guest.out_dir, f"{guest.name}.console.log")
        self.stdout_path = os.path.join(guest.out_dir, f"{guest.name}.stdout.log")
        self._out: IO[str] = open_new(self.stdout_path, replace=True)
        self._err: IO[str] = open_new(self.console_path, replace=True)
        self._booted = False
        if guest.hold:  # what the guest's first command holds in its RAM
            with open_new(guest_file(guest.out_dir, guest.name, "hold.list"), replace=True) as f:
                held = guest.hold if guest.root else hold_files(guest.hold)
                f.write("".join(x + "\n" for x in held))
        if guest.cached:  # what the guest's first command mounts again, cached
            with open_new(guest_file(guest.out_dir, guest.name, "cache.list"), replace=True) as f:
                f.write(f"{guest.code_tag()} {CODE_MOUNT}\n" +
                        "".join(f"{host} {path}\n" for path, host in guest.cached))
        with open_new(guest_file(guest.out_dir, guest.name, "script.sh"), replace=True) as f:
            f.write(guest.script())
        argv = guest.argv()
        for nic in guest.nics:
            if not nic.listen:
                _wait_for_peer(guest.name, nic.wire)
        log.info("guest %s: %s", guest.name, " ".join(shlex.quote(a) for a in argv))
        env = dict(os.environ)
        env["PATH"] = os.path.dirname(vng_path()) + os.pathsep + env.get("PATH", "")
        env.pop("NSLAB_RUN", None)  # QEMU is no lab process, unless it is the lab's
        if guest.run_tag:
            env["NSLAB_RUN"] = guest.run_tag
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                     stdout=self._out, stderr=self._err, text=True, env=env,
                                     start_new_session=True, cwd=guest.out_dir,
                                     preexec_fn=_sched_idle if guest.idle else None)

    def send(self, line: str) -> None:
        """Write a line to the guest command's stdin (started with ``stdin=True``)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def wait(self, timeout: Optional[float] = None) -> GuestResult:
        """Wait for the guest (at most its own timeout); kill it if it overruns."""
        left = self.guest.timeout - (time.monotonic() - self.t0)
        timeout = left if timeout is None else min(timeout, left)
        timed_out = False
        end = time.monotonic() + max(0.0, timeout)
        rc: Optional[int] = None
        dead: Optional[str] = None
        try:
            while True:
                try:
                    rc = self.proc.wait(timeout=max(0.0, min(2.0, end - time.monotonic())))
                    break
                except subprocess.TimeoutExpired:
                    dead = self._died_booting()
                    if dead:
                        log.error("guest %s: its kernel died while booting (%s); stopped",
                                  self.guest.name, dead)
                        self.kill()
                        break
                    if time.monotonic() >= end:
                        timed_out = True
                        self.kill()
                        break
        finally:
            self.close()
        if rc is not None and dead is None and not self._booted:
            dead = self._died_booting()  # it died, and QEMU ended before a poll saw it
        return GuestResult(self.guest.name, rc, _read(self.stdout_path), _read(self.console_path),
                           time.monotonic() - self.t0, timed_out, died_booting=dead)

    def _died_booting(self) -> Optional[str]:
        """The line that says the guest's kernel died before its init ran
        (:data:`BOOT_DEATH`: it then halts, and QEMU runs on until the
        deadline), else None."""
        if self._booted:
            return None
        try:
            with open(self.console_path, "rb") as f:
                head = f.read(1 << 20).decode("utf-8", "replace")
        except OSError:
            return None
        for line in head.splitlines():
            if "virtme-ng-init:" in line or "Run /init as init process" in line:
                self._booted = True
                return None
            if any(m in line for m in BOOT_DEATH):
                return line.strip()[:200]
        return None

    def kill(self) -> None:
        """Kill vng and QEMU (the whole process group)."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(timeout=5)
                return
            except subprocess.TimeoutExpired:
                continue

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        for f in (self._out, self._err, self.proc.stdin):
            if f is not None and not f.closed:
                try:
                    f.close()
                except OSError:
                    pass

    def __enter__(self) -> "RunningGuest":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _sched_idle() -> None:
    """In the child, before vng starts: the SCHED_IDLE policy, which QEMU inherits."""
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def _wait_for_peer(name: str, wire: str) -> None:
    """Wait until the peer's QEMU listens on ``wire``: QEMU 7.2 connects a stream
    netdev once, at start, and does not retry."""
    deadline = time.monotonic() + PEER_WAIT_S
    while not listening_abstract(wire):
        if time.monotonic() > deadline:
            raise LabError(f"guest {name}: its NIC's peer is not listening on @{wire} after "
                           f"{PEER_WAIT_S:.0f} s (start the listening guest first; its "
                           "console log says why it did not)")
        time.sleep(0.1)


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def start(guest: Guest, stdin: bool = False) -> RunningGuest:
    """Start ``guest`` in the background."""
    return RunningGuest(guest, stdin=stdin)


def run(guest: Guest) -> GuestResult:
    """Run ``guest`` to completion (or its timeout)."""
    with start(guest) as g:
        return g.wait()


def require() -> None:
    """Raise :class:`CapabilityError` unless guests can run here."""
    for tool, pkg in (("qemu-system-x86_64", "qemu-system-x86"), ("busybox", "busybox-static")):
        if not shutil.which(tool):
            raise CapabilityError(f"{tool} is missing: run `make test-kernel` (apt {pkg})")
    vng_path()
    find_kernel()


def describe(kernel: Optional[str] = None) -> Dict[str, object]:
    """What a guest will be: kernel, accelerator (for reports and provenance).
    ``kernel``: a vmlinuz (default :func:`find_kernel`'s)."""
    kernel = kernel or find_kernel()
    return {"kernel": kernel_release(kernel), "vmlinuz": kernel,
            "accelerator": "kvm" if kvm_usable() else "tcg"}
