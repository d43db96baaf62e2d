"""The RFC 2544 virtual bed without a guest: the QEMU command line (icount,
one vCPU, no KVM, the run's tag), what its provenance records, the report's
statement of the bed, the claims at the bed's scale, the shared CPU's layout,
and the nanosecond idle counter it reads (captured /proc/timer_list)."""
import glob
import json
import os
import shutil

import pytest

from nslab.experiments.rfc2544 import bed, virtual
from nslab.experiments.rfc2544.claims import bed_scale, paper_rows
from nslab.experiments.rfc2544.config import Rfc2544Config
from nslab.traffic.counters import idle_seconds_ns

from tests.conftest import data


def _guest(tmp_path, **over):
    cfg = Rfc2544Config.preset("quick", **over)
    return virtual.guest(cfg, str(tmp_path), "nl1a2b", "/boot/vmlinuz-6.1.0-56-amd64")


def test_the_guest_counts_instructions_on_one_vcpu_without_kvm(tmp_path):
    g = _guest(tmp_path)
    argv = g.argv()
    assert "--disable-kvm" in argv  # vng would add -accel kvm and -cpu host, which icount refuses
    assert argv[argv.index("--cpus") + 1] == "1"  # icount runs one vCPU thread (no MTTCG)
    shift = Rfc2544Config.preset("quick").vcpu_shift
    assert f"--qemu-opts=-icount shift={shift},sleep=off" in argv
    assert argv[argv.index("--run") + 1] == "/boot/vmlinuz-6.1.0-56-amd64"
    # the run directory is shared read-write: records land there as they are measured
    assert f"--rwdir={tmp_path}" in argv
    # no transparent huge pages in the guest, so its khugepaged never wakes in a trial
    appended = [argv[i + 1] for i, a in enumerate(argv) if a == "--append"]
    assert appended[0].startswith("modprobe.blacklist=")
    assert appended[1:] == ["transparent_hugepage=never"]
    assert argv[-1] == f"sh {g.out_dir}/{g.name}.script.sh"
    script = g.script()
    # nothing from the cwd or the environment; no site start-up (nslab.hosts.pyboot)
    from nslab.hosts import vm
    assert f"-I -S {vm.PYBOOT} nslab.experiments.rfc2544.inguest --run-dir" in script
    assert f"{bed.GUEST_ENV}=1" in script and "NSLAB_TIMEOUT_SCALE=" in script
    assert g.run_tag == "nl1a2b" and g.kvm is False and g.cpus == 1


def test_the_shift_is_the_configured_one_and_bounded():
    assert virtual.qemu_opts(4) == ["-icount", "shift=4,sleep=off"]
    assert virtual.instructions_per_s(2) == 250e6
    from nslab.run.study import ConfigError
    with pytest.raises(ConfigError, match="vcpu_shift"):
        Rfc2544Config.preset("quick", vcpu_shift=9)


def test_qemu_carries_the_run_tag_so_clean_finds_it(tmp_path, monkeypatch):
    """RunningGuest gives vng (and so QEMU) NSLAB_RUN only for a lab's guest."""
    from nslab.hosts import vm
    seen = {}

    class FakePopen:
        stdin = None

        def __init__(self, argv, **kw):
            seen["env"] = kw["env"]
            self.pid = os.getpid()

        def poll(self):
            return 0
    monkeypatch.setattr(vm.subprocess, "Popen", FakePopen)
    monkeypatch.setattr(vm, "hold_files", lambda programs: ["/usr/bin/ip"])  # no ldd run
    monkeypatch.setenv("NSLAB_RUN", "nlffff")
    g = _guest(tmp_path)
    vm.RunningGuest(g).close()
    assert seen["env"]["NSLAB_RUN"] == "nl1a2b"
    g.run_tag = None
    vm.RunningGuest(g).close()
    assert "NSLAB_RUN" not in seen["env"]


def test_describe_names_the_clock_the_kernel_and_the_scale(monkeypatch):
    monkeypatch.setattr(virtual, "qemu_version", lambda: "QEMU emulator version 7.2.22")
    cfg = Rfc2544Config.preset("quick", vcpu_shift=2, virtual_scale=0.1)
    d = virtual.describe(cfg, "/x/boot/vmlinuz-6.1.0-56-amd64")
    assert d["bed"] == "virtual" and d["icount_shift"] == 2 and d["vcpus"] == 1
    assert d["instructions_per_s"] == 250e6 and d["kernel"] == "6.1.0-56-amd64"
    assert d["scale"] == 0.1 and d["qemu"].startswith("QEMU") and "tcg" in d["accelerator"]
    assert d["kernel_args"] == ["transparent_hugepage=never"]


def test_presets_run_on_the_virtual_bed_and_old_runs_read_as_real():
    assert Rfc2544Config.preset("quick").bed == "virtual"
    assert Rfc2544Config.preset("default").bed == "virtual"
    # a run stored before there was a virtual bed has no `bed`: it ran on the real one
    assert Rfc2544Config.saved({"trial": 2.0}).bed == "real"
    assert Rfc2544Config.saved({"bed": "virtual"}).bed == "virtual"
    cfg = Rfc2544Config.preset("quick", virtual_scale=0.1)
    assert cfg.scale() == 0.1 and cfg.line_bps() == pytest.approx(10e6)
    real = Rfc2544Config.preset("quick", bed="real")
    assert real.scale() == 1.0 and real.line_bps() == pytest.approx(100e6)


def test_the_shared_layout_puts_the_sink_above_the_generator_above_its_napi_thread(monkeypatch):
    assert bed.REAL.tester_args("send") == ["--cpu", "0"] and not bed.REAL.shared
    assert bed.SHARED.shared and bed.SHARED.cpus == [0]
    send, recv = bed.SHARED.tester_args("send"), bed.SHARED.tester_args("recv")
    assert send == ["--cpu", "0", "--fifo", str(bed.SHARED.tester_fifo + 1)]
    assert recv == ["--cpu", "0", "--fifo", str(bed.SHARED.tester_fifo + 2)]
    monkeypatch.delenv(bed.GUEST_ENV, raising=False)
    assert bed.layout_here() is bed.REAL
    monkeypatch.setenv(bed.GUEST_ENV, "1")
    assert bed.layout_here() is bed.SHARED


@pytest.mark.parametrize("path", sorted(glob.glob(data("timer_list", "*.txt"))))
def test_idle_to_the_nanosecond_agrees_with_proc_stat(path):
    """Captured together: /proc/timer_list's idle and iowait sleep times, per
    CPU, against /proc/stat's idle + iowait (USER_HZ = 100)."""
    with open(path) as f:
        ns = idle_seconds_ns(f.read())
    with open(path[:-4] + ".stat") as f:
        rows = [line.split() for line in f if line.startswith("cpu") and line[3].isdigit()]
    ticks = [(int(r[4]) + int(r[5])) / 100 for r in rows]
    assert len(ns) == len(ticks) > 0
    for a, b in zip(ns, ticks):
        assert abs(a - b) < 0.5, (ns, ticks)  # the two reads were a few ms apart


def test_idle_to_the_nanosecond_is_empty_without_the_tick_layers_figures():
    assert idle_seconds_ns("Timer List Version: v0.10\ncpu: 0\n clock 0:\n") == []


def _virtual_run(tmp_path):
    """The stored RFC 2544 run, as if measured on the virtual bed at scale 0.1."""
    src = data("rfc2544_run")
    dst = tmp_path / "r"
    shutil.copytree(src, dst)
    prov = json.load(open(dst / "provenance.json"))
    prov["config"].update(bed="virtual", virtual_scale=0.1, vcpu_shift=2)
    prov["virtual_bed"] = {"bed": "virtual", "qemu": "QEMU emulator version 7.2.22",
                           "accelerator": "tcg (no KVM)", "icount_shift": 2,
                           "instructions_per_s": 250e6, "vcpus": 1, "memory": "1G",
                           "kernel": "6.1.0-56-amd64", "scale": 0.1, "layout": "tester at FIFO",
                           "wall_s": 123.4}
    with open(dst / "provenance.json", "w") as f:
        json.dump(prov, f)
    return dst, prov


def test_the_report_says_what_the_virtual_bed_is_and_is_not(tmp_path):
    from nslab.experiments.rfc2544.report import write_report
    run, _ = _virtual_run(tmp_path)
    rep = write_report(str(run))
    md = open(run / "report.md").read()
    assert "**The virtual bed.**" in md
    assert "-icount shift=2,sleep=off" in md and "250 M instructions per guest second" in md
    assert "6.1.0-56-amd64" in md and "QEMU emulator version 7.2.22" in md
    assert "caches, memory bandwidth, real NICs, interrupts, DMA" in md
    assert "123 s of wall time" in md and "0.1 of the paper's rates" in md
    assert rep.claims


def test_the_report_says_the_testers_clock_ran_apart_only_where_a_trial_was_offset(tmp_path):
    from nslab.experiments.rfc2544.report import write_report
    run, prov = _virtual_run(tmp_path)
    write_report(str(run))
    assert "tester's clock runs apart" not in open(run / "report.md").read()  # an older run
    lines = []
    for line in open(run / "records.jsonl"):
        rec = json.loads(line)
        for t in (rec["measurements"].get("trials") or []) if rec.get("kind") == "point" else []:
            t.update(asked_fps=round(t["target_fps"] * 1.002, 3), tester_clock_offset_pct=0.2)
        lines.append(json.dumps(rec))
    (run / "records.jsonl").write_text("\n".join(lines) + "\n")
    prov["virtual_bed"]["kernel_hz"] = 250
    (run / "provenance.json").write_text(json.dumps(prov))
    write_report(str(run))
    md = open(run / "report.md").read()
    assert ("the tester's clock runs apart from the DUT's, as two boxes' oscillators do (by one "
            "frame period or one tick of the guest's kernel (250 Hz)") in md


def test_the_guest_kernels_tick_is_read_from_the_config_beside_it(tmp_path):
    from nslab.experiments.rfc2544.virtual import kernel_hz
    boot = tmp_path / "boot"
    boot.mkdir()
    (boot / "vmlinuz-6.1.0-57-amd64").write_bytes(b"")
    assert kernel_hz(str(boot / "vmlinuz-6.1.0-57-amd64")) is None  # no config beside it
    (boot / "config-6.1.0-57-amd64").write_text("# CONFIG_HZ_100 is not set\nCONFIG_HZ_250=y\n"
                                                "CONFIG_HZ=250\n")
    assert kernel_hz(str(boot / "vmlinuz-6.1.0-57-amd64")) == 250


def test_the_paper_is_set_beside_the_virtual_bed_at_its_scale(tmp_path):
    from nslab.experiments.rfc2544.claims import claims
    from nslab.store.published import load_published
    _, prov = _virtual_run(tmp_path)
    pub = load_published("rfc2544")
    assert bed_scale(prov) == 0.1 and bed_scale({"config": {}}) == 1.0
    assert bed_scale({"config": {"bed": "virtual", "virtual_scale": "x"}}) == 1.0
    # Table 3's loads as the bed offered them: the paper's times the scale
    rows = paper_rows(pub, 0.1)
    assert 6622.5 in rows and rows[6622.5][0] == 66225
    from nslab.experiments.rfc2544.records import SCHEMA
    recs = SCHEMA.load(str(tmp_path / "r"))
    made = {c.claim: c for c in claims(recs, ["bridge", "router"], pub, prov)}
    knee = made["The bridge saturates at ~66 kfps of 64-byte frames (Table 3)"]
    assert "66.2 kfps (Table 3); 6.62 kfps at the bed's scale 0.1" in knee.published
    occupancy = made["bridge: occupancy vs load follows the paper's Table 3"]
    assert "set beside ours at 0.1 of each load" in occupancy.published


def test_pyboot_runs_a_module_as_main_with_its_arguments_and_no_pth_file():
    """The guest's Python starts without site (``-I -S``): pyboot finds this
    nslab and the venv's packages, and runs the module as ``-m`` would, with
    its arguments; no ``.pth`` file ran (this machine's start an editable
    install's finder, distutils' shim and certifi)."""
    import subprocess
    import sys
    from nslab.hosts import vm
    env = {k: v for k, v in os.environ.items() if k != bed.GUEST_ENV}
    res = subprocess.run([sys.executable, "-I", "-S", vm.PYBOOT, "nslab.experiments.rfc2544.inguest",
                          "--run-dir", "/nonexistent", "--run-id", "nl1a2b"],
                         capture_output=True, text=True, env=env, cwd="/", timeout=60)
    # the module ran as __main__, parsed its arguments and refused outside a guest
    assert res.returncode == 2 and "inside the virtual bed's guest only" in res.stderr, res.stderr
    probe = ("import runpy, sys; sys.argv = [sys.argv[1], 'nslab.errors']; "
             "runpy.run_path(sys.argv[0], run_name='__main__'); import nslab, pydantic; "
             "print(nslab.__file__); print(sorted(m for m in ('certifi', '_distutils_hack') "
             "if m in sys.modules)); print(sys.flags.no_site, sys.flags.isolated)")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", probe, vm.PYBOOT], capture_output=True,
                         text=True, cwd="/", timeout=60, check=True).stdout.splitlines()
    assert os.path.realpath(out[0]) == os.path.realpath(
        os.path.join(os.path.dirname(os.path.dirname(vm.PYBOOT)), "__init__.py"))
    assert out[1:] == ["[]", "1 1"]
    res = subprocess.run([sys.executable, "-I", "-S", vm.PYBOOT], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 2 and "usage:" in res.stderr


@pytest.mark.parametrize("text, mode", [("always [madvise] never\n", "madvise"),
                                        ("always madvise [never]\n", "never"),
                                        ("[always] madvise never\n", "always"),
                                        ("", "unknown")])
def test_the_guest_says_which_transparent_huge_pages_it_booted_with(tmp_path, text, mode):
    from nslab.experiments.rfc2544.inguest import thp_mode
    f = tmp_path / "enabled"
    f.write_text(text)
    assert thp_mode(str(f)) == mode
    assert thp_mode(str(tmp_path / "missing")) == "unknown"
