"""Choosing a stock kernel and a guest root for QEMU guests, without booting one."""
import os
import time

import pytest

from nslab.hosts import vm
from nslab.errors import CapabilityError, InputError


def _unpack(cache, folder, release, link=None):
    """A kernel laid out as scripts/setup-kernel.sh leaves it (boot/vmlinuz-<release>)."""
    boot = cache / folder / "boot"
    boot.mkdir(parents=True)
    (boot / f"vmlinuz-{release}").write_bytes(b"")
    if link:
        os.symlink(folder, cache / link)
    return str(boot / f"vmlinuz-{release}")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.delenv("NSLAB_KERNEL", raising=False)
    c = tmp_path / "kernel"
    c.mkdir()
    return c


def test_a_kernel_is_found_by_its_distribution_link_or_folder(cache):
    k61 = _unpack(cache, "linux-image-6.1.0-56-amd64", "6.1.0-56-amd64", link="bookworm")
    k612 = _unpack(cache, "linux-image-6.12.118+deb13-amd64", "6.12.118+deb13-amd64", link="trixie")
    os.symlink("linux-image-6.1.0-56-amd64", cache / "current")
    assert vm.find_kernel(str(cache), name="trixie").endswith("vmlinuz-6.12.118+deb13-amd64")
    assert vm.find_kernel(str(cache), name="bookworm").endswith("vmlinuz-6.1.0-56-amd64")
    assert vm.find_kernel(str(cache), name="linux-image-6.12.118+deb13-amd64") == k612
    # without a name: this machine's release's (current), not the newest
    assert vm.find_kernel(str(cache)).endswith("current/boot/vmlinuz-6.1.0-56-amd64")
    assert vm.kernel_release(k61) == "6.1.0-56-amd64"


def test_a_missing_or_escaping_kernel_name_is_refused(cache):
    with pytest.raises(CapabilityError, match="KERNEL_DIST=trixie scripts/setup-kernel.sh"):
        vm.find_kernel(str(cache), name="trixie")
    for bad in ("../kernel", "/boot", ".."):
        with pytest.raises(InputError, match="name a kernel"):
            vm.find_kernel(str(cache), name=bad)


def _guest(**kw):
    return vm.Guest("g", "true", "/out", kernel="/k/boot/vmlinuz-6.12", kvm=False, cwd="/repo",
                    **kw)


def _argv(monkeypatch, **kw):
    monkeypatch.setattr(vm, "vng_path", lambda: "/opt/vng")
    return _guest(**kw).argv()


def test_the_host_root_guest_shares_folders_by_their_own_path(monkeypatch):
    argv = _argv(monkeypatch, rwdirs=["/more"])
    assert "--root" not in argv
    assert [a for a in argv if a.startswith("--rwdir")] == ["--rwdir=/out", "--rwdir=/more"]
    assert argv[:3] == ["/opt/vng", "--run", "/k/boot/vmlinuz-6.12"]
    # the script is a file in the shared out_dir, not text on the kernel's command line
    assert argv[-2:] == ["--exec", "sh /out/g.script.sh"]
    assert _guest().script() == ("export MPLCONFIGDIR=/tmp/nslab-mpl; "
                                 "export PYDANTIC_DISABLE_PLUGINS=__all__; cd /repo && true\n")


def test_a_guest_exports_its_defaults_and_the_callers_values_over_them():
    """matplotlib's cache goes to /tmp (a guest's /root is read-only) unless the
    caller names another; values are quoted for the guest's shell."""
    assert _guest(env={"MPLCONFIGDIR": "/out/mpl", "A": "x y"}).script() == (
        "export A='x y'; export MPLCONFIGDIR=/out/mpl; "
        "export PYDANTIC_DISABLE_PLUGINS=__all__; cd /repo && true\n")


def test_the_kernel_command_line_does_not_grow_with_the_command(monkeypatch):
    """virtme-ng puts --exec's text on the kernel's command line (2,048 bytes,
    base64): a long command, or a checkout at a long path, must not reach it."""
    long = "x" * 3000
    argv = _argv(monkeypatch, env={"A": long})
    assert argv[-1] == "sh /out/g.script.sh" and long not in " ".join(argv)
    assert _argv(monkeypatch, env={"A": "y"})[-1] == "sh /out/g.script.sh"


def test_a_running_guest_writes_its_script_where_argv_names_it(tmp_path, monkeypatch):
    """RunningGuest writes the script before it starts vng, through no link."""
    seen = {}

    class FakePopen:
        def __init__(self, argv, **kw):
            seen["argv"] = argv

    monkeypatch.setattr(vm, "vng_path", lambda: "/opt/vng")
    monkeypatch.setattr(vm.subprocess, "Popen", FakePopen)
    out = tmp_path / "out"
    out.mkdir()
    g = vm.Guest("g", "echo hi", str(out), kernel="/k/boot/vmlinuz-6.12", kvm=False,
                 cwd="/repo", env={"A": "x y"})
    (out / "g.script.sh").symlink_to(tmp_path / "elsewhere")  # replaced, never followed
    vm.RunningGuest(g)
    path = seen["argv"][-1].split(" ", 1)[1]
    assert path == str(out / "g.script.sh") and not (out / "g.script.sh").is_symlink()
    assert not (tmp_path / "elsewhere").exists()
    assert (out / "g.script.sh").read_text() == g.script()
    assert g.script().endswith("cd /repo && echo hi\n")


def test_a_guest_on_another_root_names_both_ends_and_mounts_binds_first(monkeypatch):
    """virtme-ng reads a bare --rwdir path as one inside --root: every share names
    guest and host paths, and the checkout is mounted before the folders inside it."""
    argv = _argv(monkeypatch, root="/r/debian13", rwdirs=["/more"],
                 binds=[("/repo", "/repo"), ("/repo/.cache", "/r/debian13/var/cache/nslab-repo")])
    assert argv[argv.index("--root") + 1] == "/r/debian13"
    assert [a for a in argv if a.startswith("--rwdir")] == [
        "--rwdir=/repo=/repo", "--rwdir=/repo/.cache=/r/debian13/var/cache/nslab-repo",
        "--rwdir=/out=/out", "--rwdir=/more=/more"]
    assert "--disable-kvm" in argv


def test_a_nic_pair_is_one_stream_wire_with_one_listening_end():
    a, b = vm.nic_pair("rtl8139", "e1000", tag=3)
    assert a.wire == b.wire and not a.listen and b.listen
    args_a, args_b = " ".join(a.qemu_args(0)), " ".join(b.qemu_args(1))
    assert f"stream,id=nslabnic0,server=off,addr.type=unix,addr.path={a.wire},addr.abstract=on" in args_a
    assert "server=on" in args_b and "rtl8139,netdev=nslabnic0,mac=52:54:00:ab:03:01" in args_a
    with pytest.raises(InputError, match="wire"):
        vm.Nic("e1000", "52:54:00:ab:03:01", "bad,name=x", listen=True)


def test_a_listening_abstract_socket_is_seen_and_a_bound_one_is_not():
    import socket
    name = f"nslab-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind("\0" + name)
        assert not vm.listening_abstract(name)  # bound, not yet listening
        s.listen(1)
        assert vm.listening_abstract(name)
        assert not vm.listening_abstract(name + "-other")
    assert not vm.listening_abstract(name)


def test_a_tcg_guest_boots_on_9p_without_the_machines_unused_drivers(monkeypatch):
    """Under TCG, 9p at once (no wait for virtiofsd), and udev's coldplug
    skips the q35 machine's and the CPU's drivers no guest uses."""
    argv = _argv(monkeypatch)
    assert "--force-9p" in argv
    opt = argv[argv.index("--append") + 1]
    assert opt.startswith("modprobe.blacklist=")
    skipped = opt.split("=", 1)[1].split(",")
    assert {"kvm", "aesni_intel", "ahci"} <= set(skipped)
    # nothing a lab builds: bridges, veth, qdiscs, filters, VLANs, OVS
    assert not {"bridge", "veth", "sch_netem", "cls_u32", "8021q", "openvswitch"} & set(skipped)


def test_a_kvm_guest_leaves_the_filesystem_to_virtme_ng(monkeypatch):
    monkeypatch.setattr(vm, "vng_path", lambda: "/opt/vng")
    argv = vm.Guest("g", "true", "/out", kernel="/k/boot/vmlinuz-6.12", kvm=True,
                    cwd="/repo").argv()
    assert "--force-9p" not in argv and "--disable-kvm" not in argv


def test_a_guest_holds_its_programs_and_their_libraries_in_ram_and_nothing_else(tmp_path):
    """The script a guest runs first, run here with a `touch` that only notes
    its file: the programs asked for and the libraries ldd names, under /usr
    (and its /bin, /lib links) only; a missing program is left out, and so
    is one in a folder outside them (a share the host could see written)."""
    import shutil
    import subprocess
    shim = tmp_path / "shim"
    shim.mkdir()
    noted = tmp_path / "touched"
    (shim / "touch").write_text(f'#!/bin/sh\n[ "$1 $2" = "-c -a" ] && shift 2 && echo "$@" > {noted}\n')
    (shim / "touch").chmod(0o755)
    mine = tmp_path / "mine"
    shutil.copy("/bin/true", mine)
    env = {"PATH": f"{shim}:/usr/sbin:/usr/bin:/sbin:/bin"}
    names = tmp_path / "names"
    names.write_text(f"ip\nno-such-program\n{mine}\n")
    res = subprocess.run(["sh", vm.HOLD_SH, "--names", str(names)], env=env,
                         capture_output=True, text=True, timeout=60)
    held = noted.read_text().split()
    ip = os.path.realpath(shutil.which("ip", path="/usr/sbin:/usr/bin:/sbin:/bin"))
    assert ip in held
    assert any(os.path.basename(f) == "libc.so.6" for f in held)
    assert any(os.path.basename(f).startswith("libmnl.so") for f in held)
    assert all(f.startswith(("/usr/", "/lib/", "/lib64/", "/bin/", "/sbin/")) for f in held)
    assert str(mine) not in held
    assert f"nslab: {len(held)} programs and libraries held" in res.stderr


def test_a_guest_runs_the_hold_before_its_command():
    """On this machine's root the files are found here (a list the guest
    reads: one exec there); on another root, by name in the guest."""
    script = _guest(hold=["ip"]).script()
    assert script.index(f"sh {vm.HOLD_SH} --list /out/g.hold.list; ") < script.index("cd /repo")
    script = _guest(hold=["ip"], root="/r/debian13").script()
    assert script.index(f"sh {vm.HOLD_SH} --names /out/g.hold.list; ") < script.index("cd /repo")
    assert "hold" not in _guest().script()


def test_the_files_held_for_a_guest_on_this_root_are_found_here(tmp_path):
    """What a host-root guest's list holds, and hold.sh --list with it."""
    import shutil
    import subprocess
    files = vm.hold_files(["ip", "no-such-program"])
    ip = os.path.realpath(shutil.which("ip"))
    assert files[0] == ip and any(f.endswith("/libc.so.6") for f in files)
    assert all(f.startswith(vm.HOLD_UNDER) for f in files)
    listed = tmp_path / "hold.list"
    listed.write_text("".join(f + "\n" for f in files) + "/home/else\n")
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "touch").write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/args\n')
    (shim / "touch").chmod(0o755)
    res = subprocess.run(["sh", vm.HOLD_SH, "--list", str(listed)], capture_output=True,
                         text=True, env={"PATH": f"{shim}:/usr/bin:/bin"}, timeout=60)
    assert (tmp_path / "args").read_text().split() == ["-c", "-a", *files]
    assert f"nslab: {len(files)} programs" in res.stderr


@pytest.mark.timed
def test_a_guest_whose_kernel_dies_booting_is_stopped_at_once(tmp_path, monkeypatch):
    """A kernel that dies before its init halts, and QEMU would run on to the
    deadline: the console says so, and the guest is stopped then."""
    import sys
    monkeypatch.setattr(vm, "hold_files", lambda programs: [])
    g = vm.Guest("g", "true", str(tmp_path), kernel="/k/boot/vmlinuz-6.12", kvm=False,
                 cwd="/", timeout=120)
    # the console a kernel with too long a command line printed, then nothing
    dying = ("import sys, time; print('[    0.272891] kernel BUG at lib/string_helpers.c:1027!',"
             " file=sys.stderr, flush=True); time.sleep(100)")
    monkeypatch.setattr(vm.Guest, "argv", lambda self: [sys.executable, "-c", dying])
    t0 = time.monotonic()
    res = vm.run(g)
    assert time.monotonic() - t0 < 30 and not res.ok and not res.timed_out
    assert "kernel BUG at lib/string_helpers.c" in res.console
    assert "kernel BUG at lib/string_helpers.c:1027!" in (res.died_booting or "")
    # a kernel that panics reboots at once (panic=-1) and QEMU ends by itself,
    # maybe before a poll has read the console: the result says so all the same
    # (CI's guest of 2 vCPUs under TCG, 2026-11-30: an int3 oops in early boot)
    panics = ("import sys; print('[    2.676241] Oops: int3: 0000 [#2] PREEMPT SMP NOPTI',"
              " file=sys.stderr); print('[    2.676839] Kernel panic - not syncing: Fatal "
              "exception in interrupt', file=sys.stderr); sys.exit(255)")
    monkeypatch.setattr(vm.Guest, "argv", lambda self: [sys.executable, "-c", panics])
    res = vm.run(g)
    assert res.returncode == 255 and "Kernel panic - not syncing" in (res.died_booting or "")
    # one that reached its init and fails later runs to its end as before
    later = ("import sys; print('[    4.1] virtme-ng-init: starting script', file=sys.stderr);"
             " print('[    9.0] kernel BUG at mm/x.c:1!', file=sys.stderr); sys.exit(3)")
    monkeypatch.setattr(vm.Guest, "argv", lambda self: [sys.executable, "-c", later])
    res = vm.run(g)
    assert res.returncode == 3 and res.died_booting is None


def test_cached_code_folders_come_from_one_more_share_of_the_root(monkeypatch, tmp_path):
    """The folders a guest's Python imports from: one read-only share of the
    host's root (one share: the kernel's command line holds 2,048 bytes, and
    ten shares overflowed it), its 9p tag numbered after the read-write ones,
    and the list cache.sh reads: the share, then each folder's host and guest
    paths."""
    pairs = [("/usr/lib/python3.13", "/r/usr/lib/python3.13"), ("/repo/nslab", "/repo/nslab")]
    argv = _argv(monkeypatch, rwdirs=["/more"], binds=[("/repo", "/repo")], root="/r",
                 cached=pairs)
    assert [a for a in argv if a.startswith("--rodir")] == [f"--rodir={vm.CODE_MOUNT}=/"]
    script = _guest(rwdirs=["/more"], binds=[("/repo", "/repo")], root="/r",
                    cached=pairs).script()
    assert script.index(vm.CACHE_SH) < script.index("cd /repo")
    g = vm.Guest("g", "true", "/out", rwdirs=["/more"], binds=[("/repo", "/repo")], cached=pairs)
    # virtme-ng numbers --rwdir shares first: the bind, the out dir, /more
    assert g.code_tag() == "virtme.initmount3"
    monkeypatch.setattr(vm, "hold_files", lambda programs: [])
    monkeypatch.setattr(vm, "_wait_for_peer", lambda *a: None)
    monkeypatch.setattr(vm.Guest, "argv", lambda self: ["true"])
    g = vm.Guest("g", "true", str(tmp_path), cached=pairs)
    vm.run(g)
    assert (tmp_path / "g.cache.list").read_text().splitlines() == [
        f"virtme.initmount1 {vm.CODE_MOUNT}", "/r/usr/lib/python3.13 /usr/lib/python3.13",
        "/repo/nslab /repo/nslab"]
    # no folder, no share and no first command
    assert "--rodir" not in " ".join(_argv(monkeypatch)) and vm.CACHE_SH not in _guest().script()


def test_code_dirs_are_the_venv_s_python_s_and_this_checkout_s(tmp_path):
    """From a venv's pyvenv.cfg: its Python's standard library and (when the
    venv includes them) the system's packages, under the guest's root on this
    machine; the venv's packages; nslab and the tests. Missing folders are
    left out, and a venv without pyvenv.cfg gives none."""
    root = tmp_path / "root"
    venv = tmp_path / "venv"
    (root / "usr/lib/python3.13").mkdir(parents=True)
    (venv / "lib/python3.13/site-packages").mkdir(parents=True)
    (venv / "bin").mkdir()
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = true\n"
                                     "version = 3.13.5\n")
    got = vm.code_dirs(str(venv / "bin/python"), str(root))
    assert got[0] == ("/usr/lib/python3.13", str(root / "usr/lib/python3.13"))
    assert ("/usr/lib/python3/dist-packages", str(root / "usr/lib/python3/dist-packages")) \
        not in got  # not in this root
    assert (str(venv / "lib/python3.13/site-packages"),) * 2 in got
    checkout = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(vm.__file__))))
    assert (os.path.join(checkout, "nslab"),) * 2 in got
    assert (os.path.join(checkout, "tests"),) * 2 in got
    assert all(g == h for g, h in got[1:])
    assert vm.code_dirs(str(tmp_path / "none/bin/python")) == []


def test_the_venv_s_config_is_read_once_for_the_guest_and_for_pyboot(tmp_path):
    """``code_dirs`` and ``pyboot`` read pyvenv.cfg through one parser: keys
    in any case, values trimmed, a line without '=' skipped; both see
    "include-system-site-packages = True" as including the system's packages."""
    from nslab.hosts import pyboot
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("Home = /usr/bin\nno equals sign here\n"
                                     "Include-System-Site-Packages = True\nversion=3.11.2\n")
    assert pyboot.venv_config(str(venv)) == {
        "home": "/usr/bin", "include-system-site-packages": "True", "version": "3.11.2"}
    assert pyboot._system_too(str(venv))
    root = tmp_path / "root"
    (root / "usr/lib/python3/dist-packages").mkdir(parents=True)
    got = vm.code_dirs(str(venv / "bin/python"), str(root))
    assert ("/usr/lib/python3/dist-packages", str(root / "usr/lib/python3/dist-packages")) in got


def test_a_guest_s_files_are_named_after_it_and_no_other_kind_is_made():
    assert [vm.guest_file("/out", "g", k) for k in vm.GUEST_FILES] == [
        "/out/g.cache.list", "/out/g.hold.list", "/out/g.script.sh"]
    with pytest.raises(ValueError):
        vm.guest_file("/out", "g", "../x")
